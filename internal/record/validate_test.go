package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestCodecString(t *testing.T) {
	for c, want := range map[Codec]string{CodecNone: "none", CodecGzip: "gzip", CodecSnappy: "snappy", CodecLZ4: "lz4", CodecZstd: "zstd", 5: "codec(5)"} {
		if c.String() != want {
			t.Errorf("Codec(%d).String() = %q, want %q", c, c.String(), want)
		}
	}
}

func TestParseHeader(t *testing.T) {
	h := Header{BaseOffset: 42, PartitionLeaderEpoch: 3, Attributes: int16(CodecZstd) | attrTransactional | attrLogAppendTime,
		FirstTimestamp: 10, ProducerID: 9, ProducerEpoch: 2, BaseSequence: 77}
	b := mustBuild(t, h, testRecords(2))
	got, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.BaseOffset != 42 || got.PartitionLeaderEpoch != 3 || got.Codec() != CodecZstd || !got.Transactional() ||
		got.Control() || !got.LogAppendTime() || got.ProducerID != 9 || got.ProducerEpoch != 2 || got.BaseSequence != 77 ||
		got.LastOffset() != 43 || got.Size() != len(b) || got.CRC != checksum(b) {
		t.Fatalf("ParseHeader = %+v", got)
	}
	if _, err := ParseHeader(b[:HeaderSize-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("60 bytes: %v, want ErrTruncated", err)
	}
	v1 := bytes.Clone(b)
	v1[offMagic] = 1
	if _, err := ParseHeader(v1); !errors.Is(err, ErrUnsupportedMagic) {
		t.Errorf("magic 1: %v, want ErrUnsupportedMagic", err)
	}
	short := bytes.Clone(b)
	binary.BigEndian.PutUint32(short[offLength:], minLength-1)
	if _, err := ParseHeader(short); !errors.Is(err, ErrCorrupt) {
		t.Errorf("length 48: %v, want ErrCorrupt", err)
	}
}

// Any change to the CRC-covered bytes is detected; the base offset and
// the leader epoch are outside the CRC.
func TestCRCCorruption(t *testing.T) {
	for _, c := range allCodecs {
		b := mustBuild(t, Header{Attributes: int16(c)}, testRecords(5))
		for i := offCRC; i < len(b); i++ {
			bad := bytes.Clone(b)
			bad[i] ^= 0x10
			_, err := CheckCRC(bad)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%v: byte %d flipped: %v, want ErrCorrupt", c, i, err)
			}
			if _, err := Validate(bad); ErrorCode(err) != kerr.CorruptMessage.Code {
				t.Fatalf("%v: byte %d flipped: Validate error code %d (%v), want CORRUPT_MESSAGE", c, i, ErrorCode(err), err)
			}
		}
		SetBaseOffset(b, 1<<40)
		SetPartitionLeaderEpoch(b, 17)
		h, err := ValidateStored(b)
		if err != nil || h.BaseOffset != 1<<40 || h.PartitionLeaderEpoch != 17 {
			t.Fatalf("%v: after the setters: %+v, %v", c, h, err)
		}
	}
}

// Every proper prefix of a batch is refused as truncated.
func TestTruncated(t *testing.T) {
	b := mustBuild(t, Header{Attributes: int16(CodecGzip)}, testRecords(4))
	for n := range len(b) {
		_, err := Validate(b[:n])
		if n < offMagic+1 || n >= HeaderSize {
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("%d of %d bytes: %v, want ErrTruncated", n, len(b), err)
			}
		} else if err == nil {
			t.Fatalf("%d of %d bytes accepted", n, len(b))
		}
		if _, _, err := Records(b[:n]); err == nil {
			t.Fatalf("Records accepted %d of %d bytes", n, len(b))
		}
	}
}

// Validate refuses what Kafka's broker refuses on produce, with the same
// error code (LogValidator.validateBatch, DefaultRecord.readFrom,
// DefaultRecordBatch's iterators).
func TestValidateKafkaRules(t *testing.T) {
	good := func() []byte { return mustBuild(t, Header{ProducerID: -1, BaseSequence: -1}, testRecords(3)) }
	if _, err := Validate(good()); err != nil {
		t.Fatal(err)
	}
	put32 := func(off int, v int32) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint32(b[off:], uint32(v)); return fixCRC(b) }
	}
	cases := []struct {
		name string
		edit func([]byte) []byte
		code int16
	}{
		{"base offset not 0", func(b []byte) []byte { SetBaseOffset(b, 5); return b }, kerr.InvalidRecord.Code},
		{"count 0", put32(offNumRecords, 0), kerr.InvalidRecord.Code},
		{"count -1", put32(offNumRecords, -1), kerr.InvalidRecord.Code},
		{"more records than offsets", put32(offNumRecords, 4), kerr.InvalidRecord.Code},
		{"fewer records than offsets", put32(offLastOffsetDelta, 3), kerr.InvalidRecord.Code},
		{"negative last offset delta", put32(offLastOffsetDelta, -1), kerr.InvalidRecord.Code},
		{"fewer records than the count says", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offNumRecords:], 2)
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 1)
			return fixCRC(b)
		}, kerr.InvalidRecord.Code},
		{"control batch", func(b []byte) []byte { b[offAttributes+1] |= attrControl; return fixCRC(b) }, kerr.InvalidRecord.Code},
		{"producer ID without sequence", func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[offProducerID:], 12)
			return fixCRC(b)
		}, kerr.InvalidRecord.Code},
		{"codec 7", func(b []byte) []byte { b[offAttributes+1] |= 7; return fixCRC(b) }, kerr.UnsupportedCompressionType.Code},
		{"magic 1", func(b []byte) []byte { b[offMagic] = 1; return b }, kerr.InvalidRecord.Code},
		{"two batches", func(b []byte) []byte { return append(b, b...) }, kerr.InvalidRecord.Code},
		{"trailing byte after the records", func(b []byte) []byte {
			b = append(b, 0)
			setLength(b)
			return fixCRC(b)
		}, kerr.InvalidRecord.Code},
		{"record length past the batch", func(b []byte) []byte { b[HeaderSize] = 0x7e; return fixCRC(b) }, kerr.InvalidRecord.Code},
		{"length below the minimum", put32(offLength, 20), kerr.CorruptMessage.Code},
		{"bad CRC", func(b []byte) []byte { b[offCRC] ^= 1; return b }, kerr.CorruptMessage.Code},
	}
	for _, tc := range cases {
		_, err := Validate(tc.edit(good()))
		if got := ErrorCode(err); got != tc.code {
			t.Errorf("%s: error %v (code %d), want code %d", tc.name, err, got, tc.code)
		}
	}
}

// Record offset deltas must number a produced batch's records from 0.
func TestValidateOffsetDeltas(t *testing.T) {
	recs := testRecords(3)
	recs[1].OffsetDelta, recs[2].OffsetDelta = 2, 1
	b := mustBuild(t, Header{}, recs)
	if _, err := Validate(b); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("shuffled deltas: %v, want ErrInvalidRecord", err)
	}
	if _, err := ValidateStored(b); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("ValidateStored, decreasing deltas: %v, want ErrInvalidRecord", err)
	}
	// What compaction leaves: records 0 and 2 of offsets 0..3.
	recs = testRecords(3)[:2]
	recs[1].OffsetDelta = 2
	b = mustBuild(t, Header{BaseOffset: 100, LastOffsetDelta: 3}, recs)
	if _, err := ValidateStored(b); err != nil {
		t.Fatalf("compacted batch: %v", err)
	}
	if _, err := Validate(b); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("compacted batch as a produce: %v, want ErrInvalidRecord", err)
	}
	control := mustBuild(t, Header{BaseOffset: 7, Attributes: attrControl | attrTransactional, ProducerID: 1}, []Record{{Key: []byte{0, 0, 0, 1}, Value: []byte{0, 0, 0, 0, 0, 0}}})
	if _, err := ValidateStored(control); err != nil {
		t.Fatalf("control batch: %v", err)
	}
}

func TestSplitAndValidPrefix(t *testing.T) {
	var batches [][]byte
	var all []byte
	for i, c := range allCodecs {
		b := mustBuild(t, Header{BaseOffset: int64(10 * i), Attributes: int16(c)}, testRecords(i+1))
		batches = append(batches, b)
		all = append(all, b...)
	}
	got, err := Split(all)
	if err != nil || len(got) != len(batches) {
		t.Fatalf("Split: %d batches, %v", len(got), err)
	}
	for i := range got {
		if !bytes.Equal(got[i], batches[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if got, err := Split(nil); got != nil || err != nil {
		t.Fatalf("Split(nil) = %v, %v", got, err)
	}

	n, hs := ValidPrefix(all)
	if n != len(all) || len(hs) != len(batches) || hs[4].BaseOffset != 40 {
		t.Fatalf("ValidPrefix of whole batches: %d of %d, %d headers", n, len(all), len(hs))
	}
	// A torn last batch: Split refuses, ValidPrefix cuts it.
	lastStart := len(all) - len(batches[4])
	for _, cut := range []int{1, 12, 17, HeaderSize, len(batches[4]) - 1} {
		torn := all[:lastStart+cut]
		if got, err := Split(torn); !errors.Is(err, ErrTruncated) || len(got) != 4 {
			t.Fatalf("Split with %d bytes of the last batch: %d batches, %v", cut, len(got), err)
		}
		if n, hs := ValidPrefix(torn); n != lastStart || len(hs) != 4 {
			t.Fatalf("ValidPrefix with %d bytes of the last batch: %d, want %d", cut, n, lastStart)
		}
	}
	// A corrupt middle batch ends the prefix; so do zeroes (a preallocated
	// file).
	bad := bytes.Clone(all)
	bad[len(batches[0])+len(batches[1])-1] ^= 0xff
	if n, hs := ValidPrefix(bad); n != len(batches[0]) || len(hs) != 1 {
		t.Fatalf("ValidPrefix with batch 1 corrupt: %d", n)
	}
	zeroed := append(bytes.Clone(all), make([]byte, 4096)...)
	if n, _ := ValidPrefix(zeroed); n != len(all) {
		t.Fatalf("ValidPrefix with a zeroed tail: %d, want %d", n, len(all))
	}
	if _, err := Split(zeroed); !errors.Is(err, ErrUnsupportedMagic) {
		t.Fatalf("Split with a zeroed tail: %v", err)
	}
}

func TestSetters(t *testing.T) {
	b := mustBuild(t, Header{FirstTimestamp: 100}, testRecords(3))
	SetLogAppendTime(b, 999)
	h, err := ValidateStored(b)
	if err != nil || !h.LogAppendTime() || h.MaxTimestamp != 999 {
		t.Fatalf("SetLogAppendTime: %+v, %v", h, err)
	}
	lat := h
	SetMaxTimestamp(b, 555)
	h, err = ValidateStored(b)
	if err != nil || h.LogAppendTime() || h.MaxTimestamp != 555 {
		t.Fatalf("SetMaxTimestamp: %+v, %v", h, err)
	}
	if w := lat.WithMaxTimestamp(555); w.CRC != lat.CRC || func() bool { w.CRC = h.CRC; return w != h }() {
		t.Fatalf("WithMaxTimestamp: %+v; SetMaxTimestamp left the header %+v", lat.WithMaxTimestamp(555), h)
	}
	// Short or torn input is left alone, not panicked on.
	for _, short := range [][]byte{nil, b[:5], b[:20], b[:len(b)-1]} {
		before := bytes.Clone(short)
		SetLogAppendTime(short, 1)
		SetMaxTimestamp(short, 1)
		if len(short) < 12 {
			SetBaseOffset(short, 1)
			SetPartitionLeaderEpoch(short, 1)
		}
		if !bytes.Equal(before, short) {
			t.Fatalf("a setter changed %d bytes of input too short for it", len(short))
		}
	}
}

func TestErrorCode(t *testing.T) {
	for err, want := range map[error]int16{
		nil:                 0,
		ErrCorrupt:          kerr.CorruptMessage.Code,
		invalidf("x"):       kerr.InvalidRecord.Code,
		ErrTruncated:        kerr.InvalidRecord.Code,
		ErrUnsupportedMagic: kerr.InvalidRecord.Code,
		ErrUnsupportedCodec: kerr.UnsupportedCompressionType.Code,
		ErrTooLarge:         kerr.MessageTooLarge.Code,
		errors.New("other"): kerr.UnknownServerError.Code,
	} {
		if got := ErrorCode(err); got != want {
			t.Errorf("ErrorCode(%v) = %d, want %d", err, got, want)
		}
	}
	if !errors.Is(invalidf("x"), ErrCorrupt) {
		t.Error("an ErrInvalidRecord is not an ErrCorrupt")
	}
}
