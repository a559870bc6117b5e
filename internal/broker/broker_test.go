package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

func batch(t testing.TB, n int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(fmt.Sprint(i))}
	}
	b, err := record.Build(record.Header{FirstTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func start(t testing.TB) (*Broker, *local.Orderer, *fsm.FSM) {
	t.Helper()
	return startWith(t, Options{MaxTxBytes: 64 << 10}, local.Options{Step: time.Millisecond})
}

// startWith is start with the broker's and the orderer's options.
func startWith(t testing.TB, opts Options, lopts local.Options) (*Broker, *local.Orderer, *fsm.FSM) {
	t.Helper()
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := New(f, opts)
	o := local.New(b.App(), lopts)
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Start(o)
	t.Cleanup(func() {
		b.Close()
		o.Stop()
		f.Close()
	})
	return b, o, f
}

// TestConcurrentProducers: many callers at once get distinct, gap-free
// offsets, and the blocks replayed into a second state machine give the same
// app hash (the whole broker path is deterministic given the blocks).
func TestConcurrentProducers(t *testing.T) {
	b, o, f := start(t)
	ctx := context.Background()
	if r, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	const callers, each = 16, 20
	var mu sync.Mutex
	offsets := map[int64]bool{}
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "t", Records: batch(t, 3)})
				if err != nil || r.Code != 0 {
					t.Errorf("produce: %v %+v", err, r)
					return
				}
				mu.Lock()
				offsets[r.BaseOffset] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i := int64(0); i < callers*each; i++ {
		if !offsets[i*3] {
			t.Fatalf("no batch at offset %d", i*3)
		}
	}
	if hwm := b.View().Partition("t", 0).HighWatermark(); hwm != callers*each*3 {
		t.Fatalf("high watermark %d", hwm)
	}
	blocks := o.Blocks()
	if len(blocks) >= callers*each {
		t.Logf("no coalescing happened: %d blocks for %d produces", len(blocks), callers*each)
	}
	got := replayHash(t, blocks, fsm.Options{})
	if _, want := f.Info(); !bytes.Equal(got, want) {
		t.Fatalf("replica app hash %x, broker %x", got, want)
	}
}

// replayHash applies blocks to a fresh state machine opened with opts (in
// a new directory) and returns its app hash.
func replayHash(t testing.TB, blocks []consensus.Block, opts fsm.Options) []byte {
	t.Helper()
	opts.Dir = t.TempDir()
	replica, err := fsm.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	for _, blk := range blocks {
		if _, err := replica.ApplyBlock(fsm.Block{Height: blk.Height, TimeMs: blk.Time.UnixMilli(), Txs: blk.Txs, Signers: blk.Signers}); err != nil {
			t.Fatal(err)
		}
		if _, err := replica.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	_, hash := replica.Info()
	return hash
}

// TestBadCommandAnsweredAlone: a corrupt batch is refused before ordering,
// and the good commands submitted with it are still applied.
func TestBadCommandAnsweredAlone(t *testing.T) {
	b, _, _ := start(t)
	ctx := context.Background()
	good := batch(t, 2)
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	res, errs := b.Submit(ctx,
		fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1},
		fsm.Produce{Topic: "t", Records: bad},
		fsm.Produce{Topic: "t", Records: good},
	)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if res[0].Code != 0 || res[2].Code != 0 || res[2].BaseOffset != 0 {
		t.Fatalf("good commands: %+v %+v", res[0], res[2])
	}
	if res[1].Code != kerr.CorruptMessage.Code {
		t.Fatalf("corrupt batch: code %d, want CORRUPT_MESSAGE", res[1].Code)
	}
}

// TestTooLarge: a command that cannot fit a transaction fails alone.
func TestTooLarge(t *testing.T) {
	b, _, _ := start(t)
	ctx := context.Background()
	b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})
	big := make([]record.Record, 1)
	big[0] = record.Record{Value: bytes.Repeat([]byte{1}, 100<<10)}
	raw, _ := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, big)
	if _, err := b.SubmitOne(ctx, fsm.Produce{Topic: "t", Records: raw}); err == nil {
		t.Fatal("a 100 KiB command fit a 64 KiB transaction")
	}
}

// TestWaitHonoursContext: a caller that gives up gets its context's error.
func TestWaitHonoursContext(t *testing.T) {
	b, o, _ := start(t)
	o.Stop() // nothing will ever commit now
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})
	if err == nil {
		t.Fatal("submit succeeded with the orderer stopped")
	}
}

// TestEvidenceCounted: committed evidence of misbehavior is counted by kind.
func TestEvidenceCounted(t *testing.T) {
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reg := prometheus.NewRegistry()
	b := New(f, Options{Registerer: reg})
	blk := consensus.Block{Height: 1, Time: time.Unix(1, 0), Misbehavior: []consensus.Misbehavior{
		{Kind: "duplicate-vote", Validator: []byte{1}, Height: 1}}}
	if _, _, err := b.App().FinalizeBlock(blk); err != nil {
		t.Fatal(err)
	}
	if _, err := b.App().Commit(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(b.metrics.evidence.WithLabelValues("duplicate-vote")); got != 1 {
		t.Fatalf("stele_evidence_committed_total{kind=duplicate-vote} = %v", got)
	}
}

// TestOrdererErrorsTranslated: an orderer's refusal reaches callers as the
// broker's own sentinels (ErrMempoolFull, ErrClosed), so that front-ends
// need not import internal/consensus; the orderer's error stays wrapped.
func TestOrdererErrorsTranslated(t *testing.T) {
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := New(f, Options{})
	o := local.New(b.App(), local.Options{Manual: true, MaxPendingTxs: 1})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Start(o)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	create := func(name string) fsm.Command {
		return fsm.CreateTopic{Name: name, Partitions: 1, ReplicationFactor: -1}
	}
	first := b.Enqueue(ctx, create("a")) // fills the one-transaction mempool
	for o.Pending() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the first transaction never reached the orderer")
		}
		time.Sleep(time.Millisecond)
	}
	_, err = b.SubmitOne(ctx, create("b"))
	if !errors.Is(err, ErrMempoolFull) || !errors.Is(err, consensus.ErrMempoolFull) {
		t.Errorf("submit to a full mempool: %v, want ErrMempoolFull wrapping consensus.ErrMempoolFull", err)
	}
	o.Stop()
	_, err = b.SubmitOne(ctx, create("c"))
	if !errors.Is(err, ErrClosed) || !errors.Is(err, consensus.ErrStopped) {
		t.Errorf("submit to a stopped orderer: %v, want ErrClosed wrapping consensus.ErrStopped", err)
	}
	b.Close()
	if _, errs := first.Wait(ctx); !errors.Is(errs[0], ErrClosed) {
		t.Errorf("a transaction pending at Close: %v, want ErrClosed", errs[0])
	}
}

// TestRefusedCertificateIsRetriable: a certificate the orderer refuses
// because the validator set changed since it was made (its signer demoted
// or removed) fails its callers with ErrUncertified, which clients retry
// (REQUEST_TIMED_OUT), not with an unknown error.
func TestRefusedCertificateIsRetriable(t *testing.T) {
	err := orderingError(fmt.Errorf("rejected: %w: ABCD is not a validator", fsm.ErrCertificate))
	if !errors.Is(err, ErrUncertified) || !errors.Is(err, fsm.ErrCertificate) {
		t.Fatalf("a refused certificate: %v, want ErrUncertified wrapping fsm.ErrCertificate", err)
	}
	if err := orderingError(errors.New("something else")); errors.Is(err, ErrUncertified) {
		t.Fatalf("another refusal: %v", err)
	}
}
