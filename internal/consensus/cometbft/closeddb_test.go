package cometbft

import (
	"testing"

	dbm "github.com/cometbft/cometbft-db"
)

// TestStoppedDBReadsNothingAfterClose: a goroutine of a stopped node that
// reads the block store finds nothing instead of an error (which CometBFT
// turns into a panic of the whole process).
func TestStoppedDBReadsNothingAfterClose(t *testing.T) {
	raw, err := dbm.NewGoLevelDB("test", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Get([]byte("k")); err != nil {
		t.Fatal(err)
	}
	d := &stoppedDB{DB: raw}
	if err := d.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("before Close: %q %v", v, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Get([]byte("k")); err == nil {
		t.Fatal("the underlying database still reads after Close: the test shows nothing")
	}
	if v, err := d.Get([]byte("k")); err != nil || v != nil {
		t.Fatalf("Get after Close: %q %v, want nothing and no error", v, err)
	}
	if ok, err := d.Has([]byte("k")); err != nil || ok {
		t.Fatalf("Has after Close: %v %v", ok, err)
	}
	it, err := d.Iterator(nil, nil)
	if err != nil || it.Valid() {
		t.Fatalf("Iterator after Close: valid=%v %v", it != nil && it.Valid(), err)
	}
	it, err = d.ReverseIterator(nil, nil)
	if err != nil || it.Valid() {
		t.Fatalf("ReverseIterator after Close: %v", err)
	}
}
