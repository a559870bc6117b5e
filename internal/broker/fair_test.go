package broker

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// TestShareBlock: control transactions first, then the tenants in turn,
// each within its share (its first whatever its cost), each tenant's in
// its order, within the block's room.
func TestShareBlock(t *testing.T) {
	const c = controlClass
	for _, tc := range []struct {
		name    string
		classes []string
		costs   []int64
		room    int64
		share   int64
		want    []int
	}{
		{"turns", []string{"a", "a", "a", "b", "c"}, []int64{10, 10, 10, 10, 10}, 1000, 20, []int{0, 3, 4, 1}},
		{"control first", []string{"a", c, "b", c}, []int64{10, 5, 10, 5}, 1000, 10, []int{1, 3, 0, 2}},
		{"first over share", []string{"a", "a", "b"}, []int64{50, 1, 1}, 1000, 10, []int{0, 2}},
		{"room", []string{"a", "b", "a", "b"}, []int64{10, 10, 10, 10}, 25, 100, []int{0, 1}},
		// a's second does not fit the room: a stops there, keeping its
		// order, while b's smaller one still does.
		{"order kept", []string{"a", "a", "a", "b", "b"}, []int64{10, 30, 1, 5, 5}, 30, 100, []int{0, 3, 4}},
		{"one tenant", []string{"a", "a", "a"}, []int64{10, 10, 10}, 1000, 15, []int{0}},
	} {
		got := shareBlock(tc.classes, tc.costs, tc.costs, tc.room, tc.share, nil)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: picked %v, want %v", tc.name, got, tc.want)
		}
	}
	// A certificate's cost is its payload, its size in the block small.
	got := shareBlock([]string{"a", "a", "b"}, []int64{200, 200, 200}, []int64{1 << 20, 1 << 20, 100}, 1000, 1<<20, nil)
	if !slices.Equal(got, []int{0, 2}) {
		t.Errorf("certificates: picked %v", got)
	}
}

// valueBatch is a batch of n records with values of size bytes.
func valueBatch(t testing.TB, n, size int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: make([]byte, size)}
	}
	b, err := record.Build(record.Header{FirstTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func produceTx(t testing.TB, topics ...string) []byte {
	t.Helper()
	var tx fsm.Tx
	tx.Nonce[0] = byte(len(topics))
	for i, topic := range topics {
		tx.Nonce[1+i] = topic[0]
		tx.Commands = append(tx.Commands, fsm.Produce{Topic: topic, Records: batch(t, 4)})
	}
	return fsm.EncodeTx(tx)
}

// TestScheduleShares: a proposal is the mempool's prefix while one tenant
// produces, and shared once a second one does; certificates are classed
// by their payloads, known or peeked, or unknown.
func TestScheduleShares(t *testing.T) {
	var payloads = map[fsm.Digest][]byte{}
	own := map[fsm.Digest]string{}
	f := newFairness(1, func(c fsm.Certificate) ([]byte, bool) { b, ok := payloads[c.Digest]; return b, ok },
		func(d fsm.Digest) (string, bool) { c, ok := own[d]; return c, ok })
	now := time.Unix(1000, 0)
	a1, a2, a3 := produceTx(t, "acme~x"), produceTx(t, "acme~y"), produceTx(t, "acme~z")
	sizes := func(txs [][]byte) []int64 {
		var s []int64
		for _, tx := range txs {
			s = append(s, int64(len(tx)))
		}
		return s
	}
	txs := [][]byte{a1, a2, a3}
	if got, deferred := f.schedule(now, txs, sizes(txs), 1<<20); !slices.Equal(got, []int{0, 1, 2}) || deferred != 0 {
		t.Fatalf("one tenant: picked %v, deferred %d", got, deferred)
	}
	d1 := produceTx(t, "orders")
	txs = [][]byte{a1, a2, d1, a3}
	if got, deferred := f.schedule(now.Add(time.Millisecond), txs, sizes(txs), 1<<20); !slices.Equal(got, []int{0, 2}) || deferred != 2 {
		t.Fatalf("two tenants: picked %v, deferred %d", got, deferred)
	}
	// Past the window without the default tenant, acme is alone again.
	txs = [][]byte{a2, a3}
	if got, _ := f.schedule(now.Add(2*contentionWindow), txs, sizes(txs), 1<<20); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("alone again: picked %v", got)
	}
	// Certificates: one this broker made (globex), one peeked (acme),
	// one unknown; the unknown class takes turns but does not contend.
	cert := func(b byte, size uint32) []byte {
		c := fsm.Certificate{Chain: "test", Size: size, Height: 1, Sigs: make([]fsm.CertSig, 1)}
		c.Digest[0] = b
		return fsm.EncodeCertifiedTx(c)
	}
	own[fsm.Digest{1}] = "globex"
	payloads[fsm.Digest{2}] = produceTx(t, "acme~q")
	later := now.Add(10 * contentionWindow)
	txs = [][]byte{cert(3, 10), cert(1, 10), cert(1, 10), cert(2, 10)}
	// Only one digest 1: the second is the same certificate, classed from
	// the cache; what matters is who took turns.
	got, _ := f.schedule(later, txs, sizes(txs), 1<<20)
	if !slices.Equal(got, []int{0, 1, 3}) {
		t.Fatalf("certificates: picked %v", got)
	}
	f.mu.Lock()
	_, unknownSeen := f.mu.seen[unknownClass]
	f.mu.Unlock()
	if unknownSeen {
		t.Fatal("the unknown class counted as a tenant")
	}
	// Unknown alone with one tenant: not contended, the prefix.
	txs = [][]byte{cert(3, 10), cert(4, 10), cert(1, 10), cert(1, 10)}
	if got, _ := f.schedule(later.Add(10*contentionWindow), txs, sizes(txs), 1<<20); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("unknown and one tenant: picked %v", got)
	}
}

// TestSubmitSplitsTenants: a group commit packs each tenant's produce
// commands, and the commands without records, into transactions of their
// own; while tenants contend, a tenant's transactions stay within the
// share.
func TestSubmitSplitsTenants(t *testing.T) {
	const share = 1500
	b, o, _ := startWith(t, Options{MaxTxBytes: 64 << 10, TenantShare: share}, local.Options{Step: time.Millisecond})
	ctx := context.Background()
	var cmds []fsm.Command
	for i := 0; i < 6; i++ {
		cmds = append(cmds, fsm.Produce{Topic: "acme~t", Records: valueBatch(t, 8, 100)},
			fsm.Produce{Topic: "t", Records: valueBatch(t, 8, 100)},
			fsm.CreateTopic{Name: "c" + string(rune('a'+i)), Partitions: 1, ReplicationFactor: -1})
	}
	if size := commandSize(cmds[0]); 2*size <= share || size > share {
		t.Fatalf("a produce command of %d bytes does not test a share of %d", size, share)
	}
	b.Submit(ctx, cmds...)
	seen := map[string]int{}
	for _, blk := range o.Blocks() {
		for _, raw := range blk.Txs {
			tx, err := fsm.DecodeTx(raw)
			if err != nil {
				continue // the proposer's own (the clock)
			}
			class := commandClass(tx.Commands[0])
			size := 0
			for _, c := range tx.Commands {
				if got := commandClass(c); got != class {
					t.Fatalf("a transaction mixes %q and %q", class, got)
				}
				size += commandSize(c)
			}
			for _, c := range tx.Commands {
				if _, ok := c.(fsm.CreateTopic); ok || class != controlClass {
					seen[class]++
				}
			}
			if isTenantClass(class) && len(tx.Commands) > 1 && size > share {
				t.Fatalf("tenant %q's transaction of %d bytes, share %d", class, size, share)
			}
		}
	}
	if seen["acme"] != 6 || seen[""] != 6 || seen[controlClass] != 6 {
		t.Fatalf("commands by class: %v", seen)
	}
}

// TestHeldWhileContended: while two tenants produce, one tenant's
// transactions beyond heldShares shares wait in the broker, the other's go
// to the orderer at once, and the held ones follow as blocks commit.
func TestHeldWhileContended(t *testing.T) {
	const share = 1000
	b, o, _ := startWith(t, Options{MaxTxBytes: 64 << 10, TenantShare: share}, local.Options{Manual: true})
	ctx := context.Background()
	const n = 12
	var acme []*Pending
	b.fair.saw("", time.Now()) // the default tenant produces too
	for i := 0; i < n; i++ {
		acme = append(acme, b.Enqueue(ctx, fsm.Produce{Topic: "acme~t", Records: valueBatch(t, 8, 100)}))
	}
	other := b.Enqueue(ctx, fsm.Produce{Topic: "t", Records: valueBatch(t, 1, 10)})
	// Every acme command is a transaction of its own (two exceed the
	// share); heldShares shares' worth may be in ordering at once.
	// No block is made until Step: once every transaction is at the
	// orderer or held, the counts stay.
	deadline := time.Now().Add(10 * time.Second)
	for o.Pending()+int(testutil.ToFloat64(b.metrics.held)) < n+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pending, %v held", o.Pending(), testutil.ToFloat64(b.metrics.held))
		}
		time.Sleep(5 * time.Millisecond)
	}
	pending, held := o.Pending(), int(testutil.ToFloat64(b.metrics.held))
	if pending+held != n+1 || held < n+1-(heldShares+2) || pending > heldShares+2 {
		t.Fatalf("%d transactions pending at the orderer, %d held, of %d acme and 1 other", pending, held, n)
	}
	// The other tenant's transaction was not held behind acme's.
	if _, err := o.Step(); err != nil {
		t.Fatal(err)
	}
	if res, errs := other.Wait(ctx); errs[0] != nil || res[0].Code == 0 {
		// Topic t does not exist: answered with its error, not held.
		t.Fatalf("the other tenant's produce: %+v %v", res, errs)
	}
	for done := 0; done < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acme produces answered", done, n)
		}
		if _, err := o.Step(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		done = 0
		for _, p := range acme {
			select {
			case <-p.r.done:
				done++
			default:
			}
		}
	}
}

// classGateCertifier certifies at once, except a tenant's batches, which
// wait for release.
type classGateCertifier struct {
	tenant  string
	release chan struct{}
}

func (g *classGateCertifier) Certify(ctx context.Context, payload []byte) (fsm.Certificate, error) {
	if payloadClass(payload) == g.tenant {
		<-g.release
	}
	return fsm.Certificate{Digest: sha256.Sum256(payload), Size: uint32(len(payload)), Chain: "test", Height: 1, Sigs: make([]fsm.CertSig, 1)}, nil
}

// recordingOrderer records what it is handed.
type recordingOrderer struct {
	mu  sync.Mutex
	txs [][]byte
}

func (o *recordingOrderer) Start(context.Context) error { return nil }
func (o *recordingOrderer) Stop() error                 { return nil }
func (o *recordingOrderer) Submit(_ context.Context, tx []byte) error {
	o.mu.Lock()
	o.txs = append(o.txs, tx)
	o.mu.Unlock()
	return nil
}

func (o *recordingOrderer) digests() []fsm.Digest {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []fsm.Digest
	for _, tx := range o.txs {
		if c, err := fsm.DecodeCertifiedTx(tx); err == nil {
			out = append(out, c.Digest)
		}
	}
	return out
}

// TestCertifiedInClassOrder: a tenant's slow certifications do not hold up
// another tenant's transaction, and a tenant's transactions are handed to
// the orderer in the order they were made.
func TestCertifiedInClassOrder(t *testing.T) {
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := &classGateCertifier{tenant: "acme", release: make(chan struct{})}
	b := New(f, Options{MaxTxBytes: 64 << 10, Certifier: g})
	o := &recordingOrderer{}
	b.Start(o)
	defer b.Close()
	ctx := context.Background()
	// One transaction each: the next is enqueued once the last is sent.
	sent := func(n int) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			b.mu.Lock()
			got := len(b.mu.waiting)
			b.mu.Unlock()
			if got < n {
				return fmt.Errorf("%d transactions sent, want %d", got, n)
			}
			return nil
		})
	}
	b.Enqueue(ctx, fsm.Produce{Topic: "acme~t", Records: valueBatch(t, 1, 10)})
	sent(1)
	b.Enqueue(ctx, fsm.Produce{Topic: "acme~t", Records: valueBatch(t, 2, 10)})
	sent(2)
	b.Enqueue(ctx, fsm.Produce{Topic: "t", Records: valueBatch(t, 3, 10)})
	waitFor := func(n int) []fsm.Digest {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if d := o.digests(); len(d) >= n {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d transactions ordered, want %d", len(o.digests()), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	first := waitFor(1)
	b.mu.Lock()
	class := b.mu.waiting[b.mu.byBatch[first[0]]].class
	b.mu.Unlock()
	if class != "" {
		t.Fatalf("first ordered: class %q, want the default tenant's", class)
	}
	close(g.release)
	all := waitFor(3)
	var made []fsm.Digest
	b.mu.Lock()
	for _, d := range all[1:] {
		made = append(made, d)
		if c := b.mu.waiting[b.mu.byBatch[d]].class; c != "acme" {
			t.Errorf("class %q after the default tenant's", c)
		}
	}
	b.mu.Unlock()
	// Made in order: the first acme transaction has one record.
	var nonces []fsm.Nonce
	b.mu.Lock()
	for _, d := range made {
		nonces = append(nonces, b.mu.byBatch[d])
	}
	recs := []int{}
	for _, n := range nonces {
		recs = append(recs, len(b.mu.waiting[n].slots[0].req.cmds[0].(fsm.Produce).Records))
	}
	b.mu.Unlock()
	if recs[0] >= recs[1] {
		t.Fatalf("acme's transactions ordered out of the order they were made: batch sizes %v", recs)
	}
}

// TestScheduleLightAlternates: while a light tenant and a heavy one both
// wait, every other proposal leaves the heavy one out.
func TestScheduleLightAlternates(t *testing.T) {
	if got := shareBlock([]string{"a", controlClass, "b", "a"}, []int64{1, 1, 1, 1}, []int64{1, 1, 1, 1}, 100, 100, map[string]bool{"a": true}); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("shareBlock skipping a: %v", got)
	}
	f := newFairness(1<<20, nil, func(fsm.Digest) (string, bool) { return "", false })
	big := func(topic string, n byte) []byte {
		tx := fsm.Tx{Commands: []fsm.Command{fsm.Produce{Topic: topic, Records: valueBatch(t, 1, 600<<10)}}}
		tx.Nonce[0] = n
		return fsm.EncodeTx(tx)
	}
	txs := [][]byte{big("acme~t", 1), big("acme~t", 2), produceTx(t, "orders")}
	sizes := []int64{int64(len(txs[0])), int64(len(txs[1])), int64(len(txs[2]))}
	now := time.Unix(1000, 0)
	for i, want := range [][]int{{2}, {0, 2}, {2}, {0, 2}} {
		if got, _ := f.schedule(now.Add(time.Duration(i)*time.Millisecond), txs, sizes, 64<<20); !slices.Equal(got, want) {
			t.Fatalf("proposal %d: %v, want %v", i, got, want)
		}
	}
	// Without a light tenant waiting, nothing is left out for it.
	txs, sizes = txs[:2], sizes[:2]
	if got, _ := f.schedule(now.Add(5*time.Millisecond), txs, sizes, 64<<20); !slices.Equal(got, []int{0}) {
		t.Fatalf("heavy alone while contended: %v, want its share", got)
	}
}
