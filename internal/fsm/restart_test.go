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
	var lastHousekeep int64 // the topics' state mark in m/state
	for i, b := range blocks {
		f, err := Open(goldenOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		if f.LastHousekeep != lastHousekeep {
			t.Fatalf("height %d: reopened with the last housekeeping at %d, closed at %d", i+1, f.LastHousekeep, lastHousekeep)
		}
		out, err := f.ApplyBlock(b.at(int64(i + 1)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		lastHousekeep = f.LastHousekeep
		f.Close()
		if !bytes.Equal(out.AppHash, want[i].AppHash) {
			t.Fatalf("height %d: a state machine restarted before every block computes another app hash", i+1)
		}
	}
}
