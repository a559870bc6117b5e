package broker

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/dataplane"
	"github.com/stele-io/stele/internal/fsm"
)

// certifiedChain is the chain id of the brokers startCertified starts.
const certifiedChain = "broker-test"

// startCertified starts a single-validator broker whose transactions go
// through the data plane: only certificates are ordered.
func startCertified(t testing.TB) (*Broker, *local.Orderer, *fsm.FSM, *dataplane.Plane, *fsm.ValidatorSet) {
	t.Helper()
	return startCertifiedAt(t, 1, nil)
}

// startCertifiedAt is startCertified on a chain (certifiedChain) that
// starts under app version version, whose data plane binds its
// certificates to the chain when bound says so.
func startCertifiedAt(t testing.TB, version uint32, bound func() bool) (*Broker, *local.Orderer, *fsm.FSM, *dataplane.Plane, *fsm.ValidatorSet) {
	t.Helper()
	seed := sha256.Sum256([]byte("broker-test"))
	key := ed25519.NewKeyFromSeed(seed[:])
	pub := key.Public().(ed25519.PublicKey)
	var addr [20]byte
	h := sha256.Sum256(pub)
	copy(addr[:], h[:20])
	vs, err := fsm.NewValidatorSet([]fsm.Validator{{Address: addr, PubKey: pub, Power: 1}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dataplane.OpenStore(t.TempDir(), dataplane.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var f *fsm.FSM
	plane, err := dataplane.New(dataplane.Options{Store: store, Key: key, Validators: vs,
		Height: func() int64 { h, _ := f.Info(); return h }, ChainID: certifiedChain, Bound: bound})
	if err != nil {
		t.Fatal(err)
	}
	if f, err = fsm.Open(fsm.Options{Dir: t.TempDir(), Validators: vs, Batches: plane, ChainID: certifiedChain, GenesisAppVersion: version}); err != nil {
		t.Fatal(err)
	}
	b := New(f, Options{MaxTxBytes: 64 << 10, Certifier: plane})
	o := local.New(b.App(), local.Options{Step: time.Millisecond})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Start(o)
	t.Cleanup(func() {
		b.Close()
		o.Stop()
		plane.Close()
		f.Close()
		store.Close()
	})
	return b, o, f, plane, vs
}

// TestCertifiedProduce: produces through the data plane get gap-free
// offsets in the order each caller queued them, the blocks carry only
// certificates, and a replica applying the same blocks from the same
// batches reaches the same app hash.
func TestCertifiedProduce(t *testing.T) {
	b, o, f, plane, vs := startCertified(t)
	ctx := context.Background()
	if r, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	const callers, each = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	offsets := map[int64]bool{}
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Queue every batch before waiting for any: the order queued
			// must be the order of the offsets.
			var pend []*Pending
			for range each {
				pend = append(pend, b.Enqueue(ctx, fsm.Produce{Topic: "t", Records: batch(t, 2)}))
			}
			last := int64(-1)
			for _, p := range pend {
				res, errs := p.Wait(ctx)
				if errs[0] != nil || res[0].Code != 0 {
					t.Errorf("produce: %v %+v", errs[0], res[0])
					return
				}
				if res[0].BaseOffset <= last {
					t.Errorf("offset %d after %d: a caller's batches were reordered", res[0].BaseOffset, last)
				}
				last = res[0].BaseOffset
				mu.Lock()
				offsets[res[0].BaseOffset] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i := int64(0); i < callers*each; i++ {
		if !offsets[2*i] {
			t.Fatalf("no batch at offset %d", 2*i)
		}
	}
	blocks := o.Blocks()
	var txs int
	for _, blk := range blocks {
		for _, tx := range blk.Txs {
			txs++
			if !fsm.IsCertifiedTx(tx) {
				t.Fatalf("height %d carries an inline transaction", blk.Height)
			}
		}
	}
	if txs == 0 {
		t.Fatal("no transactions ordered")
	}
	got := replayHash(t, blocks, fsm.Options{Validators: vs, Batches: plane})
	if _, want := f.Info(); !bytes.Equal(got, want) {
		t.Fatalf("replica app hash %x, broker %x", got, want)
	}
}

// gateCertifier certifies nothing until released, then fails every batch.
type gateCertifier struct {
	started chan struct{}
	release chan struct{}
}

func (g *gateCertifier) Certify(ctx context.Context, payload []byte) (fsm.Certificate, error) {
	g.started <- struct{}{}
	<-g.release
	return fsm.Certificate{}, errors.New("no validator answered")
}

// TestUncertifiedBatches: at most MaxCertifying batches are certified at
// once (the rest wait: back-pressure), and a batch that gets no certificate
// fails its callers with the retriable ErrUncertified and is not ordered.
func TestUncertifiedBatches(t *testing.T) {
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	g := &gateCertifier{started: make(chan struct{}, 100), release: make(chan struct{})}
	b := New(f, Options{Certifier: g, MaxCertifying: 2})
	o := local.New(b.App(), local.Options{Step: time.Millisecond})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Start(o)
	defer func() { b.Close(); o.Stop(); f.Close() }()
	ctx := context.Background()
	var pend []*Pending
	for i := range 6 {
		pend = append(pend, b.Enqueue(ctx, fsm.CreateTopic{Name: fmt.Sprint("t", i), Partitions: 1, ReplicationFactor: -1}))
		time.Sleep(20 * time.Millisecond) // one transaction each
	}
	time.Sleep(200 * time.Millisecond)
	// Two being certified, one more held by the queue to them; the rest
	// wait in the submit loop.
	if n := len(g.started); n > 3 {
		t.Fatalf("%d batches certifying at once with MaxCertifying 2", n)
	}
	close(g.release)
	for _, p := range pend {
		_, errs := p.Wait(ctx)
		if !errors.Is(errs[0], ErrUncertified) {
			t.Fatalf("uncertified batch: %v, want ErrUncertified", errs[0])
		}
	}
	if blocks := o.Blocks(); len(blocks) > 0 {
		for _, blk := range blocks {
			if len(blk.Txs) > 0 {
				t.Fatalf("height %d ordered a transaction without a certificate", blk.Height)
			}
		}
	}
}

// TestCertifiedWrongFormIsRetriable: under app version 2 a certificate
// that names no chain (as a batch certified across the upgrade's block
// has) is refused with fsm.CodeResubmit: the producer is answered at once
// with ErrUncertified, which Kafka clients retry, and nothing is written;
// certified bound to the chain, the same produce applies.
func TestCertifiedWrongFormIsRetriable(t *testing.T) {
	var bound atomic.Bool
	bound.Store(true)
	b, o, f, _, _ := startCertifiedAt(t, 2, bound.Load)
	ctx := context.Background()
	if r, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	if v := f.AppVersion(); v != 2 || !f.CertificatesBound() {
		t.Fatalf("app version %d, bound %v", v, f.CertificatesBound())
	}
	bound.Store(false) // the data plane certifies as it did before the upgrade
	_, err := b.SubmitOne(ctx, fsm.Produce{Topic: "t", Records: batch(t, 2)})
	if !errors.Is(err, ErrUncertified) {
		t.Fatalf("an unbound certificate under version 2: %v, want ErrUncertified", err)
	}
	if hwm := f.View().Partition("t", 0).HighWatermark(); hwm != 0 {
		t.Fatalf("high watermark %d after a refused certificate", hwm)
	}
	bound.Store(true)
	if r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "t", Records: batch(t, 2)}); err != nil || r.Code != 0 || r.BaseOffset != 0 {
		t.Fatalf("bound: %v %+v", err, r)
	}
	var chains []string
	for _, blk := range o.Blocks() {
		for _, raw := range blk.Txs {
			if fsm.IsCertifiedTx(raw) {
				c, err := fsm.DecodeCertifiedTx(raw)
				if err != nil {
					t.Fatal(err)
				}
				chains = append(chains, c.Chain)
			}
		}
	}
	if want := []string{certifiedChain, "", certifiedChain}; fmt.Sprint(chains) != fmt.Sprint(want) {
		t.Fatalf("certificates ordered naming chains %q, want %q", chains, want)
	}
}
