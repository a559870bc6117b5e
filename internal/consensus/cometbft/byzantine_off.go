//go:build !stelebyzantine

package cometbft

import "github.com/cometbft/cometbft/types"

// byzantineProposal returns txs unchanged: Byzantine behaviours exist only
// in the test-only `stelebyzantine` build (byzantine_on.go).
func byzantineProposal(txs [][]byte) [][]byte { return txs }

// byzantineSigner returns pv: only the stelebyzantine build skews the
// timestamps a validator signs (byzantine_on.go).
func byzantineSigner(pv types.PrivValidator) types.PrivValidator { return pv }
