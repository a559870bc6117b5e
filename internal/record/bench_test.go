package record

import (
	"fmt"
	"testing"
)

// bench16KiB returns a batch of 16 records of 1000-byte values, about
// 16 KiB uncompressed (Java's default batch.size), with codec c. Values
// are text-like so compression is realistic rather than trivial.
func bench16KiB(tb testing.TB, c Codec) []byte {
	recs := make([]Record, 16)
	for i := range recs {
		v := make([]byte, 0, 1000)
		for j := 0; len(v) < 1000; j++ {
			v = fmt.Appendf(v, `{"id":%d,"n":%d,"s":"%x"},`, i, j, i*7919+j*104729)
		}
		recs[i] = Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Key: fmt.Appendf(nil, "key-%d", i), Value: v[:1000]}
	}
	return mustBuild(tb, Header{Attributes: int16(c), ProducerID: -1, BaseSequence: -1}, recs)
}

// BenchmarkValidate measures Validate (framing, CRC, decompression, every
// record decoded) on a 16 KiB batch of each codec. SetBytes counts the
// uncompressed records, so MB/s compare across codecs.
//
//	go test -run='^$' -bench=BenchmarkValidate ./internal/record/
func BenchmarkValidate(b *testing.B) {
	for _, c := range allCodecs {
		batch := bench16KiB(b, c)
		if _, err := Validate(batch); err != nil {
			b.Fatal(err)
		}
		b.Run(c.String(), func(b *testing.B) {
			b.SetBytes(int64(len(bench16KiB(b, CodecNone))))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Validate(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecords measures decoding a 16 KiB uncompressed batch into
// records.
func BenchmarkRecords(b *testing.B) {
	batch := bench16KiB(b, CodecNone)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Records(batch); err != nil {
			b.Fatal(err)
		}
	}
}
