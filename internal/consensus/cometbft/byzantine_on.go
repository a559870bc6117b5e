//go:build stelebyzantine

package cometbft

import "os"

// byzantineProposal is the malformed-proposer behaviour of the test-only
// `stelebyzantine` build: with STELE_BYZANTINE=malformed-proposals every
// proposal this node makes carries a transaction that does not decode, so
// honest validators must reject it in ProcessProposal. Production builds
// (without the tag) compile byzantine_off.go instead.
func byzantineProposal(txs [][]byte) [][]byte {
	if os.Getenv("STELE_BYZANTINE") == "malformed-proposals" {
		return append(txs, []byte("STL\x01not a transaction"))
	}
	return txs
}
