package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stele-io/stele/internal/durable"
)

// buildLog writes a log of several segments, closes it and returns the
// batches written.
func buildLog(t *testing.T, dir string, cfg LogConfig) [][]byte {
	t.Helper()
	l, err := OpenLog(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	batches := appendValues(t, l, 30, 3, 40, 1000)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return batches
}

func reopen(t *testing.T, dir string, cfg LogConfig) *Log {
	t.Helper()
	l, err := OpenLog(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// lastSegment returns the path of the active segment's .log.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(m) == 0 {
		t.Fatal(m, err)
	}
	return m[len(m)-1]
}

// Reference: DESIGN.md §3 — recovery must cope with a torn last batch; every
// whole batch before it is kept.
func TestRecoveryCutsTornTail(t *testing.T) {
	cfg := LogConfig{SegmentBytes: 1200, IndexIntervalBytes: 200}
	damage := map[string]func(t *testing.T, path string, last []byte){
		"truncated mid-batch": func(t *testing.T, path string, last []byte) {
			fi, _ := os.Stat(path)
			if err := os.Truncate(path, fi.Size()-int64(len(last))/2); err != nil {
				t.Fatal(err)
			}
		},
		"garbage appended": func(t *testing.T, path string, last []byte) {
			// Drop the last batch, then write garbage where it was.
			fi, _ := os.Stat(path)
			if err := os.Truncate(path, fi.Size()-int64(len(last))); err != nil {
				t.Fatal(err)
			}
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 100))
			f.Close()
		},
		"bit flipped in the last batch": func(t *testing.T, path string, last []byte) {
			b, _ := os.ReadFile(path)
			b[len(b)-len(last)/2] ^= 0x10
			os.WriteFile(path, b, 0o644)
		},
	}
	for name, damageFn := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			batches := buildLog(t, dir, cfg)
			path := lastSegment(t, dir)
			last := batches[len(batches)-1]
			damageFn(t, path, last)
			l := reopen(t, dir, cfg)
			want := batches[:len(batches)-1]
			if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(want)) {
				t.Fatalf("recovered %d batches, want the %d before the damage", len(got), len(want))
			}
			if l.NextOffset() != 87 {
				t.Fatalf("next offset %d, want 87", l.NextOffset())
			}
			if fi, _ := os.Stat(path); fi.Size() != l.Segments()[len(l.Segments())-1].Size {
				t.Fatal("the torn tail is still in the file")
			}
			// The log goes on from there.
			appendRecs(t, l, 0, kv("x", "y", 5))
			if l.NextOffset() != 88 {
				t.Fatal(l.NextOffset())
			}
		})
	}
}

func TestRecoveryRebuildsIndexes(t *testing.T) {
	cfg := LogConfig{SegmentBytes: 1200, IndexIntervalBytes: 200}
	dir := t.TempDir()
	buildLog(t, dir, cfg)
	want := segmentFiles(t, dir)
	if len(want) < 9 {
		t.Fatalf("want several segments: %s", names(want))
	}
	// Delete some index files, garble others.
	i := 0
	for name := range want {
		if strings.HasSuffix(name, logSuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		if i++; i%2 == 0 {
			os.Remove(path)
		} else {
			os.WriteFile(path, []byte("not an index"), 0o644)
		}
	}
	l := reopen(t, dir, cfg)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, segmentFiles(t, dir), want)
}

func TestRecoveryReportsCorruptSealedSegment(t *testing.T) {
	cfg := LogConfig{SegmentBytes: 1200}
	dir := t.TempDir()
	buildLog(t, dir, cfg)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	victim := logs[1]
	fi, _ := os.Stat(victim)
	os.Truncate(victim, fi.Size()-10)
	_, err := OpenLog(dir, cfg)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(victim)) {
		t.Fatalf("OpenLog: %v; want ErrCorrupt naming %s", err, filepath.Base(victim))
	}

	// A sealed segment cut exactly at a batch boundary is caught too: it
	// no longer ends where the next segment starts.
	dir = t.TempDir()
	batches := buildLog(t, dir, cfg)
	logs, _ = filepath.Glob(filepath.Join(dir, "*.log"))
	b, _ := os.ReadFile(logs[0])
	os.WriteFile(logs[0], b[:len(b)-len(batches[0])], 0o644)
	os.Remove(strings.TrimSuffix(logs[0], logSuffix) + indexSuffix)
	if _, err := OpenLog(dir, cfg); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("OpenLog: %v; want ErrCorrupt", err)
	}
}

func TestRecoveryTidiesDirectory(t *testing.T) {
	dir := t.TempDir()
	batches := buildLog(t, dir, LogConfig{})
	for _, name := range []string{
		"00000000000000000500.index",          // orphan index
		"00000000000000000000.log.cleaned",    // an interrupted compaction
		"00000000000000000000.index.swap",     // ... before its commit point
		"00000000000000000000.timeindex.swap", //
		"00000000000000000007.log.deleted",    // Kafka's deleted files
	} {
		os.WriteFile(filepath.Join(dir, name), []byte("junk"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "partition.metadata"), []byte("keep me"), 0o644)
	l := reopen(t, dir, LogConfig{})
	if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(batches)) {
		t.Fatal("log changed")
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := "00000000000000000000.index 00000000000000000000.log 00000000000000000000.timeindex partition.metadata"; strings.Join(left, " ") != want {
		t.Fatalf("directory holds %v", left)
	}
}

func TestTruncateTo(t *testing.T) {
	cfg := LogConfig{SegmentBytes: 1200, IndexIntervalBytes: 200}
	l, dir := testLog(t, cfg)
	batches := appendValues(t, l, 30, 3, 40, 1000) // offsets 3i..3i+2
	nsegs := len(l.Segments())
	if err := l.TruncateTo(61); !errors.Is(err, ErrNotBatchBoundary) {
		t.Fatalf("inside a batch: %v", err)
	}
	if err := l.TruncateTo(91); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("past the end: %v", err)
	}
	if err := l.TruncateTo(90); err != nil { // a no-op
		t.Fatal(err)
	}
	if err := l.TruncateTo(60); err != nil {
		t.Fatal(err)
	}
	if l.NextOffset() != 60 || len(l.Segments()) >= nsegs {
		t.Fatalf("next %d, %d segments", l.NextOffset(), len(l.Segments()))
	}
	if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(batches[:20])) {
		t.Fatal("wrong batches left")
	}
	// Cutting back to a segment's base offset empties the previous
	// segment's successor rather than leaving an empty sealed segment.
	segs := l.Segments()
	base := segs[len(segs)-1].BaseOffset
	if err := l.TruncateTo(base); err != nil {
		t.Fatal(err)
	}
	if s := l.Segments(); s[len(s)-1].NextOffset != base || s[len(s)-1].Size == 0 {
		t.Fatalf("segments after truncating to %d: %+v", base, s)
	}
	// Appends go on, and a reopened log agrees.
	more := appendValues(t, l, 5, 3, 40, 5000)
	want := append(append([][]byte{}, batches[:base/3]...), more...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := reopen(t, dir, cfg)
	if got := readAllBatches(t, l2); !bytes.Equal(concat(got), concat(want)) {
		t.Fatal("reopened log differs")
	}
	if err := l2.TruncateTo(0); err != nil || l2.NextOffset() != 0 || l2.Size() != 0 {
		t.Fatalf("truncate to 0: %v, next %d", err, l2.NextOffset())
	}
}

// Reference: Kafka's retention deletes whole segments; deleting the active
// segment first rolls a new, empty one at the log end offset.
func TestDeleteSegmentsBefore(t *testing.T) {
	cfg := LogConfig{SegmentBytes: 1200}
	l, dir := testLog(t, cfg)
	batches := appendValues(t, l, 30, 3, 40, 1000)
	segs := l.Segments()
	// An offset inside the third segment deletes the first two only.
	base, err := l.DeleteSegmentsBefore(segs[2].BaseOffset + 1)
	if err != nil || base != segs[2].BaseOffset || l.BaseOffset() != base {
		t.Fatalf("base %d, %v", base, err)
	}
	if _, err := os.Stat(segmentFile(dir, segs[0].BaseOffset, logSuffix)); !os.IsNotExist(err) {
		t.Fatal("first segment still there")
	}
	if _, err := l.Read(0, 100, 90); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal(err)
	}
	if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(batches[base/3:])) {
		t.Fatal("wrong batches left")
	}
	// Everything: a new empty segment at the end.
	if base, err = l.DeleteSegmentsBefore(1 << 40); err != nil || base != 90 {
		t.Fatalf("base %d, %v", base, err)
	}
	if s := l.Segments(); len(s) != 1 || s[0].BaseOffset != 90 || s[0].Size != 0 {
		t.Fatalf("segments %+v", s)
	}
	// The empty active segment stays.
	if base, err = l.DeleteSegmentsBefore(1 << 40); err != nil || base != 90 {
		t.Fatalf("base %d, %v", base, err)
	}
	appendRecs(t, l, 0, kv("a", "b", 1))
	l.Close()
	l2 := reopen(t, dir, cfg)
	if l2.BaseOffset() != 90 || l2.NextOffset() != 91 {
		t.Fatalf("reopened: base %d next %d", l2.BaseOffset(), l2.NextOffset())
	}
}

func TestRemove(t *testing.T) {
	l, dir := testLog(t, LogConfig{})
	appendValues(t, l, 2, 2, 10, 0)
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("directory still there")
	}
}

// Sync fsyncs the active segment's log but not its index files, which
// every open rebuilds from the log; a segment's index files are fsynced
// when it is sealed. A power cut that loses whatever of the active index
// files was not fsynced (here: all of it) loses nothing.
func TestSyncLeavesActiveIndexesToRecovery(t *testing.T) {
	var mu sync.Mutex
	var synced []string
	fsync = func(f *os.File) error {
		mu.Lock()
		synced = append(synced, filepath.Base(f.Name()))
		mu.Unlock()
		return durable.Sync(f)
	}
	t.Cleanup(func() { fsync = durable.Sync })
	took := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := synced
		synced = nil
		return s
	}

	cfg := LogConfig{SegmentBytes: 1200, IndexIntervalBytes: 100}
	dir := t.TempDir()
	l, err := OpenLog(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendValues(t, l, 3, 3, 40, 1000)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	first := strings.TrimSuffix(filepath.Base(lastSegment(t, dir)), logSuffix)
	if got := took(); !slices.Equal(got, []string{first + logSuffix}) {
		t.Fatalf("Sync of the active segment fsynced %v, want only its log", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, first+indexSuffix)); err != nil || fi.Size() == 0 {
		t.Fatalf("the active offset index is not written: %v %v", fi, err)
	}

	// Roll: the sealed segment's three files are fsynced, the new active
	// segment's log at the next Sync.
	for len(l.Segments()) == 1 {
		appendValues(t, l, 1, 3, 40, 2000)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	got := took()
	for _, want := range []string{first + logSuffix, first + indexSuffix, first + timeIndexSuffix} {
		if !slices.Contains(got, want) {
			t.Errorf("sealing fsynced %v, not %s", got, want)
		}
	}
	active := strings.TrimSuffix(filepath.Base(lastSegment(t, dir)), logSuffix)
	for _, name := range got {
		if name == active+indexSuffix || name == active+timeIndexSuffix {
			t.Errorf("Sync fsynced the active segment's %s", name)
		}
	}
	appendValues(t, l, 2, 3, 40, 3000)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	batches := readAllBatches(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := segmentFiles(t, dir)

	// The power cut: the active index files lose everything never fsynced.
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		if err := os.Truncate(filepath.Join(dir, active+suffix), 0); err != nil {
			t.Fatal(err)
		}
	}
	l = reopen(t, dir, cfg)
	if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(batches)) {
		t.Fatalf("after the power cut %d batches read, want %d", len(got), len(batches))
	}
	sameFiles(t, segmentFiles(t, dir), want)
}
