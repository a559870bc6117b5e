package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// readCheckpoint returns the checkpoint's files, each read up to its
// recorded size.
func readCheckpoint(t testing.TB, dir string, files []CheckpointFile) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) < f.Size {
			t.Fatalf("%s has %d bytes, checkpoint recorded %d", f.Name, len(b), f.Size)
		}
		out[f.Name] = b[:f.Size]
	}
	return out
}

// TestCheckpointSurvivesLaterWrites: a checkpoint keeps the bytes the log
// had when it was taken while the log goes on appending, rolling,
// compacting and deleting segments, and a log opened on a copy of it holds
// the same batches as the log had then.
func TestCheckpointSurvivesLaterWrites(t *testing.T) {
	l, dir := testLog(t, compactCfg)
	input := compactInput(t)
	feed(t, l, input[:40])
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	before := segmentFiles(t, dir)
	wantBatches := readAllBatches(t, l)
	if len(l.Segments()) < 3 {
		t.Fatalf("test setup: want several segments, have %d", len(l.Segments()))
	}

	cp := filepath.Join(t.TempDir(), "cp")
	files, err := l.Checkpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint(cp); !errors.Is(err, ErrCheckpointExists) {
		t.Errorf("second checkpoint into the same directory: %v, want ErrCheckpointExists", err)
	}
	sameFiles(t, readCheckpoint(t, cp, files), before)

	// The log moves on: appends (into the linked active segment and new
	// ones), a compaction that rewrites sealed segments, a deletion.
	feed(t, l, input[40:])
	stats, err := l.Compact(1 << 62)
	if err != nil {
		t.Fatal(err)
	}
	if stats.SegmentsCleaned == 0 {
		t.Fatalf("test setup: compaction rewrote nothing")
	}
	if _, err := l.DeleteSegmentsBefore(l.Segments()[1].BaseOffset); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(concat(readAllBatches(t, l)), concat(wantBatches)) {
		t.Fatalf("test setup: the log did not change")
	}
	got := readCheckpoint(t, cp, files)
	sameFiles(t, got, before)

	// A log opened on the checkpoint's bytes is the log as it was.
	copyDir := filepath.Join(t.TempDir(), "topic-0")
	if err := os.MkdirAll(copyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range got {
		if err := os.WriteFile(filepath.Join(copyDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := OpenLog(copyDir, compactCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if !bytes.Equal(concat(readAllBatches(t, l2)), concat(wantBatches)) {
		t.Errorf("log opened on the checkpoint reads differently")
	}
	if err := l2.Sync(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, segmentFiles(t, copyDir), before)
}

// TestCheckpointOfEmptyLog: a new log's checkpoint is one empty segment.
func TestCheckpointOfEmptyLog(t *testing.T) {
	l, _ := testLog(t, LogConfig{})
	files, err := l.Checkpoint(filepath.Join(t.TempDir(), "cp"))
	if err != nil {
		t.Fatal(err)
	}
	want := []CheckpointFile{{"00000000000000000000.log", 0}, {"00000000000000000000.index", 0}, {"00000000000000000000.timeindex", 0}}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Errorf("checkpoint files %v, want %v", files, want)
	}
}

// TestStoreCheckpoint: a store checkpoint holds every key committed before
// it and none written after.
func TestStoreCheckpoint(t *testing.T) {
	s, err := OpenStore(filepath.Join(t.TempDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string]string{}
	b := s.NewBatch()
	for i := 0; i < 500; i++ {
		k, v := fmt.Sprintf("k/%04d", i), fmt.Sprintf("value %d", i)
		b.Set([]byte(k), []byte(v))
		want[k] = v
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if err := s.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(cp); !errors.Is(err, ErrCheckpointExists) {
		t.Errorf("second checkpoint into the same directory: %v, want ErrCheckpointExists", err)
	}
	b = s.NewBatch()
	b.Set([]byte("k/later"), []byte("x"))
	b.Delete([]byte("k/0000"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var prev string
	err = ScanStoreDir(cp, func(k, v []byte) error {
		if string(k) <= prev {
			return fmt.Errorf("keys out of order: %q after %q", k, prev)
		}
		prev = string(k)
		got[string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("checkpoint holds %d keys, want %d", len(got), len(want))
	}
	if err := SyncTree(cp); err != nil {
		t.Errorf("SyncTree: %v", err)
	}
}

// TestPinOutlivesCompactionAndDeletion: a pin links the files that are
// unchanged (the active segment, appended to since), and, after a
// compaction rewrote its segments and the whole log was removed, still
// writes the log as it was, copying what no longer has a name.
func TestPinOutlivesCompactionAndDeletion(t *testing.T) {
	l, dir := testLog(t, compactCfg)
	input := compactInput(t)
	feed(t, l, input[:40])
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	before := segmentFiles(t, dir)
	pin, err := l.Pin()
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Release()
	feed(t, l, input[40:])

	linked := filepath.Join(t.TempDir(), "linked")
	if err := pin.WriteTo(linked); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, readCheckpoint(t, linked, pin.Files()), before)
	active := pin.Files()[len(pin.Files())-3].Name // the pinned active segment's .log
	a, _ := os.Stat(filepath.Join(dir, active))
	b, _ := os.Stat(filepath.Join(linked, active))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("the unchanged active segment %s was not hard-linked", active)
	}

	if st, err := l.Compact(1 << 62); err != nil || st.SegmentsCleaned == 0 {
		t.Fatalf("test setup: compaction %+v %v", st, err)
	}
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "copied")
	if err := pin.WriteTo(copied); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, readCheckpoint(t, copied, pin.Files()), before)
	pin.Release()
	pin.Release()
	if err := pin.WriteTo(filepath.Join(t.TempDir(), "late")); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteTo after Release: %v, want ErrClosed", err)
	}
}
