package dataplane

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
)

// TestRecentBatchesBounded: payloads are taken once, the oldest go first
// when the byte bound is passed, and what is taken or dropped no longer
// counts against it.
func TestRecentBatchesBounded(t *testing.T) {
	r := newRecentBatches(100)
	var ds []fsm.Digest
	for i := range 5 {
		p := bytes.Repeat([]byte{byte(i)}, 30)
		d := fsm.Digest(sha256.Sum256(p))
		ds = append(ds, d)
		r.put(d, p)
	}
	// 150 bytes were put into 100: the first two are gone.
	for i, d := range ds {
		_, ok := r.take(d)
		if want := i >= 2; ok != want {
			t.Errorf("payload %d: present %v, want %v", i, ok, want)
		}
	}
	if r.bytes != 0 || len(r.m) != 0 {
		t.Fatalf("after taking everything: %d bytes, %d payloads", r.bytes, len(r.m))
	}
	r.put(ds[0], make([]byte, 101)) // larger than the bound: not kept
	if _, ok := r.take(ds[0]); ok {
		t.Error("a payload larger than the bound was kept")
	}
	for i := range 1000 { // taken digests do not pile up
		p := []byte(fmt.Sprint(i))
		d := fsm.Digest(sha256.Sum256(p))
		r.put(d, p)
		r.take(d)
	}
	if len(r.order) > 200 {
		t.Errorf("%d digests remembered after 1000 put-and-take", len(r.order))
	}
}
