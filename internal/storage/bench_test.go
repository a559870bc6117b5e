package storage

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// benchBatch is a 16 KiB batch of 1 KiB records.
func benchBatch(b *testing.B) []byte {
	recs := make([]rec, 16)
	for i := range recs {
		recs[i] = rec{key: fmt.Appendf(nil, "key-%d", i), value: bytes.Repeat([]byte{'v'}, 1000), ts: int64(i)}
	}
	return mkBatch(b, 0, recs)
}

// BenchmarkAppend appends 16 KiB batches of 1 KiB records (page cache
// only: no Sync), rolling 64 MiB segments.
func BenchmarkAppend(b *testing.B) {
	l, _ := testLog(b, LogConfig{SegmentBytes: 64 << 20})
	batch := benchBatch(b)
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		record.SetBaseOffset(batch, l.NextOffset())
		if err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead reads 1 MiB (64 batches) at a time from a 64 MiB log.
func BenchmarkRead(b *testing.B) {
	l, _ := testLog(b, LogConfig{SegmentBytes: 16 << 20})
	batch := benchBatch(b)
	for i := 0; i < 4096; i++ {
		record.SetBaseOffset(batch, l.NextOffset())
		if err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	end := l.NextOffset()
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i*1024) % end
		out, err := l.Read(off, 1<<20, end)
		if err != nil || len(out) == 0 {
			b.Fatal(len(out), err)
		}
	}
}
