package record

import (
	"bytes"
	"fmt"
	"testing"

	gsnappy "github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
)

// BenchmarkSnappyBlock compares decodeSnappyBlock with github.com/golang/snappy,
// decoding the same raw block into the same reused output buffer:
//   - stele: decodeSnappyBlock, github.com/klauspost/compress/snappy's
//     DecodeStrict (until 8cd1024 a hand-written strictness check, then
//     s2.Decode: no faster, docs/benchmarks.md "Snappy decoding");
//   - golang-snappy: github.com/golang/snappy.Decode, the reference
//     implementation (assembly on amd64 and arm64), also strict: it
//     refuses S2's repeat copies (offset 0). Faster, but archived upstream.
//
// The blocks hold text-like JSON: bench16KiB's records, 16 KiB as one
// xerial block of the Java client holds, and 1 MiB of such values (none
// repeated), as librdkafka sends a whole batch as one raw block. SetBytes
// counts the decoded bytes.
//
//	go test -run='^$' -bench=BenchmarkSnappyBlock -count 5 ./internal/record/
func BenchmarkSnappyBlock(b *testing.B) {
	records := bench16KiB(b, CodecNone)[HeaderSize:]
	for _, size := range []struct {
		name string
		raw  []byte
	}{
		{"16KiB", records},
		{"1MiB", textLike(1 << 20)},
	} {
		src := s2.EncodeSnappy(nil, size.raw)
		dst := make([]byte, len(size.raw))
		decoders := []struct {
			name   string
			decode func() ([]byte, error)
		}{
			{"stele", func() ([]byte, error) { return decodeSnappyBlock(dst, src) }},
			{"golang-snappy", func() ([]byte, error) { return gsnappy.Decode(dst, src) }},
		}
		for _, d := range decoders {
			out, err := d.decode()
			if err != nil || !bytes.Equal(out, size.raw) {
				b.Fatalf("%s/%s: %v, or decoded differently", size.name, d.name, err)
			}
			b.Run(size.name+"/"+d.name, func(b *testing.B) {
				b.SetBytes(int64(len(size.raw)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.decode(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// textLike returns n bytes of JSON objects like bench16KiB's values, none
// repeated.
func textLike(n int) []byte {
	v := make([]byte, 0, n+64)
	for j := 0; len(v) < n; j++ {
		v = fmt.Appendf(v, `{"id":%d,"n":%d,"s":"%x"},`, j%16, j, j*104729)
	}
	return v[:n]
}
