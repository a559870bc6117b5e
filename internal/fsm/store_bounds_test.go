package fsm

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestOpenBoundsStoredCounts: the decoders Open's load writes inline
// bound what a stored value makes them allocate as FuzzDecodeStoreValues
// requires of the others. A topic's value claiming 2^18 partitions (its
// partition count is a fixed-width field, not a reader.count) is refused
// as malformed, allocating about what opening the honest state does;
// before the bound, Open made every partition it claimed (91 MB here; 2^31
// could be claimed) before finding that the second has no state.
func TestOpenBoundsStoredCounts(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	applyAll(t, f, []block{{t0, [][]byte{tx(1, CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})}}})
	f.Close()
	var honest uint64
	for range 2 { // the second, warm, is the one to compare with
		honest = allocated(func() {
			g, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			g.Close()
		})
	}

	g := open(t, dir)
	v, ok, err := g.store.Get(topicKey("t"))
	if err != nil || !ok {
		t.Fatalf("topic t: %v %v", ok, err)
	}
	binary.BigEndian.PutUint32(v[1+16+2:], 1<<18) // u8 format | id | i16 replication factor | i32 partitions
	b := g.store.NewBatch()
	b.Set(topicKey("t"), v)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	g.Close()
	hostile := allocated(func() {
		if _, err = Open(Options{Dir: dir}); !errors.Is(err, ErrMalformed) {
			t.Errorf("a topic claiming 2^18 partitions: %v, want ErrMalformed", err)
		}
	})
	if hostile > honest+8<<20 {
		t.Errorf("opening a topic claiming 2^18 partitions allocated %d MB, the honest state %d MB", hostile>>20, honest>>20)
	}
}
