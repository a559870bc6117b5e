package storage

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

func TestAppendAndRead(t *testing.T) {
	l, dir := testLog(t, LogConfig{})
	if l.NextOffset() != 0 || l.BaseOffset() != 0 {
		t.Fatalf("new log: next %d base %d", l.NextOffset(), l.BaseOffset())
	}
	if _, err := os.Stat(filepath.Join(dir, "00000000000000000000.log")); err != nil {
		t.Fatal(err)
	}
	batches := appendValues(t, l, 10, 3, 50, 1000)
	if l.NextOffset() != 30 {
		t.Fatalf("next offset %d, want 30", l.NextOffset())
	}
	if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(batches)) {
		t.Fatal("read back different bytes")
	}
	// Every offset reads from the batch holding it.
	for off := int64(0); off < 30; off++ {
		b, err := l.Read(off, 1, 30)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, batches[off/3]) {
			t.Fatalf("Read(%d) did not return batch %d alone", off, off/3)
		}
	}
	if b, err := l.Read(30, 1<<20, 30); b != nil || err != nil {
		t.Fatalf("Read at the end: %d bytes, %v", len(b), err)
	}
	for _, off := range []int64{-1, 31} {
		if _, err := l.Read(off, 1<<20, 30); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read(%d): %v, want ErrOffsetOutOfRange", off, err)
		}
	}
	if err := l.Append(mkBatch(t, 7, []rec{kv("a", "b", 1)}), 0); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("append at a wrong offset: %v", err)
	}
	bad := mkBatch(t, 30, []rec{kv("a", "b", 1)})
	bad[len(bad)-1] ^= 1
	if err := l.Append(bad, 0); !errors.Is(err, record.ErrCorrupt) {
		t.Fatalf("append with a bad CRC: %v", err)
	}
	if l.Size() != int64(len(concat(batches))) {
		t.Fatalf("size %d", l.Size())
	}
}

// Reference: KIP-74 — a fetch returns at least one whole batch even when it
// is larger than the limit, and otherwise stays within the limit.
func TestReadKIP74AndHighWatermark(t *testing.T) {
	l, _ := testLog(t, LogConfig{SegmentBytes: 1500})
	batches := appendValues(t, l, 12, 2, 200, 0) // ~480-byte batches, 3 per segment
	if n := len(l.Segments()); n != 4 {
		t.Fatalf("%d segments, want 4", n)
	}
	size := len(batches[0])
	cases := []struct {
		offset         int64
		maxBytes       int
		upTo           int64
		first, nbatchs int
	}{
		{0, 1, 24, 0, 1},               // one batch however small the limit
		{0, 0, 24, 0, 1},               // even zero
		{0, 2*size + size/2, 24, 0, 2}, // whole batches only
		{3, 3 * size, 24, 1, 3},        // starts with the batch holding offset 3
		{4, 10 * size, 24, 2, 10},      // crosses segments
		{4, 10 * size, 10, 2, 3},       // never at or past upTo
		{10, 10 * size, 10, 0, 0},      // offset at upTo: nothing
		{11, 10 * size, 10, 0, 0},
	}
	for _, c := range cases {
		got, err := l.Read(c.offset, c.maxBytes, c.upTo)
		if err != nil {
			t.Fatal(err)
		}
		want := concat(batches[c.first : c.first+c.nbatchs])
		if c.nbatchs == 0 {
			want = nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Read(%d, %d, %d): %d bytes, want batches %d..%d (%d bytes)", c.offset, c.maxBytes, c.upTo, len(got), c.first, c.first+c.nbatchs-1, len(want))
		}
	}
}

// TestReadWithin: without KIP-74's exception (every partition of a fetch
// after the first that returned data), a read returns only the whole
// batches that fit, and nothing when the first does not.
func TestReadWithin(t *testing.T) {
	l, _ := testLog(t, LogConfig{SegmentBytes: 1500})
	batches := appendValues(t, l, 12, 2, 200, 0) // ~480-byte batches, 3 per segment
	size := len(batches[0])
	cases := []struct {
		offset         int64
		maxBytes       int
		first, nbatchs int
	}{
		{0, 0, 0, 0},
		{0, 1, 0, 0},
		{0, size - 1, 0, 0},
		{0, size, 0, 1},
		{0, 2*size + size/2, 0, 2},
		{3, size - 1, 0, 0},   // the batch holding offset 3 does not fit
		{4, 5*size + 1, 2, 5}, // crosses segments
	}
	for _, c := range cases {
		got, err := l.ReadWithin(c.offset, c.maxBytes, 24)
		if err != nil {
			t.Fatal(err)
		}
		want := concat(batches[c.first : c.first+c.nbatchs])
		if len(got) != len(want) || !bytes.Equal(got, want) {
			t.Errorf("ReadWithin(%d, %d): %d bytes, want %d batches from %d (%d bytes)", c.offset, c.maxBytes, len(got), c.nbatchs, c.first, len(want))
		}
	}
}

func TestRollBySize(t *testing.T) {
	l, dir := testLog(t, LogConfig{SegmentBytes: 1000})
	batches := appendValues(t, l, 20, 1, 150, 0)
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	for i, s := range segs {
		if s.Size > 1000 {
			t.Errorf("segment %d has %d bytes, over segment.bytes", i, s.Size)
		}
		if i > 0 && segs[i-1].NextOffset != s.BaseOffset {
			t.Errorf("segment %d starts at %d, previous ends at %d", i, s.BaseOffset, segs[i-1].NextOffset)
		}
		if _, err := os.Stat(segmentFile(dir, s.BaseOffset, logSuffix)); err != nil {
			t.Error(err)
		}
	}
	// A batch larger than segment.bytes still goes in, alone.
	big := appendValues(t, l, 1, 1, 3000, 100)
	if s := l.Segments(); s[len(s)-1].Size != int64(len(big[0])) {
		t.Fatalf("big batch not alone in its segment: %+v", s[len(s)-1])
	}
	if got := readAllBatches(t, l); !bytes.Equal(concat(got), concat(append(batches, big...))) {
		t.Fatal("read back different bytes")
	}
}

// Reference: Kafka LogSegment.shouldRoll — a segment rolls when the batch's
// timestamp is more than segment.ms after the segment's first timestamp.
func TestRollByTime(t *testing.T) {
	l, _ := testLog(t, LogConfig{SegmentMs: 1000})
	appendRecs(t, l, 0, kv("a", "1", 5000))
	appendRecs(t, l, 0, kv("a", "2", 6000)) // exactly segment.ms later: no roll
	if n := len(l.Segments()); n != 1 {
		t.Fatalf("%d segments after 1000 ms", n)
	}
	appendRecs(t, l, 0, kv("a", "3", 6001))
	segs := l.Segments()
	if len(segs) != 2 || segs[1].BaseOffset != 2 || segs[1].RollTimestamp != 6001 || segs[0].MaxTimestamp != 6000 {
		t.Fatalf("segments %+v", segs)
	}
	// Batches without timestamps use the block time.
	appendRecs(t, l, 0, kv("a", "4", -1))
	if n := len(l.Segments()); n != 2 {
		t.Fatalf("rolled on a batch without timestamp at block time 0")
	}
	appendRecs(t, l, 7002, kv("a", "5", -1))
	if n := len(l.Segments()); n != 3 {
		t.Fatalf("did not roll at block time 7002: %d segments", n)
	}
	// A segment none of whose batches has a timestamp does not roll by time.
	appendRecs(t, l, 1<<40, kv("a", "6", -1))
	if n := len(l.Segments()); n != 3 {
		t.Fatalf("a segment without timestamps rolled by time")
	}
}

func TestRollWhenIndexFull(t *testing.T) {
	// 24 bytes: three offset index entries or two time index entries fit.
	// With a 1-byte interval every batch after the first gets one of each
	// (timestamps grow), so the time index fills after three batches.
	l, _ := testLog(t, LogConfig{MaxIndexBytes: 24, IndexIntervalBytes: 1})
	appendValues(t, l, 7, 1, 10, 0)
	var counts []int64
	for _, s := range l.Segments() {
		counts = append(counts, s.NextOffset-s.BaseOffset)
	}
	if len(counts) != 3 || counts[0] != 3 || counts[1] != 3 {
		t.Fatalf("batches per segment %v, want [3 3 1]", counts)
	}
}

func TestIndexesFollowKafkaRules(t *testing.T) {
	l, dir := testLog(t, LogConfig{SegmentBytes: 3000, IndexIntervalBytes: 300})
	appendValues(t, l, 20, 2, 100, 0)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Segments()[:len(l.Segments())-1] {
		for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
			var out bytes.Buffer
			if err := DumpSegment(&out, segmentFile(dir, s.BaseOffset, suffix), DumpOptions{}); err != nil {
				t.Fatalf("%s: %v\n%s", suffix, err, out.String())
			}
		}
		entries, err := os.ReadFile(segmentFile(dir, s.BaseOffset, indexSuffix))
		if err != nil {
			t.Fatal(err)
		}
		// ~260-byte batches and a 300-byte interval: every second batch.
		if n := len(entries) / offsetEntrySize; n < 3 {
			t.Fatalf("segment %d: %d offset index entries", s.BaseOffset, n)
		}
	}
}

// The reader's lookups agree with a brute-force scan for random logs with
// timestamps out of order, several segments and every high watermark.
func TestOffsetForTimestampAndMaxTimestamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l, _ := testLog(t, LogConfig{SegmentBytes: 2000, IndexIntervalBytes: 100})
	type r struct{ off, ts int64 }
	var all []r
	for i := 0; i < 60; i++ {
		n := 1 + rng.IntN(4)
		recs := make([]rec, n)
		for j := range recs {
			recs[j] = kv("k", "v", int64(rng.IntN(20))) // ties are common
			all = append(all, r{l.NextOffset() + int64(j), recs[j].ts})
		}
		h := mkBatch(t, l.NextOffset(), recs)
		if err := l.Append(h, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.Segments()) < 3 {
		t.Fatal("want several segments")
	}
	end := l.NextOffset()
	for upTo := int64(0); upTo <= end; upTo += 7 {
		// MaxTimestamp: the first record with the largest timestamp.
		wantOff, wantTs := int64(-1), int64(-1)
		for _, x := range all {
			if x.off < upTo && x.ts > wantTs {
				wantOff, wantTs = x.off, x.ts
			}
		}
		off, ts, err := l.MaxTimestamp(upTo)
		if err != nil || off != wantOff || ts != wantTs {
			t.Fatalf("MaxTimestamp(%d) = %d, %d, %v; want %d, %d", upTo, off, ts, err, wantOff, wantTs)
		}
		for _, target := range []int64{-5, 0, 1, 7, 15, 18, 19, 20} {
			var want *r
			for i := range all {
				if all[i].off < upTo && all[i].ts >= target {
					want = &all[i]
					break
				}
			}
			off, ts, found, err := l.OffsetForTimestamp(target, upTo)
			if err != nil {
				t.Fatal(err)
			}
			if (want != nil) != found || want != nil && (off != want.off || ts != want.ts) {
				t.Fatalf("OffsetForTimestamp(%d, %d) = %d, %d, %v; want %+v", target, upTo, off, ts, found, want)
			}
		}
	}
}

func TestConfigTextRoundTrips(t *testing.T) {
	c := LogConfig{}.WithDefaults()
	got, err := ParseLogConfig(c.String())
	if err != nil || got != c {
		t.Fatalf("%v, %v", got, err)
	}
	if err := (LogConfig{SegmentBytes: 1 << 40}).Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("oversized segment.bytes: %v", err)
	}
	if c := (LogConfig{SegmentBytes: 1 << 40, MaxIndexBytes: 1}).Clamp(); c.Validate() != nil {
		t.Fatalf("clamped config invalid: %v", c)
	}
	if _, err := ParseLogConfig("segment.bytes=x"); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
}

func TestClosedLog(t *testing.T) {
	l, _ := testLog(t, LogConfig{})
	appendValues(t, l, 1, 1, 10, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(0, 100, 1); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := l.Append(mkBatch(t, 1, []rec{kv("a", "b", 0)}), 0); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// Rolls are the same whether a config change reached a running log or a
// log reopened after it: the index that decides "index full" is rebuilt.
func TestSetConfigIsDeterministic(t *testing.T) {
	first, second := LogConfig{}, LogConfig{IndexIntervalBytes: 1, MaxIndexBytes: 36}
	a, dirA := testLog(t, first)
	input := make([][]byte, 20)
	for i := range input {
		input[i] = mkBatch(t, int64(i), []rec{kv("k", "v", int64(i))})
	}
	feed(t, a, input[:6])
	if err := a.SetConfig(second); err != nil {
		t.Fatal(err)
	}
	feed(t, a, input[6:])
	a.Close()

	dirB := filepath.Join(t.TempDir(), "b")
	b, err := OpenLog(dirB, first)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, b, input[:6])
	b.Close()
	b = reopen(t, dirB, second)
	feed(t, b, input[6:])
	b.Close()
	if len(segmentFiles(t, dirA)) < 9 {
		t.Fatalf("want several segments: %s", names(segmentFiles(t, dirA)))
	}
	sameFiles(t, segmentFiles(t, dirA), segmentFiles(t, dirB))
}
