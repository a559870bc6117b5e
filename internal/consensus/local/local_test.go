package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/consensus"
)

// errCheck and errInvalid are the toy application's rejections.
var (
	errCheck   = errors.New("toy: refused by CheckTx")
	errInvalid = errors.New("toy: invalid transaction")
	errBroken  = errors.New("toy: disk on fire")
)

// toyApp is a hash chain: the app hash is sha256(previous hash || txs) after
// every block that has transactions and stays the same after an empty one.
// CheckTx refuses transactions starting with "refuse"; ValidateTx rejects
// those starting with "invalid"; FinalizeBlock fails on "explode".
type toyApp struct {
	mu        sync.Mutex
	height    int64
	hash      []byte
	applied   [][]byte // committed transactions, in order
	times     []time.Time
	next      *toyBlock // finalized, not committed
	finalizes int
}

type toyBlock struct {
	height int64
	hash   []byte
	txs    [][]byte
	time   time.Time
}

func (a *toyApp) Info() (int64, []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.height, append([]byte(nil), a.hash...)
}

func (a *toyApp) CheckTx(tx []byte) error {
	if bytes.HasPrefix(tx, []byte("refuse")) {
		return errCheck
	}
	return nil
}

func (a *toyApp) ValidateTx(tx []byte) error {
	if bytes.HasPrefix(tx, []byte("invalid")) {
		return errInvalid
	}
	return nil
}

func (a *toyApp) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finalizes++
	if a.next != nil {
		return nil, nil, fmt.Errorf("toy: block %d finalized twice without Commit", b.Height)
	}
	if b.Height != a.height+1 {
		return nil, nil, fmt.Errorf("toy: got height %d after %d", b.Height, a.height)
	}
	hash := a.hash
	res := make([]consensus.TxResult, len(b.Txs))
	if len(b.Txs) > 0 {
		h := sha256.New()
		h.Write(a.hash)
		for i, tx := range b.Txs {
			if bytes.HasPrefix(tx, []byte("explode")) {
				return nil, nil, errBroken
			}
			if err := a.ValidateTx(tx); err != nil {
				return nil, nil, fmt.Errorf("toy: block %d holds an invalid tx: %w", b.Height, err)
			}
			h.Write(tx)
			res[i] = consensus.TxResult{Data: []byte{byte(i)}}
		}
		hash = h.Sum(nil)
	}
	a.next = &toyBlock{height: b.Height, hash: hash, txs: b.Txs, time: b.Time}
	return res, hash, nil
}

func (a *toyApp) Commit() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next == nil {
		return 0, errors.New("toy: Commit without FinalizeBlock")
	}
	a.height, a.hash = a.next.height, a.next.hash
	a.applied = append(a.applied, a.next.txs...)
	a.times = append(a.times, a.next.time)
	a.next = nil
	return 0, nil
}

func (a *toyApp) snapshot() (height int64, hash []byte, applied []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tx := range a.applied {
		applied = append(applied, string(tx))
	}
	return a.height, append([]byte(nil), a.hash...), applied
}

func start(t *testing.T, app consensus.Application, opts Options) *Orderer {
	t.Helper()
	o := New(app, opts)
	if err := o.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = o.Stop() })
	return o
}

func submit(t *testing.T, o *Orderer, txs ...string) {
	t.Helper()
	for _, tx := range txs {
		if err := o.Submit(context.Background(), []byte(tx)); err != nil {
			t.Fatalf("Submit(%q): %v", tx, err)
		}
	}
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %v: %v", d, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestAutomaticModeCommitsInSubmissionOrder(t *testing.T) {
	app := &toyApp{}
	o := start(t, app, Options{})
	want := []string{"a", "b", "c", "d", "e"}
	submit(t, o, want...)
	eventually(t, 5*time.Second, func() error {
		if _, _, got := app.snapshot(); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("applied %q, want %q", got, want)
		}
		return nil
	})
	blocks := o.Blocks()
	var txs []string
	for i, b := range blocks {
		if b.Height != int64(i+1) {
			t.Errorf("block %d has height %d", i, b.Height)
		}
		if len(b.Txs) == 0 {
			t.Errorf("block %d is empty; Interval 0 must never make empty blocks", b.Height)
		}
		wantTime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
		if !b.Time.Equal(wantTime) {
			t.Errorf("block %d time %v, want %v", b.Height, b.Time, wantTime)
		}
		for _, tx := range b.Txs {
			txs = append(txs, string(tx))
		}
	}
	if !reflect.DeepEqual(txs, want) {
		t.Errorf("blocks hold %q, want %q", txs, want)
	}
}

func TestManualStepRespectsBlockLimits(t *testing.T) {
	app := &toyApp{}
	start0 := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	o := start(t, app, Options{Manual: true, MaxBlockTxs: 2, MaxBlockBytes: 10, StartTime: start0, Step: 250 * time.Millisecond})
	submit(t, o, "aaaa", "bbbb", "cccc", "dd")
	if h := o.Height(); h != 0 {
		t.Fatalf("manual orderer made a block by itself: height %d", h)
	}
	b1, err := o.Step()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(b1.Txs); got != 2 {
		t.Errorf("block 1 has %d txs, want 2 (MaxBlockTxs)", got)
	}
	b2, err := o.Step()
	if err != nil {
		t.Fatal(err)
	}
	// "cccc"+"dd" is 6 bytes and 2 txs: both fit.
	if got := len(b2.Txs); got != 2 {
		t.Errorf("block 2 has %d txs, want 2", got)
	}
	b3, err := o.Step()
	if err != nil {
		t.Fatal(err)
	}
	if len(b3.Txs) != 0 || b3.Height != 3 {
		t.Errorf("Step with nothing pending: got height %d with %d txs, want an empty block 3", b3.Height, len(b3.Txs))
	}
	if want := start0.Add(500 * time.Millisecond); !b3.Time.Equal(want) {
		t.Errorf("block 3 time %v, want %v", b3.Time, want)
	}

	// Bytes bound: 6+6 > 10, so the second tx waits for the next block.
	submit(t, o, "eeeeee", "ffffff")
	b4, _ := o.Step()
	if len(b4.Txs) != 1 {
		t.Errorf("block 4 has %d txs, want 1 (MaxBlockBytes)", len(b4.Txs))
	}
	if err := o.Submit(context.Background(), []byte("01234567890")); !errors.Is(err, ErrTxTooLarge) {
		t.Errorf("Submit of an 11-byte tx with 10-byte blocks: got %v, want ErrTxTooLarge", err)
	}
	if err := o.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o.Pending() != 0 {
		t.Errorf("Flush left %d txs pending", o.Pending())
	}
	_, _, applied := app.snapshot()
	if want := []string{"aaaa", "bbbb", "cccc", "dd", "eeeeee", "ffffff"}; !reflect.DeepEqual(applied, want) {
		t.Errorf("applied %q, want %q", applied, want)
	}
}

func TestRejectedAndInvalidTransactions(t *testing.T) {
	app := &toyApp{}
	o := start(t, app, Options{Manual: true})
	err := o.Submit(context.Background(), []byte("refuse me"))
	if !errors.Is(err, errCheck) {
		t.Fatalf("Submit of a tx CheckTx refuses: got %v, want the app's error", err)
	}
	submit(t, o, "x", "invalid-1", "y")
	b, err := o.Step()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tx := range b.Txs {
		got = append(got, string(tx))
	}
	if want := []string{"x", "y"}; !reflect.DeepEqual(got, want) {
		t.Errorf("block holds %q, want %q: a proposer drops what ValidateTx rejects", got, want)
	}
	if o.Pending() != 0 {
		t.Errorf("the invalid tx is still pending")
	}
}

func TestStartHonoursApplicationHeight(t *testing.T) {
	app := &toyApp{height: 7, hash: []byte("seven")}
	o := start(t, app, Options{Manual: true, Step: time.Minute})
	submit(t, o, "a")
	b, err := o.Step()
	if err != nil {
		t.Fatal(err)
	}
	if b.Height != 8 {
		t.Errorf("first block has height %d, want 8 (app at 7)", b.Height)
	}
	if want := time.Date(2024, 1, 1, 0, 7, 0, 0, time.UTC); !b.Time.Equal(want) {
		t.Errorf("block 8 time %v, want %v", b.Time, want)
	}
}

// TestBlocksReplayToSecondStateMachine checks the deterministic-simulation
// use: the blocks one orderer made, fed to a fresh state machine, give the
// same app hash and the same applied transactions.
func TestBlocksReplayToSecondStateMachine(t *testing.T) {
	app := &toyApp{}
	o := start(t, app, Options{MaxBlockTxs: 3})
	for i := range 20 {
		submit(t, o, fmt.Sprintf("tx-%02d", i))
		if i%7 == 0 {
			submit(t, o, "invalid")
		}
	}
	if err := o.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocks := o.Blocks()
	blocks[0].Txs[0][0] = 'X' // a copy: must not reach the orderer's record
	blocks = o.Blocks()

	replica := &toyApp{}
	for _, b := range blocks {
		if _, _, err := replica.FinalizeBlock(b); err != nil {
			t.Fatal(err)
		}
		if _, err := replica.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	h1, hash1, txs1 := app.snapshot()
	h2, hash2, txs2 := replica.snapshot()
	if h1 != h2 || !bytes.Equal(hash1, hash2) || !reflect.DeepEqual(txs1, txs2) {
		t.Errorf("replica differs: height %d/%d hash %x/%x", h1, h2, hash1, hash2)
	}
	if len(txs1) != 20 {
		t.Errorf("applied %d txs, want 20", len(txs1))
	}
}

func TestManualRunsAreReproducible(t *testing.T) {
	run := func() []consensus.Block {
		o := start(t, &toyApp{}, Options{Manual: true, MaxBlockTxs: 2})
		for i := range 5 {
			submit(t, o, fmt.Sprintf("t%d", i))
		}
		if err := o.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Step(); err != nil {
			t.Fatal(err)
		}
		return o.Blocks()
	}
	if a, b := run(), run(); !reflect.DeepEqual(a, b) {
		t.Errorf("two identical runs made different blocks:\n%v\n%v", a, b)
	}
}

func TestIntervalMakesEmptyBlocks(t *testing.T) {
	app := &toyApp{}
	o := start(t, app, Options{Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.WaitHeight(ctx, 3); err != nil {
		t.Fatalf("no blocks while idle with an Interval: %v", err)
	}
	submit(t, o, "late")
	eventually(t, 5*time.Second, func() error {
		if _, _, txs := app.snapshot(); len(txs) != 1 {
			return fmt.Errorf("applied %q", txs)
		}
		return nil
	})
}

func TestMempoolFullAndLifecycleErrors(t *testing.T) {
	app := &toyApp{}
	o := New(app, Options{Manual: true, MaxPendingTxs: 2})
	if err := o.Submit(context.Background(), []byte("early")); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Submit before Start: got %v, want ErrNotStarted", err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, o, "1", "2")
	if err := o.Submit(context.Background(), []byte("3")); !errors.Is(err, consensus.ErrMempoolFull) {
		t.Errorf("third Submit with MaxPendingTxs 2: got %v, want ErrMempoolFull", err)
	}
	if err := o.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := o.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := o.Submit(context.Background(), []byte("4")); !errors.Is(err, consensus.ErrStopped) {
		t.Errorf("Submit after Stop: got %v, want ErrStopped", err)
	}
	if _, err := o.Step(); !errors.Is(err, consensus.ErrStopped) {
		t.Errorf("Step after Stop: got %v, want ErrStopped", err)
	}

	never := New(app, Options{})
	if err := never.Stop(); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
	if err := never.Start(context.Background()); !errors.Is(err, consensus.ErrStopped) {
		t.Errorf("Start after Stop: got %v, want ErrStopped", err)
	}
	if err := New(app, Options{Step: -time.Second}).Start(context.Background()); err == nil {
		t.Error("Start accepted a negative Step")
	}
}

func TestApplicationFailureStopsOrdering(t *testing.T) {
	app := &toyApp{}
	o := start(t, app, Options{})
	submit(t, o, "ok", "explode")
	eventually(t, 5*time.Second, func() error {
		if o.Err() == nil {
			return errors.New("no failure recorded")
		}
		return nil
	})
	if !errors.Is(o.Err(), errBroken) {
		t.Errorf("Err() = %v, want the app's error", o.Err())
	}
	if err := o.Submit(context.Background(), []byte("after")); !errors.Is(err, errBroken) {
		t.Errorf("Submit after a failure: got %v, want the failure", err)
	}
	if err := o.Flush(context.Background()); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Flush after a failure: got %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := o.WaitHeight(ctx, 100); !errors.Is(err, errBroken) {
		t.Errorf("WaitHeight after a failure: got %v", err)
	}
}

func TestConcurrentSubmitters(t *testing.T) {
	app := &toyApp{}
	o := start(t, app, Options{MaxBlockTxs: 16})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if err := o.Submit(context.Background(), []byte(fmt.Sprintf("w%d-%02d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := o.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _, txs := app.snapshot()
	if len(txs) != 200 {
		t.Fatalf("applied %d txs, want 200", len(txs))
	}
	// Each submitter's transactions stay in its own order.
	last := map[byte]string{}
	for _, tx := range txs {
		w := tx[1]
		if tx <= last[w] {
			t.Fatalf("tx %q after %q: submission order lost", tx, last[w])
		}
		last[w] = tx
	}
}

// openingApp is a toyApp that opens its proposals (consensus.Proposer)
// with "open@<height>@<unix ms>".
type openingApp struct{ toyApp }

func (a *openingApp) OpenProposal(height int64, now time.Time) [][]byte {
	return [][]byte{fmt.Appendf(nil, "open@%d@%d", height, now.UnixMilli())}
}

func (a *openingApp) CheckProposal(int64, time.Time, [][]byte) error { return nil }

// TestProposerOpensBlocks: a consensus.Proposer's opening heads every
// block with transactions, made with the block time as its clock (so
// blocks stay a function of the submissions); an empty block stays empty.
func TestProposerOpensBlocks(t *testing.T) {
	app := &openingApp{}
	start0 := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	o := start(t, app, Options{Manual: true, StartTime: start0})
	submit(t, o, "a", "b")
	b1, err := o.Step()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{fmt.Appendf(nil, "open@1@%d", start0.UnixMilli()), []byte("a"), []byte("b")}
	if !reflect.DeepEqual(b1.Txs, want) {
		t.Errorf("block 1 holds %q, want %q", b1.Txs, want)
	}
	if b2, err := o.Step(); err != nil || len(b2.Txs) != 0 {
		t.Errorf("an empty block holds %q (%v), want nothing", b2.Txs, err)
	}
	if err := o.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}
