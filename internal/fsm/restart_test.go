package fsm

import (
	"bytes"
	"testing"
)

// TestRestartEveryBlock applies the golden scenario twice: once straight
// through, once closing and reopening the state machine after every block.
// Everything hashed is in the store, so a restarted broker must go on to
// the same app hashes: a value whose encoding depends on something Open
// does not restore would fork a broker that restarted from one that did
// not.
func TestRestartEveryBlock(t *testing.T) {
	blocks := goldenBlocks(t)
	want := applyGolden(t, blocks, nil)
	dir := t.TempDir()
	for i, b := range blocks {
		f, err := Open(goldenOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		out, err := f.ApplyBlock(Block{Height: int64(i + 1), TimeMs: b.time, Txs: b.txs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if !bytes.Equal(out.AppHash, want[i].AppHash) {
			t.Fatalf("height %d: a state machine restarted before every block computes another app hash", i+1)
		}
	}
}
