package server

import (
	"slices"
	"testing"

	"github.com/stele-io/stele/internal/consensus"
)

// recordingApp and recordingPrefetcher write down the order of the calls
// they receive.
type recordingApp struct {
	consensus.Application
	calls *[]string
}

func (a recordingApp) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	*a.calls = append(*a.calls, "apply")
	return make([]consensus.TxResult, len(b.Txs)), nil, nil
}

type recordingPrefetcher struct {
	calls *[]string
	txs   *[][]byte
}

func (p recordingPrefetcher) Prefetch(txs [][]byte) func() {
	*p.calls = append(*p.calls, "prefetch")
	*p.txs = txs
	return func() { *p.calls = append(*p.calls, "release") }
}

// TestPrefetchBeforeApply: a block's batches are announced to the data
// plane before the state machine applies it, and released after.
func TestPrefetchBeforeApply(t *testing.T) {
	var calls []string
	var seen [][]byte
	app := prefetchingApp{recordingApp{calls: &calls}, recordingPrefetcher{calls: &calls, txs: &seen}}
	txs := [][]byte{[]byte("a"), []byte("b")}
	res, _, err := app.FinalizeBlock(consensus.Block{Height: 7, Txs: txs})
	if err != nil || len(res) != 2 {
		t.Fatalf("FinalizeBlock: %d results, %v", len(res), err)
	}
	if want := []string{"prefetch", "apply", "release"}; !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	if len(seen) != 2 || &seen[0][0] != &txs[0][0] {
		t.Errorf("Prefetch got %q, want the block's transactions", seen)
	}
}
