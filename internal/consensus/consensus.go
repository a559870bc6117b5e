// Package consensus defines how Stele's replicated state machine is driven by an
// ordering service: the Application the orderer calls and the Orderer the broker
// submits transactions to.
//
// Two orderers exist: cometbft/ embeds a CometBFT node in-process (the only
// production path, one validator for a single node, 3f+1 for a cluster), and
// local/ orders transactions in memory for unit tests and deterministic
// simulation.
//
// consensus may import internal/fsm's types but never a front-end; the
// Application is implemented by the broker, which wraps the fsm.
package consensus

import (
	"context"
	"errors"
	"time"
)

// ErrStopped is returned by Submit once the orderer has been stopped.
var ErrStopped = errors.New("stele/consensus: orderer stopped")

// ErrMempoolFull is returned by Submit when the orderer cannot take more
// transactions now; the caller should retry later or fail the request.
var ErrMempoolFull = errors.New("stele/consensus: mempool full")

// TxResult is the outcome of one transaction in a block. Code and Data are
// hashed into the next block header by CometBFT (LastResultsHash), so they
// must be deterministic; Log is not hashed and is for humans.
type TxResult struct {
	Code uint32
	Data []byte
	Log  string
}

// Block is one ordered block handed to the application.
type Block struct {
	Height int64
	// Time is the block's consensus time. It is the only clock the state
	// machine may read.
	Time time.Time
	Txs  [][]byte
	// Proposer is the address of the validator that proposed the block.
	Proposer []byte
	// Misbehavior is the evidence of validator misbehavior (equivocation,
	// light-client attacks) this block commits.
	Misbehavior []Misbehavior
	// Signers are the addresses of the validators whose precommit for the
	// previous block this block carries (its last commit), in the order
	// the commit lists them. Every broker sees the same list, so the state
	// machine may derive which brokers are alive from it.
	Signers [][]byte
}

// Misbehavior is committed evidence that a validator misbehaved.
type Misbehavior struct {
	// Kind is "duplicate-vote" (signing two different votes at one height
	// and round) or "light-client-attack".
	Kind      string
	Validator []byte
	Height    int64
}

// Application is the deterministic state machine as seen by an orderer.
// The orderer calls FinalizeBlock then Commit for every height, in order,
// from one goroutine. CheckTx may be called concurrently with them.
type Application interface {
	// Info returns the height and app hash of the last completed Commit
	// (0 and nil for a fresh state). The orderer replays the blocks after it.
	Info() (height int64, appHash []byte)
	// CheckTx is the cheap admission check for a transaction entering the
	// mempool. It need not be deterministic and must not change state.
	CheckTx(tx []byte) error
	// ValidateTx is the full, deterministic validity check a proposal's
	// transactions must pass (ProcessProposal); it must not change state and
	// must not depend on anything local to this broker.
	ValidateTx(tx []byte) error
	// FinalizeBlock applies a block and returns one result per transaction
	// and the app hash after it. Its effects must stay invisible (to readers
	// and to waiting clients) until Commit.
	FinalizeBlock(b Block) (results []TxResult, appHash []byte, err error)
	// Commit makes the effects of the last FinalizeBlock durable and visible
	// and returns the lowest height whose block the orderer must keep (blocks
	// below it may be pruned).
	Commit() (retainHeight int64, err error)
}

// Versioned is implemented by an Application whose state carries an app
// version (internal/fsm/cluster's upgrade.go). The cometbft orderer reports it as
// ABCI Info's AppVersion and, when a block changes it, as the consensus
// parameter Version.App, so block headers carry the version the state
// they follow was made with.
type Versioned interface {
	// AppVersion is the app version of the last committed state.
	AppVersion() uint64
	// FinalizedAppVersion is the app version after the last FinalizeBlock
	// (its effects not yet committed). It is called by the orderer's
	// consensus goroutine only, before and after FinalizeBlock.
	FinalizedAppVersion() uint64
}

// ValidatorUpdate is a change of one validator's voting power (0 removes
// it) that a block made.
type ValidatorUpdate struct {
	PubKey []byte // ed25519
	Power  int64
}

// Membership is implemented by an Application whose blocks change the
// validator set (internal/fsm/cluster's membership.go). The cometbft
// orderer hands the changes of each block to CometBFT with the block's
// results; CometBFT applies them two heights later.
type Membership interface {
	// FinalizedValidatorUpdates are the changes the last FinalizeBlock
	// made. It is called by the orderer's consensus goroutine only, after
	// FinalizeBlock.
	FinalizedValidatorUpdates() []ValidatorUpdate
	// Validators is the validator set as of the last Commit: the set
	// CometBFT signs with from two heights later. The orderer archives
	// each set it sees, for the proofs of headers that name it.
	Validators() []ValidatorUpdate
}

// Proposer is implemented by an Application whose proposals open with
// transactions of the proposer's own, made from the proposer's clock
// (internal/fsm's AppendTime, from app version 2): what the state machine
// may not read itself, the orderer reads and hands in. The cometbft
// orderer calls both from its consensus connection, between blocks, so
// they see the last committed state; the local orderer opens its blocks
// with OpenProposal, its clock being the block time.
type Proposer interface {
	// OpenProposal returns the transactions a non-empty proposal of block
	// height, built now by this broker's clock, opens with (none: nothing
	// to add). An empty proposal gets none.
	OpenProposal(height int64, now time.Time) [][]byte
	// CheckProposal says why a proposal of block height must be refused
	// beyond any one transaction's validity (ValidateTx), judged at now by
	// this broker's clock; nil accepts it. It depends on the proposal, the
	// state and the clock only, and refuses only what an honest proposer
	// with a clock near this broker's never proposes.
	CheckProposal(height int64, now time.Time, txs [][]byte) error
}

// Scheduler is implemented by an Application that chooses which of the
// waiting transactions a proposal carries, beyond taking them in the
// mempool's order until the block is full (the broker shares each block
// among tenants: internal/broker/fair.go). The cometbft orderer calls it
// from PrepareProposal, between blocks, with the transactions that passed
// ValidateTx in the mempool's order and each one's size as the block counts
// it; it returns the indices of those to propose, in the order to propose
// them, whose sizes add up to at most room. What it leaves out stays in the
// mempool for a later block. It is a proposer's choice, not a rule: peers
// do not check it.
type Scheduler interface {
	ScheduleProposal(height int64, now time.Time, txs [][]byte, sizes []int64, room int64) []int
}

// Prefix is the proposal of an application that does not choose: the
// indices of the transactions in order until the next one does not fit in
// room.
func Prefix(sizes []int64, room int64) []int {
	var out []int
	for i, n := range sizes {
		if n > room {
			break
		}
		room -= n
		out = append(out, i)
	}
	return out
}

// Orderer orders transactions into blocks and drives an Application.
type Orderer interface {
	// Start begins ordering. It returns once the orderer has caught up with
	// (replayed) every block the application lacked at start, or failed.
	Start(ctx context.Context) error
	// Submit hands a transaction to the orderer. A nil error means it was
	// admitted (passed CheckTx), not that it was committed: the application
	// learns of the commit through FinalizeBlock/Commit.
	Submit(ctx context.Context, tx []byte) error
	// Stop stops ordering and waits for every goroutine it started.
	Stop() error
}
