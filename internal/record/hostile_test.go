package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// withPayload returns a batch holding payload as its records section, with
// the given codec and count, framed and CRC'd correctly.
func withPayload(codec Codec, count int32, payload []byte) []byte {
	b := appendHeader(nil, Header{Magic: Magic, Attributes: int16(codec), NumRecords: count, LastOffsetDelta: count - 1})
	b = append(b, payload...)
	setLength(b)
	return fixCRC(b)
}

// allocatedBy reports how many bytes fn allocates.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Records that lie about their sizes and counts fail cleanly and cheaply.
func TestHostileRecords(t *testing.T) {
	maxVarint := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	cases := []struct {
		name    string
		count   int32
		payload []byte
	}{
		{"huge count, no bytes", 1<<31 - 1, nil},
		{"huge count, few bytes", 1<<31 - 1, bytes.Repeat([]byte{12, 0, 0, 0, 1, 1, 0}, 10)},
		{"varint of 10 bytes as a record length", 1, append(maxVarint, make([]byte, 20)...)},
		{"record length of 6 bytes", 1, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0}},
		{"negative record length", 1, []byte{0x01, 0, 0, 0, 0, 0, 0, 0}},
		{"record length past the end", 1, []byte{0x7e, 0, 0, 0, 0, 0, 0}},
		{"key length past the record", 1, []byte{12, 0, 0, 0, 0x7e, 1, 0}},
		{"key length beyond int32", 1, append(append([]byte{30, 0, 0, 0}, 0xfe, 0xff, 0xff, 0xff, 0x1f), make([]byte, 10)...)},
		{"negative header count", 1, []byte{12, 0, 0, 0, 1, 1, 1}},
		{"huge header count", 1, []byte{18, 0, 0, 0, 1, 1, 0xfe, 0xff, 0xff, 0xff, 0x07}},
		{"negative header key length", 1, []byte{16, 0, 0, 0, 1, 1, 2, 1, 1}},
		{"timestamp varint overflow", 1, append(append([]byte{30, 0}, maxVarint...), 0xff, 0, 0, 1, 1, 0)},
		{"bytes left in a record", 1, []byte{16, 0, 0, 0, 1, 1, 0, 0, 0}},
		{"a record short of its fields", 1, []byte{8, 0, 0, 0, 1}},
		{"empty record", 1, []byte{0, 0, 0, 0, 0, 0, 0}},
		{"records left over", 1, []byte{12, 0, 0, 0, 1, 1, 0, 12, 0, 0, 0, 1, 1, 0}},
	}
	for _, tc := range cases {
		b := withPayload(CodecNone, tc.count, tc.payload)
		var err error
		alloc := allocatedBy(func() { _, _, err = Records(b) })
		if !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: %v, want ErrInvalidRecord", tc.name, err)
		}
		if alloc > 64<<10 {
			t.Errorf("%s: allocated %d bytes", tc.name, alloc)
		}
	}
	// A well-formed minimal record decodes (null key and value).
	_, recs, err := Records(withPayload(CodecNone, 1, []byte{12, 0, 0, 0, 1, 1, 0}))
	if err != nil || len(recs) != 1 || recs[0].Key != nil || recs[0].Value != nil {
		t.Fatalf("minimal record: %+v %v", recs, err)
	}
	// Kafka reads any negative key length as null.
	_, recs, err = Records(withPayload(CodecNone, 1, []byte{12, 0, 0, 0, 5, 1, 0}))
	if err != nil || recs[0].Key != nil {
		t.Fatalf("key length -3: %+v %v", recs, err)
	}
}

// Compressed payloads that inflate past DecompressLimit are refused with
// ErrTooLarge, without allocating what they claim.
func TestDecompressionBombs(t *testing.T) {
	zeros := make([]byte, 16<<20)

	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	w.Write(zeros)
	w.Close()

	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	zs := enc.EncodeAll(zeros, nil)

	// A raw Snappy block claiming 1 GiB, and xerial blocks claiming 2 GiB.
	rawSnappy := binary.AppendUvarint(nil, 1<<30)
	xerial := append(append([]byte{}, xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
	for range 2 {
		xerial = binary.BigEndian.AppendUint32(xerial, 5)
		xerial = append(xerial, binary.AppendUvarint(nil, 1<<30)...)
		xerial = append(xerial, make([]byte, 5-len(binary.AppendUvarint(nil, 1<<30)))...)
	}

	cases := []struct {
		name    string
		codec   Codec
		payload []byte
	}{
		{"gzip", CodecGzip, gz.Bytes()},
		{"zstd", CodecZstd, zs},
		{"snappy block", CodecSnappy, rawSnappy},
		{"xerial snappy", CodecSnappy, xerial},
	}
	for _, tc := range cases {
		b := withPayload(tc.codec, 1, tc.payload)
		var err error
		alloc := allocatedBy(func() { _, _, err = Records(b) })
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s bomb of %d bytes: %v, want ErrTooLarge", tc.name, len(tc.payload), err)
		}
		// The output buffer doubles up to the limit; zstd also allocates
		// the frame's window.
		if limit := uint64(DecompressLimit(len(tc.payload))); alloc > 2*limit+zstdMinWindow+2<<20 {
			t.Errorf("%s bomb: allocated %d bytes for a limit of %d", tc.name, alloc, limit)
		}
	}
}

// Garbage in place of compressed data is ErrCorrupt for every codec.
func TestGarbageCompressed(t *testing.T) {
	for _, c := range allCodecs[1:] {
		for _, payload := range [][]byte{{1}, bytes.Repeat([]byte{0xA5}, 100)} {
			_, _, err := Records(withPayload(c, 1, payload))
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v garbage of %d bytes: %v, want ErrCorrupt", c, len(payload), err)
			}
		}
	}
}

func TestDecompressLimit(t *testing.T) {
	for n, want := range map[int]int{
		0:                                        MinDecompressLimit,
		MinDecompressLimit / MaxCompressionRatio: MinDecompressLimit,
		1 << 20:                                  MaxCompressionRatio << 20,
		2 << 20:                                  MaxDecompressedSize,
		1 << 40:                                  MaxDecompressedSize,
	} {
		if got := DecompressLimit(n); got != want {
			t.Errorf("DecompressLimit(%d) = %d, want %d", n, got, want)
		}
	}
}
