//go:build !stelebyzantine

package cometbft

// byzantineProposal returns txs unchanged: Byzantine behaviours exist only
// in the test-only `stelebyzantine` build (byzantine_on.go).
func byzantineProposal(txs [][]byte) [][]byte { return txs }
