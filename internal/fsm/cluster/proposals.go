package cluster

// What a proposal must hold beyond valid transactions, by app version (the
// cluster module's, as it depends on the version). From version 2 a
// proposal with any transaction opens with one of the proposer's own: an
// AppendTime command carrying the proposer's clock, which the topics
// module's log append clock is raised to (append_clock.go). The orderer
// reads the clock, never the state machine: ProposalOpening and
// CheckProposal take it as an argument.
//
// A validator refuses a proposal (CheckProposal, in CometBFT's
// ProcessProposal) that lacks the opening, holds it anywhere but first or
// twice, holds nothing else, or carries a clock more than
// MaxAppendTimeAheadMs ahead of the validator's own. So a Byzantine
// proposer can move the stamps at most that far into the future, and,
// since the clock never goes back below the block time, no earlier than
// version 1's. CometBFT calls ProcessProposal only while the chain is
// live, never when a broker replays or block-syncs, so the clock bound
// decides votes, never what a committed block applies to. The cost is
// CometBFT's proposer-based timestamps' (PBTS): a validator whose clock
// runs more than the bound behind the others' refuses their proposals
// (its vote is missing, the others still commit), and one whose clock
// runs ahead has its own proposals refused (the next round's proposer
// proposes instead). Under version 1 an AppendTime anywhere is refused.
//
// Applying AppendTime checks the version and the position again (a
// refused result, hashed by code only), so a block that a Byzantine
// majority committed still applies alike on every broker.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// KindAppendTime opens a proposal with its proposer's clock (app version
// 2 on).
const KindAppendTime core.Kind = 25

// MaxAppendTimeAheadMs is how far a proposal's AppendTime may be ahead of
// the clock of the validator judging it.
const MaxAppendTimeAheadMs = 500

// appendTimeVersion is the first app version whose proposals open with
// an AppendTime.
const appendTimeVersion = 2

// ErrProposal wraps the reasons CheckProposal refuses a proposal.
var ErrProposal = errors.New("stele/fsm: invalid proposal")

// AppendTime is the proposer's clock when it built the block, in
// milliseconds since the epoch. Only a proposer makes one, as the first
// transaction of its proposal; the mempool refuses it (Precheck).
type AppendTime struct {
	TimeMs int64
}

func (AppendTime) Kind() core.Kind { return KindAppendTime }

func (c AppendTime) Encode(w *core.Writer) { w.I64(c.TimeMs) }

func decodeAppendTime(r *core.Reader) AppendTime { return AppendTime{TimeMs: r.I64()} }

// registerProposals registers AppendTime (RegisterCluster calls it).
func registerProposals(r *core.Registry, h *topics.TopicHooks) {
	s := core.RegisterModuleCommand(r, clusterOf, KindAppendTime, "AppendTime", ModCluster, decodeAppendTime,
		func(c core.Command) core.Result {
			if c.(AppendTime).TimeMs < 0 {
				return core.Fail(kerr.InvalidRequest.Code, "an append time before 1970")
			}
			return core.Result{}
		},
		func(f *Cluster, c AppendTime, at core.CmdAt) core.Result { return f.applyAppendTime(c, at) })
	s.Admit = func(core.Command) error {
		return errors.New("an append time is the proposer's own transaction, never submitted")
	}
}

// applyAppendTime raises the log append clock, for the block's opening
// command under a version that has one.
func (f *Cluster) applyAppendTime(c AppendTime, at core.CmdAt) core.Result {
	if f.Version < appendTimeVersion {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("app version %d has no append time", f.Version))
	}
	if at != (core.CmdAt{}) {
		return core.Fail(kerr.InvalidRequest.Code, "an append time opens a block; this one does not")
	}
	f.RaiseLogAppendClock(c.TimeMs)
	return core.Result{}
}

// chainCertsVersion is the app version from which the trust module takes
// only signed statements bound to the chain (batch certificates of
// cert.go's version 3, v2 record signatures of signed.go), and before
// which only those that name none; the cluster module sets the trust
// module's chainBound and chainBoundNext from it.
const chainCertsVersion = 2

// versionAt is the app version block height will be applied under: the
// applied version, or a scheduled upgrade's from its height. Only the
// applier may call it, between blocks.
func (f *Cluster) versionAt(height int64) uint32 {
	if p := f.upgradePlan; p != nil && p.Height <= height {
		return p.Version
	}
	return f.Version
}

// ProposalOpening returns the transactions a proposal of block height,
// built when the proposer's clock read nowMs, opens with, ahead of any
// other (none for an empty proposal: an empty block stays empty, so the
// chain can idle). Only the applier may call it, between blocks (the
// orderer's consensus calls).
func (f *Cluster) ProposalOpening(height, nowMs int64) [][]byte {
	if f.versionAt(height) < appendTimeVersion {
		return nil
	}
	var n core.Nonce
	binary.BigEndian.PutUint64(n[:8], uint64(height))
	copy(n[8:], "opening")
	return [][]byte{f.Registry().EncodeTx(core.Tx{Nonce: n, Commands: []core.Command{AppendTime{TimeMs: max(nowMs, 0)}}})}
}

// CheckProposal checks what a proposal of block height must hold beyond
// valid transactions (each is checked by ValidateTx), judged by a
// validator whose clock reads nowMs. Only the applier may call it,
// between blocks.
func (f *Cluster) CheckProposal(height, nowMs int64, txs [][]byte) error {
	want := f.versionAt(height) >= appendTimeVersion
	for i, raw := range txs {
		c, ok := appendTimeOf(f.Registry(), raw)
		switch {
		case !ok:
			if i == 0 && want {
				return fmt.Errorf("%w: app version %d: a proposal opens with the proposer's append time; this one opens with another transaction",
					ErrProposal, f.versionAt(height))
			}
		case !want:
			return fmt.Errorf("%w: app version %d has no append time; transaction %d is one", ErrProposal, f.versionAt(height), i)
		case i > 0:
			return fmt.Errorf("%w: transaction %d is an append time, which only opens a proposal", ErrProposal, i)
		case len(txs) == 1:
			return fmt.Errorf("%w: an append time alone: an empty proposal has none", ErrProposal)
		case c.TimeMs > nowMs+MaxAppendTimeAheadMs:
			return fmt.Errorf("%w: the proposer's append time is %d ms ahead of this validator's clock (at most %d)",
				ErrProposal, c.TimeMs-nowMs, MaxAppendTimeAheadMs)
		}
	}
	return nil
}

// appendTimeOf returns the AppendTime a transaction consists of, if it
// is one: a transaction of that one command, as ProposalOpening makes. A
// transaction that holds it among others is not one; applying refuses
// it there.
func appendTimeOf(g *core.Registry, raw []byte) (AppendTime, bool) {
	// magic, version, nonce, count 1, then the kind: a cheap test before
	// decoding, as every transaction of a proposal is asked.
	const kindAt = len(core.TxMagic) + 1 + len(core.Nonce{}) + 1
	if len(raw) <= kindAt || raw[kindAt-1] != 1 || core.Kind(raw[kindAt]) != KindAppendTime {
		return AppendTime{}, false
	}
	tx, err := g.DecodeTx(raw)
	if err != nil || len(tx.Commands) != 1 {
		return AppendTime{}, false
	}
	c, ok := tx.Commands[0].(AppendTime)
	return c, ok
}
