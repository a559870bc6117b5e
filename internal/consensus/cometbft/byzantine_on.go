//go:build stelebyzantine

package cometbft

import (
	"os"
	"slices"
	"strings"
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
