package cometbft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/consensus"
)

// fakeApp is a scriptable consensus.Application for adapter unit tests.
// CheckTx and ValidateTx panic on transactions starting with "panic";
// ValidateTx rejects those starting with "bad".
type fakeApp struct {
	height    int64
	hash      []byte
	results   func(b consensus.Block) []consensus.TxResult
	finalErr  error
	commitErr error
	retain    int64
	blocks    []consensus.Block
}

func (f *fakeApp) Info() (int64, []byte) { return f.height, f.hash }

func (f *fakeApp) CheckTx(tx []byte) error {
	if bytes.HasPrefix(tx, []byte("panic")) {
		panic("fake: CheckTx exploded")
	}
	if bytes.HasPrefix(tx, []byte("refuse")) {
		return errToyRefused
	}
	return nil
}

func (f *fakeApp) ValidateTx(tx []byte) error {
	if bytes.HasPrefix(tx, []byte("panic")) {
		var m map[string]int
		m["boom"]++ // a nil map write: a real bug on a malformed input
	}
	if bytes.HasPrefix(tx, []byte("bad")) {
		return errors.New("fake: bad tx")
	}
	return nil
}

func (f *fakeApp) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	if f.finalErr != nil {
		return nil, nil, f.finalErr
	}
	f.blocks = append(f.blocks, b)
	if f.results != nil {
		return f.results(b), f.hash, nil
	}
	res := make([]consensus.TxResult, len(b.Txs))
	for i := range res {
		res[i] = consensus.TxResult{Code: uint32(i), Data: []byte{byte(i)}, Log: fmt.Sprint("tx ", i)}
	}
	if len(b.Txs) > 0 {
		f.hash = append([]byte(nil), b.Txs[len(b.Txs)-1]...)
	}
	return res, f.hash, nil
}

func (f *fakeApp) Commit() (int64, error) { return f.retain, f.commitErr }

type fakeMempool struct {
	removed []types.TxKey
	// txs is what the mempool holds (PrepareProposal's wait reads it);
	// sizes counts the reads of its size.
	mu    sync.Mutex
	txs   types.Txs
	sizes int
}

func (m *fakeMempool) RemoveTxByKey(k types.TxKey) error {
	m.removed = append(m.removed, k)
	return nil
}

func (m *fakeMempool) Size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sizes++
	return len(m.txs)
}

// looked returns how many times the mempool's size was read.
func (m *fakeMempool) looked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sizes
}

// set replaces what the mempool holds.
func (m *fakeMempool) set(txs ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txs = nil
	for _, tx := range txs {
		m.txs = append(m.txs, types.Tx(tx))
	}
}

func (m *fakeMempool) ReapMaxBytesMaxGas(maxBytes, _ int64) types.Txs {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out types.Txs
	for _, tx := range m.txs {
		if types.ComputeProtoSizeForTxs(append(out, tx)) > maxBytes {
			break
		}
		out = append(out, tx)
	}
	return out
}

func newTestAdapter(app consensus.Application, maxTx int64) (*abciApp, *fakeMempool) {
	a := newABCIApp(app, maxTx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mp := &fakeMempool{}
	var r txRemover = mp
	a.mempool.Store(&r)
	return a, mp
}

func protoSize(txs ...string) int64 {
	var tt []types.Tx
	for _, tx := range txs {
		tt = append(tt, types.Tx(tx))
	}
	return types.ComputeProtoSizeForTxs(tt)
}

func TestPrepareProposalKeepsOrderDropsInvalidAndStaysWithinLimit(t *testing.T) {
	a, mp := newTestAdapter(&fakeApp{}, 100)
	ctx := context.Background()
	txs := [][]byte{[]byte("t1"), []byte("bad1"), []byte("panic!"), []byte("t2"), []byte("t3-longer"), []byte("t4")}
	// Room for t1 and t2 but not t3-longer: the proposal stops there (t4
	// would fit but would overtake t3-longer).
	limit := protoSize("t1", "t2") + 3
	res, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: limit, Txs: txs, Height: 5})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]byte{[]byte("t1"), []byte("t2")}; !reflect.DeepEqual(res.Txs, want) {
		t.Errorf("proposal %q, want %q", res.Txs, want)
	}
	if got := protoSize(string(res.Txs[0]), string(res.Txs[1])); got > limit {
		t.Errorf("proposal of %d bytes exceeds MaxTxBytes %d", got, limit)
	}
	wantRemoved := []types.TxKey{types.Tx("bad1").Key(), types.Tx("panic!").Key()}
	if !reflect.DeepEqual(mp.removed, wantRemoved) {
		t.Errorf("removed from the mempool %d txs, want the 2 invalid ones", len(mp.removed))
	}

	// With room for everything, every valid tx is kept in order.
	res, _ = a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 1 << 20, Txs: txs})
	if want := [][]byte{[]byte("t1"), []byte("t2"), []byte("t3-longer"), []byte("t4")}; !reflect.DeepEqual(res.Txs, want) {
		t.Errorf("proposal %q, want %q", res.Txs, want)
	}
	// A limit smaller than the first tx gives an empty proposal.
	res, _ = a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 2, Txs: txs})
	if len(res.Txs) != 0 {
		t.Errorf("proposal %q under a 2-byte limit, want none", res.Txs)
	}
}

// schedulingApp is a fakeApp that is a consensus.Scheduler answering
// pick, whatever it is offered.
type schedulingApp struct {
	fakeApp
	pick    []int
	offered [][]byte
	room    int64
}

func (s *schedulingApp) ScheduleProposal(_ int64, _ time.Time, txs [][]byte, sizes []int64, room int64) []int {
	s.offered, s.room = txs, room
	return s.pick
}

// TestPrepareProposalScheduled: a consensus.Scheduler is offered the valid
// transactions and chooses the proposal's order; what it answers out of
// range, twice, or beyond the limit is left out.
func TestPrepareProposalScheduled(t *testing.T) {
	app := &schedulingApp{pick: []int{1, 0, 7, -1, 1, 2}}
	a, _ := newTestAdapter(app, 100)
	txs := [][]byte{[]byte("t1"), []byte("bad1"), []byte("t2"), []byte("t3-longer")}
	limit := protoSize("t1", "t2") + 3
	res, err := a.PrepareProposal(context.Background(), &abci.RequestPrepareProposal{MaxTxBytes: limit, Txs: txs, Height: 5})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]byte{[]byte("t1"), []byte("t2"), []byte("t3-longer")}; !reflect.DeepEqual(app.offered, want) {
		t.Errorf("offered %q, want the valid %q", app.offered, want)
	}
	if app.room != limit {
		t.Errorf("room %d, want %d", app.room, limit)
	}
	if want := [][]byte{[]byte("t2"), []byte("t1")}; !reflect.DeepEqual(res.Txs, want) {
		t.Errorf("proposal %q, want %q (t3-longer no longer fits)", res.Txs, want)
	}
}

func TestProcessProposalRejectsInvalidOversizedAndPanicking(t *testing.T) {
	a, _ := newTestAdapter(&fakeApp{}, 8)
	ctx := context.Background()
	for _, tc := range []struct {
		txs  []string
		want abci.ResponseProcessProposal_ProposalStatus
	}{
		{nil, abci.ResponseProcessProposal_ACCEPT},
		{[]string{"a", "b"}, abci.ResponseProcessProposal_ACCEPT},
		{[]string{"a", "bad"}, abci.ResponseProcessProposal_REJECT},
		{[]string{"123456789"}, abci.ResponseProcessProposal_REJECT}, // over max_tx_bytes 8
		{[]string{"panic"}, abci.ResponseProcessProposal_REJECT},
	} {
		var txs [][]byte
		for _, tx := range tc.txs {
			txs = append(txs, []byte(tx))
		}
		res, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Txs: txs, ProposerAddress: []byte{1, 2}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.want {
			t.Errorf("ProcessProposal(%q) = %v, want %v", tc.txs, res.Status, tc.want)
		}
	}
}

func TestCheckTxCodes(t *testing.T) {
	a, _ := newTestAdapter(&fakeApp{}, 8)
	ctx := context.Background()
	for _, tc := range []struct {
		tx   string
		code uint32
	}{
		{"ok", abci.CodeTypeOK},
		{"refuse", CodeRejected},
		{"panic", CodeRejected},
		{"123456789", CodeTooLarge},
	} {
		res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: []byte(tc.tx)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Code != tc.code {
			t.Errorf("CheckTx(%q) code %d (%s), want %d", tc.tx, res.Code, res.Log, tc.code)
		}
		if res.Code != abci.CodeTypeOK && res.Log == "" {
			t.Errorf("CheckTx(%q) rejected without a log message", tc.tx)
		}
	}
}

func TestFinalizeBlockAndCommitMapping(t *testing.T) {
	app := &fakeApp{retain: 99}
	a, _ := newTestAdapter(app, 1<<10)
	ctx := context.Background()
	when := time.Date(2031, 1, 2, 3, 4, 5, 6, time.UTC)
	req := &abci.RequestFinalizeBlock{Height: 7, Time: when, Txs: [][]byte{[]byte("x"), []byte("y")}, ProposerAddress: []byte("prop")}
	res, err := a.FinalizeBlock(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := app.blocks[0]
	if got.Height != 7 || !got.Time.Equal(when) || !reflect.DeepEqual(got.Txs, req.Txs) || string(got.Proposer) != "prop" {
		t.Errorf("application got block %+v", got)
	}
	if len(res.TxResults) != 2 || res.TxResults[1].Code != 1 || !bytes.Equal(res.TxResults[1].Data, []byte{1}) || res.TxResults[1].Log != "tx 1" {
		t.Errorf("results %v", res.TxResults)
	}
	if string(res.AppHash) != "y" {
		t.Errorf("app hash %q, want %q", res.AppHash, "y")
	}
	c, err := a.Commit(ctx, &abci.RequestCommit{})
	if err != nil {
		t.Fatal(err)
	}
	if c.RetainHeight != 7 {
		t.Errorf("retain height %d, want 99 capped at the committed height 7", c.RetainHeight)
	}
	app.retain = 3
	if _, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: 8}); err != nil {
		t.Fatal(err)
	}
	if c, _ := a.Commit(ctx, &abci.RequestCommit{}); c.RetainHeight != 3 {
		t.Errorf("retain height %d, want 3", c.RetainHeight)
	}
}

func TestApplicationFailureIsFatal(t *testing.T) {
	ctx := context.Background()

	app := &fakeApp{results: func(consensus.Block) []consensus.TxResult { return nil }}
	a, _ := newTestAdapter(app, 1<<10)
	_, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: 1, Txs: [][]byte{[]byte("x")}})
	if !errors.Is(err, ErrAppFailed) {
		t.Errorf("FinalizeBlock with too few results: got %v, want ErrAppFailed", err)
	}
	if !errors.Is(a.err(), ErrAppFailed) {
		t.Errorf("failure not recorded: %v", a.err())
	}
	if _, err := a.Commit(ctx, &abci.RequestCommit{}); !errors.Is(err, ErrAppFailed) {
		t.Errorf("Commit after a failure: got %v", err)
	}

	disk := errors.New("fake: disk full")
	a2, _ := newTestAdapter(&fakeApp{commitErr: disk}, 1<<10)
	if _, err := a2.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.Commit(ctx, &abci.RequestCommit{}); !errors.Is(err, disk) || !errors.Is(err, ErrAppFailed) {
		t.Errorf("Commit failure: got %v, want ErrAppFailed wrapping the app's error", err)
	}
}

func TestInfoAndInitChain(t *testing.T) {
	ctx := context.Background()
	a, _ := newTestAdapter(&fakeApp{height: 0, hash: []byte("fresh")}, 1)
	res, err := a.InitChain(ctx, &abci.RequestInitChain{})
	if err != nil || string(res.AppHash) != "fresh" || res.Validators != nil || res.ConsensusParams != nil {
		t.Errorf("InitChain = %+v, %v; want the fresh app hash and the genesis validators and params", res, err)
	}
	b, _ := newTestAdapter(&fakeApp{height: 4, hash: []byte("h4")}, 1)
	info, _ := b.Info(ctx, &abci.RequestInfo{})
	if info.LastBlockHeight != 4 || string(info.LastBlockAppHash) != "h4" {
		t.Errorf("Info = %+v", info)
	}
	if _, err := b.InitChain(ctx, &abci.RequestInitChain{}); err == nil {
		t.Error("InitChain accepted an application at height 4")
	}
}

// FuzzAdapterTransactions feeds arbitrary transactions, as a peer could,
// through every adapter call that sees them: none may panic, and a
// proposal PrepareProposal builds must pass ProcessProposal.
func FuzzAdapterTransactions(f *testing.F) {
	f.Add([]byte("ok"), []byte("bad"), int64(100))
	f.Add([]byte("panic"), []byte{}, int64(0))
	f.Add([]byte{0xff, 0x00}, []byte("refuse"), int64(3))
	f.Fuzz(func(t *testing.T, tx1, tx2 []byte, limit int64) {
		a, _ := newTestAdapter(&fakeApp{}, 64)
		ctx := context.Background()
		for _, tx := range [][]byte{tx1, tx2} {
			if _, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx}); err != nil {
				t.Fatal(err)
			}
		}
		prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: limit, Txs: [][]byte{tx1, tx2}})
		if err != nil {
			t.Fatal(err)
		}
		var tt []types.Tx
		for _, tx := range prep.Txs {
			tt = append(tt, tx)
		}
		if n := types.ComputeProtoSizeForTxs(tt); len(tt) > 0 && n > limit {
			t.Fatalf("proposal of %d bytes over the %d limit", n, limit)
		}
		proc, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Txs: prep.Txs})
		if err != nil {
			t.Fatal(err)
		}
		if proc.Status != abci.ResponseProcessProposal_ACCEPT {
			t.Fatalf("own proposal %q rejected", prep.Txs)
		}
		if _, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Txs: [][]byte{tx1, tx2}}); err != nil {
			t.Fatal(err)
		}
	})
}

// versionedApp is a fakeApp with an app version that a block at upgradeAt
// moves to 2.
type versionedApp struct {
	fakeApp
	committed, finalized uint64
	upgradeAt            int64
}

func (v *versionedApp) AppVersion() uint64          { return v.committed }
func (v *versionedApp) FinalizedAppVersion() uint64 { return v.finalized }

func (v *versionedApp) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	if b.Height == v.upgradeAt {
		v.finalized = 2
	}
	return v.fakeApp.FinalizeBlock(b)
}

// TestAppVersion: Info reports the committed app version, and the block
// that changes it returns the consensus parameter Version.App, only that
// one.
func TestAppVersion(t *testing.T) {
	ctx := context.Background()
	app := &versionedApp{committed: 1, finalized: 1, upgradeAt: 2}
	a, _ := newTestAdapter(app, 1<<10)
	if info, _ := a.Info(ctx, &abci.RequestInfo{}); info.AppVersion != 1 {
		t.Fatalf("Info AppVersion %d, want 1", info.AppVersion)
	}
	for h := int64(1); h <= 3; h++ {
		res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h})
		if err != nil {
			t.Fatal(err)
		}
		switch p := res.ConsensusParamUpdates; {
		case h == 2 && (p == nil || p.Version == nil || p.Version.App != 2 || p.Block != nil || p.Abci != nil):
			t.Fatalf("height 2: consensus param updates %+v, want Version.App 2 alone", p)
		case h != 2 && p != nil:
			t.Fatalf("height %d: consensus param updates %+v, want none", h, p)
		}
		app.committed = app.finalized
	}
	if info, _ := a.Info(ctx, &abci.RequestInfo{}); info.AppVersion != 2 {
		t.Fatalf("Info AppVersion %d after the upgrade, want 2", info.AppVersion)
	}
}

// proposerApp opens every proposal with "open@<unix ms>" and refuses, in
// CheckProposal, one whose first transaction is not an opening or whose
// clock is more than a second ahead of the validator's.
type proposerApp struct {
	fakeApp
	checkedAt time.Time
}

func (p *proposerApp) OpenProposal(_ int64, now time.Time) [][]byte {
	return [][]byte{[]byte(fmt.Sprintf("open@%d", now.UnixMilli()))}
}

func (p *proposerApp) CheckProposal(_ int64, now time.Time, txs [][]byte) error {
	p.checkedAt = now
	if len(txs) == 0 {
		return nil
	}
	var ms int64
	if _, err := fmt.Sscanf(string(txs[0]), "open@%d", &ms); err != nil {
		return errors.New("not opened")
	}
	if ms > now.UnixMilli()+1000 {
		return errors.New("ahead")
	}
	return nil
}

// TestProposalOpening: a consensus.Proposer's opening, made from this
// broker's clock, heads every proposal that has a transaction and takes
// its room from the limit first; an empty mempool, or one whose
// transactions are all invalid, still gives an empty proposal. Its
// CheckProposal decides ProcessProposal, by this broker's clock.
func TestProposalOpening(t *testing.T) {
	app := &proposerApp{}
	a, _ := newTestAdapter(app, 1<<10)
	ctx := context.Background()
	before := time.Now().UnixMilli()
	res, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 1 << 20, Txs: [][]byte{[]byte("t1"), []byte("t2")}, Height: 3})
	if err != nil {
		t.Fatal(err)
	}
	var ms int64
	if len(res.Txs) != 3 || string(res.Txs[1]) != "t1" || string(res.Txs[2]) != "t2" {
		t.Fatalf("proposal %q, want the opening, t1, t2", res.Txs)
	}
	if _, err := fmt.Sscanf(string(res.Txs[0]), "open@%d", &ms); err != nil || ms < before || ms > time.Now().UnixMilli() {
		t.Fatalf("opening %q: not this broker's clock at the proposal (%d..now)", res.Txs[0], before)
	}
	for _, txs := range [][][]byte{nil, {[]byte("bad1")}} {
		if res, _ := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 1 << 20, Txs: txs}); len(res.Txs) != 0 {
			t.Errorf("mempool %q: proposal %q, want an empty one", txs, res.Txs)
		}
	}
	// The opening's room comes first: t1 no longer fits beside it.
	open := fmt.Sprintf("open@%d", time.Now().UnixMilli())
	res, _ = a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: protoSize(open, "t1") - 1, Txs: [][]byte{[]byte("t1")}})
	if len(res.Txs) != 0 {
		t.Errorf("proposal %q over its limit, want an empty one", res.Txs)
	}

	for _, tc := range []struct {
		txs  [][]byte
		want abci.ResponseProcessProposal_ProposalStatus
	}{
		{nil, abci.ResponseProcessProposal_ACCEPT},
		{[][]byte{[]byte(open), []byte("t1")}, abci.ResponseProcessProposal_ACCEPT},
		{[][]byte{[]byte("t1")}, abci.ResponseProcessProposal_REJECT},
		{[][]byte{[]byte(fmt.Sprintf("open@%d", time.Now().Add(time.Minute).UnixMilli())), []byte("t1")}, abci.ResponseProcessProposal_REJECT},
	} {
		res, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Txs: tc.txs, Height: 3})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.want {
			t.Errorf("ProcessProposal(%q) = %v, want %v", tc.txs, res.Status, tc.want)
		}
		if d := time.Since(app.checkedAt); d < 0 || d > time.Minute {
			t.Errorf("CheckProposal judged by a clock %v off this broker's", d)
		}
	}
}

// TestEmptyProposalWaitsForTxs: a proposer whose mempool is empty when
// asked for a proposal (a proof block) waits up to emptyProposalWait for a
// transaction and proposes it, opening and checks included, instead of an
// empty block; if none comes it proposes an empty block once the wait is
// over, and a proposal that already has transactions does not wait.
func TestEmptyProposalWaitsForTxs(t *testing.T) {
	app := &proposerApp{}
	a, mp := newTestAdapter(app, 1<<10)
	a.proposalWait = 2 * time.Second // long enough for a slow CI machine
	ctx := context.Background()
	// Both arrive together once the proposer has looked at the empty
	// mempool a few times: the wait is under way.
	arrived := make(chan struct{})
	go func() {
		defer close(arrived)
		for deadline := time.Now().Add(10 * time.Second); mp.looked() < 3 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		mp.set("late", "bad2")
	}()
	start := time.Now()
	res, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 1 << 20, Height: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Txs) != 2 || !strings.HasPrefix(string(res.Txs[0]), "open@") || string(res.Txs[1]) != "late" {
		t.Fatalf("proposal %q, want the opening and the transaction that arrived (the invalid one dropped)", res.Txs)
	}
	if waited := time.Since(start); waited >= a.proposalWait {
		t.Errorf("waited %v: the wait should end with the first transaction", waited)
	}
	if !slices.Contains(mp.removed, types.Tx("bad2").Key()) {
		t.Error("the invalid transaction that arrived was not removed from the mempool")
	}

	<-arrived

	// Nothing arrives: an empty block once the wait is over.
	a.proposalWait = 30 * time.Millisecond
	mp.set()
	start = time.Now()
	if res, _ := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 1 << 20, Height: 5}); len(res.Txs) != 0 {
		t.Fatalf("proposal %q from an empty mempool, want an empty one", res.Txs)
	}
	if waited := time.Since(start); waited < a.proposalWait {
		t.Errorf("an empty proposal came after %v, before the %v wait", waited, a.proposalWait)
	}

	// Transactions already there: no wait, the mempool is not read again.
	a.proposalWait = time.Hour
	mp.set("queued")
	res, _ = a.PrepareProposal(ctx, &abci.RequestPrepareProposal{MaxTxBytes: 1 << 20, Height: 6, Txs: [][]byte{[]byte("t1")}})
	if len(res.Txs) != 2 || string(res.Txs[1]) != "t1" {
		t.Fatalf("proposal %q, want the opening and t1 only", res.Txs)
	}
}
