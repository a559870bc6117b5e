package server

import (
	"fmt"
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

func (p recordingPrefetcher) Ahead(height int64, catchingUp bool) {
	*p.calls = append(*p.calls, fmt.Sprintf("ahead %d %t", height, catchingUp))
}

func (p recordingPrefetcher) Prefetch(txs [][]byte) func() {
	*p.calls = append(*p.calls, "prefetch")
	*p.txs = txs
	return func() { *p.calls = append(*p.calls, "release") }
}

// TestPrefetchBeforeApply: a block's batches are announced to the data
// plane before the state machine applies it, and released after; before
// that, the data plane learns the block's height and whether the broker is
// catching up (to fetch the next blocks' batches ahead).
func TestPrefetchBeforeApply(t *testing.T) {
	var calls []string
	var seen [][]byte
	behind := true
	app := prefetchingApp{Application: recordingApp{calls: &calls}, batches: recordingPrefetcher{calls: &calls, txs: &seen},
		catchingUp: func() bool { return behind }}
	txs := [][]byte{[]byte("a"), []byte("b")}
	res, _, err := app.FinalizeBlock(consensus.Block{Height: 7, Txs: txs})
	if err != nil || len(res) != 2 {
		t.Fatalf("FinalizeBlock: %d results, %v", len(res), err)
	}
	if len(seen) != 2 || &seen[0][0] != &txs[0][0] {
		t.Errorf("Prefetch got %q, want the block's transactions", seen)
	}
	behind = false
	if _, _, err := app.FinalizeBlock(consensus.Block{Height: 8}); err != nil {
		t.Fatal(err)
	}
	want := []string{"ahead 7 true", "prefetch", "apply", "release", "ahead 8 false", "prefetch", "apply", "release"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
}
