package cometbft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/store"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/wallclock"
)

// ABCI response codes of CheckTx.
const (
	// CodeRejected is CheckTx's code for a transaction the application
	// refused; Log carries its message.
	CodeRejected uint32 = 1
	// CodeTooLarge is CheckTx's code for a transaction over the chain's
	// max_tx_bytes.
	CodeTooLarge uint32 = 2
	// codeUnsupported answers ABCI calls Stele does not serve (Query,
	// InsertTx).
	codeUnsupported uint32 = 3
)

// ErrAppFailed wraps an application error from FinalizeBlock or Commit.
// CometBFT halts consensus on it; the node must be restarted once the cause
// is fixed (blocks are then replayed from the last Commit).
var ErrAppFailed = errors.New("stele/consensus/cometbft: application failed")

// txRemover is the part of CometBFT's mempool the adapter uses: to forget
// transactions that no longer pass ValidateTx, and to take transactions
// that arrive while an empty proposal waits for them (emptyProposalWait).
type txRemover interface {
	RemoveTxByKey(types.TxKey) error
	Size() int
	ReapMaxBytesMaxGas(maxBytes, maxGas int64) types.Txs
}

// emptyProposalWait is how long a proposer that finds the mempool empty
// waits for a transaction before it proposes an empty block, and
// emptyProposalPoll how often it looks meanwhile.
//
// With create_empty_blocks off, CometBFT still proposes a block at once
// after every block that changed the app hash, with or without
// transactions: the proof block, whose header signs the new hash. Nobody
// waits for it (a produce or a commit is answered when its own block
// commits), but a client that sends its next request on the answer (a
// consumer committing after each record, a producer with one request in
// flight) arrives while the proof block is being made, and its transaction
// then waits for that height to end and for one more. Waiting a few
// milliseconds for it lets it ride in the proof block instead: the client's
// answer on the broker that took it, the next request, and the mempool's
// gossip to the proposer took about 3-6 ms on the 2-core machine. The wait
// ends with the first transaction, happens only before a proposal that
// would be empty, and holds the proposer's consensus step for at most this
// long (timeout_propose is 1 s).
const (
	emptyProposalWait = 10 * time.Millisecond
	emptyProposalPoll = 250 * time.Microsecond
)

// abciApp adapts a consensus.Application to CometBFT's ABCI++ Application.
// CometBFT calls it over four connections, each serialised on its own
// (proxy.NewConnSyncLocalClientCreator): consensus (InitChain, Prepare/
// ProcessProposal, FinalizeBlock, Commit, vote extensions), mempool
// (CheckTx), query (Info, Query) and snapshot. The consensus.Application
// contract allows CheckTx and Info concurrently with the consensus calls.
//
// Nothing a peer sends reaches a panic: a transaction that makes the
// application's CheckTx or ValidateTx panic is treated as rejected.
type abciApp struct {
	app        consensus.Application
	maxTxBytes int64
	logger     *slog.Logger

	mempool atomic.Pointer[txRemover] // set once the node exists
	// proposalWait is emptyProposalWait (tests set their own).
	proposalWait time.Duration
	blocks       atomic.Pointer[store.BlockStore] // set once the node exists
	// syncer says whether the node is still block-syncing (its consensus
	// reactor waits for sync); set once the node exists.
	syncer  atomic.Pointer[waitSyncer]
	headers *headerArchive // set before the node exists

	// waiting holds the keys (types.TxKey) of transactions a local Submit is
	// waiting on; CheckTx stores the application's error under the key so
	// Submit can return it unflattened.
	waiting sync.Map

	fatal atomic.Pointer[error] // first FinalizeBlock/Commit failure

	// lastCommit is when (wall clock, unix ns) the last Commit returned: a
	// node that stops committing is cut off or stalled (CatchingUp).
	lastCommit atomic.Int64

	// Touched by the consensus connection only.
	finalized int64  // height of the last FinalizeBlock
	lastHash  []byte // app hash after it
	// setArchived: the application's committed validator set is in the
	// header archive; false at start and after a block that changed it,
	// so the set is read and archived only then, not at every commit.
	setArchived     bool
	warnedEmptyHash bool
	// emptyHashChanges counts consecutive empty blocks that changed the
	// app hash.
	emptyHashChanges int
}

// waitSyncer is CometBFT's consensus reactor: WaitSync is true while the
// node is block-syncing (or state-syncing) and consensus has not started.
type waitSyncer interface{ WaitSync() bool }

// emptyHashChangesWarn consecutive empty blocks changing the app hash
// mean the chain cannot idle.
const emptyHashChangesWarn = 10

var _ abci.Application = (*abciApp)(nil)

func newABCIApp(app consensus.Application, maxTxBytes int64, logger *slog.Logger) *abciApp {
	return &abciApp{app: app, maxTxBytes: maxTxBytes, logger: logger, proposalWait: emptyProposalWait}
}

// err returns the application failure that halted consensus, if any.
func (a *abciApp) err() error {
	if p := a.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

func (a *abciApp) fail(err error) error {
	err = fmt.Errorf("%w: %w", ErrAppFailed, err)
	a.fatal.CompareAndSwap(nil, &err)
	a.logger.Error("application failed; consensus halts", "err", err)
	return err
}

// Info implements abci.Application.
func (a *abciApp) Info(context.Context, *abci.RequestInfo) (*abci.ResponseInfo, error) {
	h, hash := a.app.Info()
	res := &abci.ResponseInfo{Data: "stele", LastBlockHeight: h, LastBlockAppHash: hash}
	if v, ok := a.app.(consensus.Versioned); ok {
		// CometBFT takes it as the chain's Version.App at genesis, and
		// state sync checks it against the header of the restored height.
		res.AppVersion = v.AppVersion()
	}
	return res, nil
}

// Query implements abci.Application. Stele serves reads through its own
// APIs, not CometBFT's abci_query.
func (a *abciApp) Query(context.Context, *abci.RequestQuery) (*abci.ResponseQuery, error) {
	return &abci.ResponseQuery{Code: codeUnsupported, Log: "stele does not serve ABCI queries; use the Kafka or HTTP API"}, nil
}

// CheckTx implements abci.Application: the cheap admission check, for
// local submissions and transactions gossiped by peers alike.
func (a *abciApp) CheckTx(_ context.Context, req *abci.RequestCheckTx) (*abci.ResponseCheckTx, error) {
	if int64(len(req.Tx)) > a.maxTxBytes {
		return &abci.ResponseCheckTx{Code: CodeTooLarge,
			Log: fmt.Sprintf("transaction of %d bytes exceeds the chain's max_tx_bytes %d", len(req.Tx), a.maxTxBytes)}, nil
	}
	if err := a.guard("CheckTx", a.app.CheckTx, req.Tx); err != nil {
		key := types.Tx(req.Tx).Key()
		if _, ok := a.waiting.Load(key); ok {
			a.waiting.Store(key, err)
		}
		return &abci.ResponseCheckTx{Code: CodeRejected, Log: err.Error()}, nil
	}
	return &abci.ResponseCheckTx{Code: abci.CodeTypeOK}, nil
}

// InsertTx implements abci.Application; it serves only the "app" mempool
// type, which Stele does not use.
func (a *abciApp) InsertTx(context.Context, *abci.RequestInsertTx) (*abci.ResponseInsertTx, error) {
	return &abci.ResponseInsertTx{Code: codeUnsupported}, nil
}

// ReapTxs implements abci.Application; see InsertTx.
func (a *abciApp) ReapTxs(context.Context, *abci.RequestReapTxs) (*abci.ResponseReapTxs, error) {
	return &abci.ResponseReapTxs{}, nil
}

// InitChain implements abci.Application. It is called once, for a fresh
// application (Info height 0); the genesis validators and consensus
// parameters are kept, and the app hash is the fresh state's.
func (a *abciApp) InitChain(context.Context, *abci.RequestInitChain) (*abci.ResponseInitChain, error) {
	h, hash := a.app.Info()
	if h != 0 {
		return nil, fmt.Errorf("stele/consensus/cometbft: InitChain for an application at height %d", h)
	}
	return &abci.ResponseInitChain{AppHash: hash}, nil
}

// PrepareProposal implements abci.Application. It keeps the mempool's
// order, drops transactions failing ValidateTx (and forgets them from the
// mempool, where they would otherwise be proposed again forever), and stops
// at the first transaction that would take the proposal past req.MaxTxBytes,
// so the proposal is a prefix of the valid ones and never exceeds the limit.
// A non-empty proposal opens with the application's own transactions
// (consensus.Proposer: the proposer's clock, read here), whose room is
// kept from the start. An application that is a consensus.Scheduler
// chooses which valid transactions follow, and in what order, instead of
// the prefix.
func (a *abciApp) PrepareProposal(ctx context.Context, req *abci.RequestPrepareProposal) (*abci.ResponsePrepareProposal, error) {
	in := req.Txs
	if len(in) == 0 {
		in = a.awaitTxs(ctx, req.MaxTxBytes)
	}
	var opening [][]byte
	if p, ok := a.app.(consensus.Proposer); ok && len(in) > 0 {
		opening = p.OpenProposal(req.Height, wallclock.Now())
	}
	size := types.ComputeProtoSizeForTxs(types.ToTxs(opening))
	txs := make([][]byte, 0, len(opening)+len(in))
	txs = append(txs, opening...)
	var valid [][]byte
	var sizes []int64
	for _, tx := range in {
		if err := a.validate(tx); err != nil {
			a.logger.Debug("dropping invalid transaction from proposal", "height", req.Height, "err", err)
			a.forget(tx)
			continue
		}
		valid = append(valid, tx)
		sizes = append(sizes, types.ComputeProtoSizeForTxs([]types.Tx{tx}))
	}
	var picked []int
	if s, ok := a.app.(consensus.Scheduler); ok {
		picked = s.ScheduleProposal(req.Height, wallclock.Now(), valid, sizes, req.MaxTxBytes-size)
	} else {
		picked = consensus.Prefix(sizes, req.MaxTxBytes-size)
	}
	seen := make([]bool, len(valid))
	for _, i := range picked {
		// Trust, but keep the promise: each at most once, within the limit.
		if i < 0 || i >= len(valid) || seen[i] || size+sizes[i] > req.MaxTxBytes {
			continue
		}
		seen[i] = true
		size += sizes[i]
		txs = append(txs, valid[i])
	}
	if len(txs) == len(opening) {
		txs = nil // nothing valid to propose: an empty block
	}
	return &abci.ResponsePrepareProposal{Txs: byzantineProposal(txs)}, nil
}

// ProcessProposal implements abci.Application. A proposal is rejected when
// any transaction fails ValidateTx or exceeds the chain's max_tx_bytes
// (deterministic functions of the proposal and the state), or when the
// application refuses it whole (consensus.Proposer: its opening missing,
// or the proposer's clock ahead of this broker's).
func (a *abciApp) ProcessProposal(_ context.Context, req *abci.RequestProcessProposal) (*abci.ResponseProcessProposal, error) {
	reject := func(msg string, args ...any) (*abci.ResponseProcessProposal, error) {
		a.logger.Warn(msg, append([]any{"height", req.Height, "proposer", fmt.Sprintf("%X", req.ProposerAddress)}, args...)...)
		return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_REJECT}, nil
	}
	for i, tx := range req.Txs {
		if err := a.validate(tx); err != nil {
			return reject("rejecting proposal with an invalid transaction", "tx_index", i, "err", err)
		}
	}
	if p, ok := a.app.(consensus.Proposer); ok {
		if err := p.CheckProposal(req.Height, wallclock.Now(), req.Txs); err != nil {
			return reject("rejecting proposal", "err", err)
		}
	}
	return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_ACCEPT}, nil
}

// FinalizeBlock implements abci.Application. The transactions are handed
// to the application without copying: CometBFT does not change a decided
// block, and the application must not either.
func (a *abciApp) FinalizeBlock(_ context.Context, req *abci.RequestFinalizeBlock) (*abci.ResponseFinalizeBlock, error) {
	if err := a.err(); err != nil {
		return nil, err
	}
	b := consensus.Block{Height: req.Height, Time: req.Time, Txs: req.Txs, Proposer: req.ProposerAddress}
	for _, m := range req.Misbehavior {
		kind := "light-client-attack"
		if m.Type == abci.MisbehaviorType_DUPLICATE_VOTE {
			kind = "duplicate-vote"
		}
		b.Misbehavior = append(b.Misbehavior, consensus.Misbehavior{Kind: kind, Validator: m.Validator.Address, Height: m.Height})
	}
	for _, v := range req.DecidedLastCommit.Votes {
		if v.BlockIdFlag == cmtproto.BlockIDFlagCommit {
			b.Signers = append(b.Signers, v.Validator.Address)
		}
	}
	versioned, _ := a.app.(consensus.Versioned)
	var versionBefore uint64
	if versioned != nil {
		versionBefore = versioned.FinalizedAppVersion()
	}
	results, appHash, err := a.app.FinalizeBlock(b)
	if err != nil {
		err = a.fail(fmt.Errorf("FinalizeBlock at height %d: %w", req.Height, err))
		if a.blockSyncing() {
			a.stopBlockSync(req.Height, err)
		}
		return nil, err
	}
	if len(results) != len(req.Txs) {
		return nil, a.fail(fmt.Errorf("FinalizeBlock at height %d returned %d results for %d transactions",
			req.Height, len(results), len(req.Txs)))
	}
	// Housekeeping and group timers may change the state in an empty
	// block now and then; a hash that changes on every empty block would
	// keep CometBFT from ever idling (it makes a new block after every
	// block whose app hash changed), which is a bug worth saying once.
	switch {
	case len(req.Txs) > 0:
	case a.lastHash != nil && !bytes.Equal(a.lastHash, appHash):
		a.emptyHashChanges++
		if a.emptyHashChanges == emptyHashChangesWarn && !a.warnedEmptyHash {
			a.warnedEmptyHash = true
			a.logger.Warn("the app hash changed on every one of the last empty blocks: CometBFT makes a new block after every block whose app hash changed, so the node will never be idle",
				"height", req.Height, "blocks", emptyHashChangesWarn)
		}
	default:
		a.emptyHashChanges = 0
	}
	a.finalized, a.lastHash = req.Height, appHash
	res := &abci.ResponseFinalizeBlock{TxResults: make([]*abci.ExecTxResult, len(results)), AppHash: appHash}
	for i, r := range results {
		res.TxResults[i] = &abci.ExecTxResult{Code: r.Code, Data: r.Data, Log: r.Log}
	}
	if m, ok := a.app.(consensus.Membership); ok {
		for _, u := range m.FinalizedValidatorUpdates() {
			a.setArchived = false
			res.ValidatorUpdates = append(res.ValidatorUpdates, abci.Ed25519ValidatorUpdate(u.PubKey, u.Power))
			a.logger.Info("validator set change; CometBFT applies it two heights later", "height", req.Height,
				"pub_key", fmt.Sprintf("%X", u.PubKey), "power", u.Power)
		}
	}
	if versioned != nil {
		if v := versioned.FinalizedAppVersion(); v != versionBefore {
			// The block was applied under a new app version (an upgrade's
			// height): headers from the next height on carry it.
			res.ConsensusParamUpdates = &cmtproto.ConsensusParams{Version: &cmtproto.VersionParams{App: v}}
			a.logger.Info("app version changed; consensus parameter Version.App follows", "height", req.Height, "from", versionBefore, "to", v)
		}
	}
	return res, nil
}

// blockSyncing reports whether the node exists and is block-syncing.
func (a *abciApp) blockSyncing() bool {
	p := a.syncer.Load()
	return p != nil && (*p).WaitSync()
}

// stopBlockSync ends the calling goroutine, CometBFT's block-sync routine,
// after the application failed on a block it was catching up with: an
// upgrade height this binary cannot run (fsm.ErrUpgradeRequired), or a
// local fault (fsm.ErrLocalFault: a full disk, a failed write). Block sync
// panics on any error from FinalizeBlock or Commit, which would crash the
// process with Go's exit status 2 and a stack trace instead of the clean
// stops docs/cluster.md ("Upgrades", status 10) and docs/running.md
// (fail-stop, status 1) promise: a broker restarted behind its peers, or
// wiped, catches up by block sync. runtime.Goexit runs the deferred calls
// on the way out (the ABCI connection's lock, the mempool's, the
// block-sync reactor's wait group, so the node still stops); nothing of
// the block is committed, and CometBFT's state stays at the height before
// (the block itself is in the block store, which the handshake replays on
// the next start). err is recorded (a.fail), so the broker stops the node
// within a second (server.Node.Wait) with the error's exit status. In
// consensus the error is returned as before: CometBFT recovers that panic
// itself.
func (a *abciApp) stopBlockSync(height int64, err error) {
	if errors.Is(err, fsm.ErrUpgradeRequired) {
		a.logger.Info("block sync stops at the height of an upgrade this binary cannot run", "height", height)
	} else {
		a.logger.Error("block sync stops: the application failed on a block it was catching up with", "height", height, "err", err)
	}
	runtime.Goexit()
}

// ExtendVote implements abci.Application; Stele uses no vote extensions.
func (a *abciApp) ExtendVote(context.Context, *abci.RequestExtendVote) (*abci.ResponseExtendVote, error) {
	return &abci.ResponseExtendVote{}, nil
}

// VerifyVoteExtension implements abci.Application; see ExtendVote.
func (a *abciApp) VerifyVoteExtension(context.Context, *abci.RequestVerifyVoteExtension) (*abci.ResponseVerifyVoteExtension, error) {
	return &abci.ResponseVerifyVoteExtension{Status: abci.ResponseVerifyVoteExtension_ACCEPT}, nil
}

// Commit implements abci.Application. The application's retain height is
// passed on, capped at the committed height.
func (a *abciApp) Commit(context.Context, *abci.RequestCommit) (*abci.ResponseCommit, error) {
	if err := a.err(); err != nil {
		return nil, err
	}
	retain, err := a.app.Commit()
	if err != nil {
		err = a.fail(fmt.Errorf("Commit at height %d: %w", a.finalized, err))
		if a.blockSyncing() {
			a.stopBlockSync(a.finalized, err)
		}
		return nil, err
	}
	if retain > a.finalized {
		a.logger.Warn("application asked to retain blocks above the committed height; capping",
			"retain_height", retain, "height", a.finalized)
		retain = a.finalized
	}
	// Before the block store may prune the height: its header proves the
	// app hash of the block before.
	if bs := a.blocks.Load(); bs != nil && a.headers != nil {
		if err := a.headers.archive(bs, a.finalized); err != nil {
			a.logger.Warn("archiving the signed header; proofs of the block before will come from other brokers",
				"height", a.finalized, "err", err)
		}
	}
	if m, ok := a.app.(consensus.Membership); ok && a.headers != nil && !a.setArchived {
		if err := a.headers.archiveSet(m.Validators()); err != nil {
			a.logger.Warn("archiving the validator set; proofs of headers that name it will come from other brokers",
				"height", a.finalized, "err", err)
		} else {
			a.setArchived = true
		}
	}
	a.lastCommit.Store(time.Now().UnixNano())
	return &abci.ResponseCommit{RetainHeight: max(retain, 0)}, nil
}

// validate is the deterministic validity check of a proposal's transaction.
func (a *abciApp) validate(tx []byte) error {
	if int64(len(tx)) > a.maxTxBytes {
		return fmt.Errorf("transaction of %d bytes exceeds max_tx_bytes %d", len(tx), a.maxTxBytes)
	}
	return a.guard("ValidateTx", a.app.ValidateTx, tx)
}

// guard calls check(tx), turning a panic into an error: a transaction that
// crashes the application's validation is invalid, not fatal.
func (a *abciApp) guard(name string, check func([]byte) error, tx []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.logger.Error("application panicked on a transaction; treating it as invalid", "call", name, "panic", r)
			err = fmt.Errorf("stele/consensus/cometbft: %s panicked: %v", name, r)
		}
	}()
	return check(tx)
}

// awaitTxs waits up to emptyProposalWait for the mempool to hold a
// transaction and returns what it then holds, up to maxBytes (nil if none
// came, or if the node is not up). See emptyProposalWait.
func (a *abciApp) awaitTxs(ctx context.Context, maxBytes int64) [][]byte {
	mp := a.mempool.Load()
	if mp == nil || a.proposalWait <= 0 {
		return nil
	}
	deadline := time.Now().Add(a.proposalWait)
	for (*mp).Size() == 0 {
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return nil
		}
		time.Sleep(emptyProposalPoll)
	}
	return (*mp).ReapMaxBytesMaxGas(maxBytes, -1).ToSliceOfBytes()
}

// forget removes tx from the mempool, if the node is up.
func (a *abciApp) forget(tx []byte) {
	if mp := a.mempool.Load(); mp != nil {
		_ = (*mp).RemoveTxByKey(types.Tx(tx).Key()) // not found is fine
	}
}
