package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/storage"
)

// TestOpenBoundsStoredCounts: what a stored topic value makes Open
// allocate is bounded, as FuzzDecodeStoreValues requires of every
// decoder. A topic's partition count is a fixed-width field, not a
// reader.count: decodeTopic refuses one above MaxPartitions (2^18 here)
// as malformed, and loadPartitions makes a partition only for a stored
// partition state, so a topic claiming MaxPartitions with the state of one
// fails at the second. Either allocates about what opening the honest
// state does: before the bounds, Open made every partition claimed
// (91 MB for 2^18, 2^31 could be claimed; 3.5 MB for MaxPartitions)
// before finding that the second has no state.
func TestOpenBoundsStoredCounts(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	applyAll(t, f, []block{{time: t0, txs: [][]byte{tx(1, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})}}})
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
	honestTopic, ok, err := g.Store.Get(core.TopicKey("t"))
	g.Close()
	if err != nil || !ok {
		t.Fatalf("topic t: %v %v", ok, err)
	}
	for _, claim := range []uint32{1 << 18, topics.MaxPartitions} {
		v := bytes.Clone(honestTopic)
		binary.BigEndian.PutUint32(v[1+16+2:], claim) // u8 format | id | i16 replication factor | i32 partitions
		store, err := storage.OpenStore(filepath.Join(dir, "meta"))
		if err != nil {
			t.Fatal(err)
		}
		b := store.NewBatch()
		b.Set(core.TopicKey("t"), v)
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		store.Close()
		hostile := allocated(func() {
			_, err = Open(Options{Dir: dir})
		})
		switch {
		case claim > topics.MaxPartitions && !errors.Is(err, core.ErrMalformed):
			t.Errorf("a topic claiming %d partitions: %v, want ErrMalformed", claim, err)
		case err == nil:
			t.Errorf("a topic claiming %d partitions, with the state of one, opened", claim)
		}
		if hostile > honest+2<<20 {
			t.Errorf("opening a topic claiming %d partitions allocated %d MB, the honest state %d MB", claim, hostile>>20, honest>>20)
		}
	}
}
