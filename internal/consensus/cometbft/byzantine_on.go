//go:build stelebyzantine

package cometbft

import (
	"os"
	"slices"
	"strings"
	"time"

	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/wallclock"
)

// byzantineProposal is the proposer misbehaviour of the test-only
// `stelebyzantine` build, chosen by the comma-separated list in
// STELE_BYZANTINE. Production builds (without the tag) compile
// byzantine_off.go instead.
//   - malformed-proposals: every proposal this node makes carries a
//     transaction that does not decode, so honest validators must reject it
//     in ProcessProposal.
//   - empty-proposals: every proposal this node makes is empty. Harmless
//     alone; run by a second process holding a copy of another broker's
//     validator key, it makes that key propose, and prevote for, a block
//     other than the one its owner proposes at the same height and round:
//     equivocation, which the chain must commit as evidence.
func byzantineProposal(txs [][]byte) [][]byte {
	modes := strings.Split(os.Getenv("STELE_BYZANTINE"), ",")
	switch {
	case slices.Contains(modes, "malformed-proposals"):
		return append(txs, []byte("STL\x01not a transaction"))
	case slices.Contains(modes, "empty-proposals"):
		return nil
	}
	return txs
}

// byzantineSigner is the wrong clock of the test-only stelebyzantine
// build: with STELE_BYZANTINE=clock-offset=DURATION every vote and proposal
// this validator signs carries its timestamp moved by the offset, as from a
// validator whose clock is that far off (for a negative offset, possibly
// below the locked block's time, which CometBFT would have raised it to: a
// worse clock than any honest one). Block time is the weighted median of
// the votes' timestamps, so one such validator of four must not move it.
func byzantineSigner(pv types.PrivValidator) types.PrivValidator {
	if off := wallclock.Offset(); off != 0 {
		return skewedSigner{pv, off}
	}
	return pv
}

type skewedSigner struct {
	types.PrivValidator
	off time.Duration
}

func (s skewedSigner) SignVote(chainID string, vote *cmtproto.Vote) error {
	vote.Timestamp = vote.Timestamp.Add(s.off)
	return s.PrivValidator.SignVote(chainID, vote)
}

func (s skewedSigner) SignProposal(chainID string, p *cmtproto.Proposal) error {
	p.Timestamp = p.Timestamp.Add(s.off)
	return s.PrivValidator.SignProposal(chainID, p)
}
