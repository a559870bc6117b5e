package storage

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// debtStore leaves in dir a Pebble store with an L0 backlog over the whole
// key range (flushes with compactions off, as a burst of writes outrunning
// them leaves one) and a write-ahead log not yet flushed, then closes it.
func debtStore(t *testing.T, dir string, flushes int) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{
		DisableAutomaticCompactions: true,
		L0StopWritesThreshold:       1000,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      quietLogger{},
	})
	if err != nil {
		t.Fatal(err)
	}
	for f := 0; f <= flushes; f++ {
		b := db.NewBatch()
		for k := 0; k < 2000; k++ {
			// Every flush spans the key range, as the per-key index's writes do.
			_ = b.Set(fmt.Appendf(nil, "k/%05d", (k*7919+f)%2000), fmt.Appendf(nil, "v%d-%d", f, k), nil)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if f < flushes { // the last batch stays in the log, to be replayed
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := db.Metrics().Levels[0].TablesCount; n < int64(flushes) {
		t.Fatalf("setup: %d L0 tables, want %d", n, flushes)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// Pebble's Open waits for any compaction running when it lists obsolete
// files, and the flush of the replayed log starts one when L0 is over its
// threshold: with the store's L0 backlog after a burst that compaction made
// Open take seconds (docs/reliability.md, "Restart time"). OpenStore holds
// compactions until Open has returned, then lets Pebble run them.
func TestOpenStoreDefersCompactionDebt(t *testing.T) {
	dir := t.TempDir()
	debtStore(t, dir, 24)
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := s.db.Metrics()
	if m.Compact.Count != 0 {
		t.Fatalf("%d compactions ran inside Open; want none", m.Compact.Count)
	}
	if m.Flush.Count != 1 {
		t.Fatalf("Open flushed %d times; want the replayed log flushed once", m.Flush.Count)
	}
	before := m.Levels[0].TablesCount
	// Released, the backlog is compacted in the background.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m = s.db.Metrics()
		if m.Compact.Count > 0 && m.Levels[0].TablesCount < before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no compaction after Open: %d compactions, L0 %d tables (was %d)",
				m.Compact.Count, m.Levels[0].TablesCount, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The store still reads what was written, the replayed batch included.
	v, ok, err := s.Get([]byte("k/00024"))
	if err != nil || !ok || len(v) == 0 {
		t.Fatalf("%q %t %v", v, ok, err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Writes keep going into a store whose compactions the gate grants: many
// flushes over the key range are compacted as they come (L0 stays below
// Pebble's stop threshold, or writes would stall and this never ends), and
// Close returns with compactions waiting.
func TestOpenGateGrantsCompactions(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 60; f++ {
		b := s.NewBatch()
		for k := 0; k < 2000; k++ {
			b.Set(fmt.Appendf(nil, "k/%05d", (k*7919+f)%2000), fmt.Appendf(nil, "v%d-%d", f, k))
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	m := s.db.Metrics()
	if m.Compact.Count == 0 {
		t.Fatalf("60 flushes, no compaction: L0 %d tables", m.Levels[0].TablesCount)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A gate Open never registered (Open failed before) stops without waiting.
func TestOpenGateUnregisterUnregistered(t *testing.T) {
	g := newOpenGate()
	g.Unregister()
	g.Unregister() // and a second time is a no-op
	if ok, _ := g.TrySchedule(); ok {
		t.Fatal("a closed gate granted a compaction")
	}
}
