package storage

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// compactInput is a deterministic mix: keys overwritten many times, with
// tombstones, keyless records and several codecs; returned as the batches
// to append and each batch's block time.
func compactInput(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	next := int64(0)
	codecs := []record.Codec{record.CodecNone, record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd}
	for i := 0; i < 60; i++ {
		var recs []rec
		for j := 0; j < 4; j++ {
			n := i*4 + j
			ts := int64(1000 + n*10)
			switch {
			case n%23 == 0:
				recs = append(recs, kv("", "no key", ts))
			case n%17 == 3:
				recs = append(recs, kv(fmt.Sprintf("once-%d", n), "set once", ts))
			case n%17 == 0 && n > 0:
				recs = append(recs, tombstone(fmt.Sprintf("once-%d", n-14), ts))
			default:
				recs = append(recs, kv(fmt.Sprintf("key-%d", n%13), fmt.Sprintf("value %d %s", n, bytes.Repeat([]byte("x"), n%50)), ts))
			}
		}
		b := mkBatch(t, next, recs, batchOpts{codec: codecs[i%len(codecs)]})
		out = append(out, b)
		next += int64(len(recs))
	}
	return out
}

var compactCfg = LogConfig{SegmentBytes: 2000, IndexIntervalBytes: 256}

func feed(t testing.TB, l *Log, batches [][]byte) {
	t.Helper()
	for _, b := range batches {
		if err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// records returns every record of the log by offset.
func recordsByOffset(t testing.TB, l *Log) map[int64]record.Record {
	t.Helper()
	out := map[int64]record.Record{}
	for _, b := range readAllBatches(t, l) {
		_, recs, err := record.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out[r.Offset] = r
		}
	}
	return out
}

// Reference: Kafka's log compaction guarantees — the latest value of every
// key survives, offsets never change, and tombstones go after the delete
// horizon.
func TestCompactKeepsLatestPerKey(t *testing.T) {
	l, _ := testLog(t, compactCfg)
	input := compactInput(t)
	feed(t, l, input)
	before := recordsByOffset(t, l)
	segs := l.Segments()
	activeBase := segs[len(segs)-1].BaseOffset
	const horizon = 1000 + 120*10 // tombstones of the first half are past it
	stats, err := l.Compact(horizon)
	if err != nil {
		t.Fatal(err)
	}
	if stats.SegmentsCleaned == 0 || stats.Superseded == 0 || stats.Tombstones == 0 || stats.Keyless == 0 {
		t.Fatalf("stats %+v", stats)
	}
	after := recordsByOffset(t, l)
	if l.NextOffset() != 240 || len(l.Segments()) != len(segs) {
		t.Fatalf("next %d, %d segments", l.NextOffset(), len(l.Segments()))
	}
	latest := map[string]int64{}
	for off := int64(0); off < 240; off++ {
		if r := before[off]; r.Key != nil {
			latest[string(r.Key)] = off
		}
	}
	for off, r := range before {
		got, kept := after[off]
		if kept && (!bytes.Equal(got.Key, r.Key) || !bytes.Equal(got.Value, r.Value) || got.Timestamp != r.Timestamp) {
			t.Fatalf("offset %d changed: %+v -> %+v", off, r, got)
		}
		var want bool
		switch {
		case off >= activeBase:
			want = true // the active segment is never compacted
		case r.Key == nil:
			want = false
		case latest[string(r.Key)] != off:
			want = false
		case r.Value == nil:
			// The batch's MaxTimestamp is the last of its four records.
			want = (off/4*4+3)*10+1000 >= horizon
		default:
			want = true
		}
		if kept != want {
			t.Errorf("offset %d (key %q, tombstone %t): kept %t, want %t", off, r.Key, r.Value == nil, kept, want)
		}
	}
	// Every sealed segment still ends just before the next one starts.
	for i, s := range l.Segments()[:len(segs)-1] {
		b, err := l.Read(s.NextOffset-1, 1, s.NextOffset)
		if err != nil {
			t.Fatal(err)
		}
		h, err := record.ParseHeader(b)
		if err != nil || h.LastOffset() != s.NextOffset-1 {
			t.Fatalf("segment %d does not end at %d: %+v %v", i, s.NextOffset-1, h, err)
		}
	}
}

func TestCompactIsDeterministicAndIdempotent(t *testing.T) {
	input := compactInput(t)
	a, dirA := testLog(t, compactCfg)
	b, dirB := testLog(t, compactCfg)
	feed(t, a, input)
	feed(t, b, input)
	// At 1700 a tombstone at 1680 stays only because its batch's
	// MaxTimestamp (1710) is kept when the batch's other records go.
	const horizon = 1700
	for _, l := range []*Log{a, b} {
		if _, err := l.Compact(horizon); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	first := segmentFiles(t, dirA)
	sameFiles(t, first, segmentFiles(t, dirB))
	// A second pass with the same horizon changes nothing.
	stats, err := a.Compact(horizon)
	if err != nil || stats.SegmentsCleaned != 0 {
		t.Fatalf("second pass: %+v, %v", stats, err)
	}
	sameFiles(t, first, segmentFiles(t, dirA))
	// Every batch still checks out as a stored batch.
	for _, x := range readAllBatches(t, a) {
		if _, err := record.ValidateStored(x); err != nil {
			t.Fatal(err)
		}
	}
	// Dumping the compacted segments with index checks finds nothing wrong.
	for name := range first {
		var out bytes.Buffer
		if err := DumpSegment(&out, filepath.Join(dirA, name), DumpOptions{PrintRecords: true, VerifyIndex: true}); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
	}
}

// A compaction interrupted at any step of its swap is finished or rolled
// back by OpenLog, and either way the next pass gives the bytes an
// uninterrupted compaction gives.
func TestCompactCrashMidSwap(t *testing.T) {
	input := compactInput(t)
	ref, refDir := testLog(t, compactCfg)
	feed(t, ref, input)
	if _, err := ref.Compact(1500); err != nil {
		t.Fatal(err)
	}
	ref.Close()
	want := segmentFiles(t, refDir)

	for step := 0; step < 10; step++ {
		t.Run(fmt.Sprint("step", step), func(t *testing.T) {
			l, dir := testLog(t, compactCfg)
			feed(t, l, input)
			before := recordsByOffset(t, l)
			calls, crashed := 0, int64(-1)
			l.swapHook = func(base int64, s int) bool {
				calls++
				if calls > 10 && s == step { // crash in the second segment's swap
					crashed = base
					return true
				}
				return false
			}
			if _, err := l.Compact(1500); err == nil {
				t.Fatal("no crash")
			}
			// The process dies here: nothing more is written. Reopen.
			l2 := reopen(t, dir, compactCfg)
			got := recordsByOffset(t, l2)
			if len(got) == 0 || l2.NextOffset() != 240 {
				t.Fatalf("reopened: %d records, next %d", len(got), l2.NextOffset())
			}
			for off, r := range got {
				if !bytes.Equal(r.Value, before[off].Value) {
					t.Fatalf("offset %d reads %q after the crash, was %q", off, r.Value, before[off].Value)
				}
			}
			// Past the commit point (the rename to .log.swap, step 3) the
			// swap was finished; before it, the old segment stands.
			name := fmt.Sprintf("%020d.log", crashed)
			files := segmentFiles(t, dir)
			if finished := bytes.Equal(files[name], want[name]); finished != (step > 3) {
				t.Fatalf("crash before step %d: %s compacted %t", step, name, finished)
			}
			if _, err := l2.Compact(1500); err != nil {
				t.Fatal(err)
			}
			l2.Close()
			sameFiles(t, want, segmentFiles(t, dir))
		})
	}
}

// Reference: KIP-98 — the cleaner removes aborted transactions' records and
// never cleans past the first open transaction (the last stable offset).
func TestCompactTransactions(t *testing.T) {
	l, _ := testLog(t, LogConfig{SegmentBytes: 100}) // a batch per segment
	app := func(b []byte) {
		t.Helper()
		if err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	next := func() int64 { return l.NextOffset() }
	app(mkBatch(t, next(), []rec{kv("a", "a0", 1)}))                                                          // 0
	app(mkBatch(t, next(), []rec{kv("a", "a1-aborted", 2)}, batchOpts{producerID: 7, transactional: true}))   // 1
	app(mkBatch(t, next(), []rec{kv("b", "b0", 3)}))                                                          // 2
	app(mkControl(t, next(), 7, false, 4))                                                                    // 3 abort
	app(mkBatch(t, next(), []rec{kv("b", "b1-committed", 5)}, batchOpts{producerID: 8, transactional: true})) // 4
	app(mkControl(t, next(), 8, true, 6))                                                                     // 5 commit
	app(mkBatch(t, next(), []rec{kv("c", "c0", 7)}))                                                          // 6
	app(mkBatch(t, next(), []rec{kv("c", "c1-open", 8)}, batchOpts{producerID: 9, transactional: true}))      // 7, never ended
	app(mkBatch(t, next(), []rec{kv("d", "d0", 9)}))                                                          // 8
	app(mkBatch(t, next(), []rec{kv("d", "d1", 10)}))                                                         // 9
	if len(l.Segments()) < 4 {
		t.Fatalf("want several segments, got %+v", l.Segments())
	}
	if _, err := l.Compact(0); err != nil {
		t.Fatal(err)
	}
	got := recordsByOffset(t, l)
	for off, want := range map[int64]bool{
		0: true,  // a's aborted rewrite does not count
		1: false, // aborted
		2: false, // superseded by the committed b1
		3: true,  // markers stay
		4: true,
		5: true,
		6: true, // at or past the open transaction: not cleaned
		7: true,
		8: true,
	} {
		if _, kept := got[off]; kept != want {
			t.Errorf("offset %d: kept %t, want %t", off, kept, want)
		}
	}
}

// Readers keep reading while a compaction rewrites and swaps segments.
func TestReadDuringCompaction(t *testing.T) {
	l, _ := testLog(t, compactCfg)
	feed(t, l, compactInput(t))
	done := make(chan error)
	go func() {
		for i := 0; i < 200; i++ {
			if _, err := l.Read(int64(i%240), 1000, 240); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	if _, err := l.Compact(1500); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCompactSnapshots: with a snapshot header, compaction removes every
// record older than its key's latest snapshot record (committed: a
// snapshot in an aborted transaction counts for nothing) and nothing else:
// keys without a snapshot, keyless records and tombstones stay, offsets
// never change, and a second pass changes nothing.
func TestCompactSnapshots(t *testing.T) {
	l, err := OpenLog(filepath.Join(t.TempDir(), "p"), compactCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	snap := func(key, value string, ts int64) rec {
		r := kv(key, value, ts)
		r.headers = []record.RecordHeader{{Key: "snap", Value: []byte("1")}}
		return r
	}
	var next int64
	add := func(b []byte, n int) {
		t.Helper()
		feed(t, l, [][]byte{b})
		next += int64(n)
	}
	plain := func(recs ...rec) { add(mkBatch(t, next, recs), len(recs)) }
	plain(kv("a", "a0", 1), kv("b", "b0", 1), kv("", "keyless", 1)) // 0-2
	plain(kv("a", "a1", 2), snap("a", "a-snap-1", 2))               // 3-4
	plain(kv("a", "a2", 3), kv("c", "c0", 3), tombstone("c", 3))    // 5-7
	plain(snap("a", "a-snap-2", 4), kv("a", "a3", 4))               // 8-9
	// b's snapshot in a transaction that aborts: not a snapshot.
	add(mkBatch(t, next, []rec{snap("b", "b-snap-aborted", 5)}, batchOpts{producerID: 7, transactional: true}), 1) // 10
	add(mkControl(t, next, 7, false, 5), 1)                                                                        // 11
	plain(kv("b", "b1", 6))                                                                                        // 12
	for i := 0; i < 40; i++ {                                                                                      // seal every segment above
		plain(kv(fmt.Sprintf("filler-%d", i), string(bytes.Repeat([]byte("f"), 100)), 7))
	}
	before := recordsByOffset(t, l)
	stats, err := l.CompactWith(CompactOptions{SnapshotHeader: "snap"})
	if err != nil {
		t.Fatal(err)
	}
	after := recordsByOffset(t, l)
	gone := map[int64]bool{}
	for off := range before {
		if _, ok := after[off]; !ok {
			gone[off] = true
		}
	}
	// a's records before its latest snapshot (offset 8): 0, 3, 4, 5; the
	// aborted batch goes too.
	want := map[int64]bool{0: true, 3: true, 4: true, 5: true, 10: true}
	if fmt.Sprint(gone) != fmt.Sprint(want) {
		t.Fatalf("removed offsets %v, want %v (stats %+v)", gone, want, stats)
	}
	for off, r := range after {
		if b := before[off]; string(b.Value) != string(r.Value) || string(b.Key) != string(r.Key) {
			t.Fatalf("offset %d changed: %q -> %q", off, b.Value, r.Value)
		}
	}
	if stats.Snapshotted != 4 || stats.Superseded != 0 || stats.Keyless != 0 || stats.Tombstones != 0 {
		t.Errorf("stats %+v", stats)
	}
	again, err := l.CompactWith(CompactOptions{SnapshotHeader: "snap"})
	if err != nil || again.SegmentsCleaned != 0 {
		t.Fatalf("a second pass: %+v %v", again, err)
	}
}
