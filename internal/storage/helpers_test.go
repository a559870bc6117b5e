package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// rec is a record to build a test batch from. A nil value is a tombstone.
type rec struct {
	key, value []byte
	ts         int64
	headers    []record.RecordHeader
}

func kv(key, value string, ts int64) rec {
	r := rec{value: []byte(value), ts: ts}
	if key != "" {
		r.key = []byte(key)
	}
	return r
}

func tombstone(key string, ts int64) rec { return rec{key: []byte(key), ts: ts} }

// batchOpts tweaks a test batch's header.
type batchOpts struct {
	codec         record.Codec
	producerID    int64
	transactional bool
}

// mkBatch builds a batch at base holding recs, numbered 0, 1, 2, ...
func mkBatch(t testing.TB, base int64, recs []rec, o ...batchOpts) []byte {
	t.Helper()
	h := record.Header{BaseOffset: base, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	if len(o) > 0 {
		h.Attributes = int16(o[0].codec)
		if o[0].transactional {
			h.Attributes |= 0x10
			h.ProducerID, h.ProducerEpoch, h.BaseSequence = o[0].producerID, 0, 0
		}
	}
	if len(recs) > 0 {
		h.FirstTimestamp = recs[0].ts
	}
	rs := make([]record.Record, len(recs))
	for i, r := range recs {
		rs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: r.ts - h.FirstTimestamp, Key: r.key, Value: r.value, Headers: r.headers}
	}
	b, err := record.Build(h, rs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mkControl builds a transaction marker (commit or abort) of producer pid.
func mkControl(t testing.TB, base, pid int64, commit bool, ts int64) []byte {
	t.Helper()
	typ := byte(controlAbort)
	if commit {
		typ = controlCommit
	}
	h := record.Header{BaseOffset: base, Attributes: 0x30, ProducerID: pid, ProducerEpoch: 0, BaseSequence: -1, FirstTimestamp: ts}
	b, err := record.Build(h, []record.Record{{Key: []byte{0, 0, 0, typ}, Value: []byte{0, 0, 0, 0, 0, 7}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testLog opens a log in a fresh directory, closed at the end of the test.
func testLog(t testing.TB, cfg LogConfig) (*Log, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "topic-0")
	l, err := OpenLog(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, dir
}

// appendRecs appends one batch of recs at the log end and returns it.
func appendRecs(t testing.TB, l *Log, now int64, recs ...rec) []byte {
	t.Helper()
	b := mkBatch(t, l.NextOffset(), recs)
	if err := l.Append(b, now); err != nil {
		t.Fatal(err)
	}
	return b
}

// appendValues appends n batches of k records each with values of size
// bytes and timestamps ts, ts+1, ...; it returns the batches.
func appendValues(t testing.TB, l *Log, n, k, size int, ts int64) [][]byte {
	t.Helper()
	var out [][]byte
	for i := 0; i < n; i++ {
		recs := make([]rec, k)
		for j := range recs {
			recs[j] = rec{key: fmt.Appendf(nil, "k%d", (i*k+j)%7), value: bytes.Repeat([]byte{byte('a' + i%26)}, size), ts: ts}
			ts++
		}
		out = append(out, appendRecs(t, l, ts, recs...))
	}
	return out
}

// readAllBatches reads the whole log below NextOffset, one Read at a time.
func readAllBatches(t testing.TB, l *Log) [][]byte {
	t.Helper()
	var out [][]byte
	off, end := l.BaseOffset(), l.NextOffset()
	for off < end {
		b, err := l.Read(off, 1<<20, end)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			break
		}
		batches, err := record.Split(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range batches {
			h, _ := record.ParseHeader(x)
			out = append(out, x)
			off = h.LastOffset() + 1
		}
	}
	return out
}

// segmentFiles returns the contents of the segment files in dir by name.
func segmentFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if _, _, ok := parseSegmentName(e.Name()); !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func names(m map[string][]byte) string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, " ")
}

// sameFiles fails the test unless a and b hold the same files and bytes.
func sameFiles(t testing.TB, a, b map[string][]byte) {
	t.Helper()
	if names(a) != names(b) {
		t.Fatalf("files differ:\n%s\n%s", names(a), names(b))
	}
	for n := range a {
		if !bytes.Equal(a[n], b[n]) {
			t.Fatalf("%s differs (%d vs %d bytes)", n, len(a[n]), len(b[n]))
		}
	}
}

// concat joins batches.
func concat(bs [][]byte) []byte { return bytes.Join(bs, nil) }

// segmentFile is the path of a segment file with the given suffix.
func segmentFile(dir string, base int64, suffix string) string {
	return segmentPath(dir, base) + suffix
}
