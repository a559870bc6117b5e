package record

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy/xerial"
)

// Batches franz-go encodes and compresses decode to the records put in,
// for every codec, and Build's re-encoding decodes the same.
func TestRecordsFranzGoBatches(t *testing.T) {
	want := testRecords(40)
	const first = 1_700_000_000_000
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			b := franzBatch(t, c, first, want)
			h, err := Validate(b)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if h.Codec() != c || h.NumRecords != 40 || h.LastOffsetDelta != 39 || h.Size() != len(b) {
				t.Fatalf("header %+v", h)
			}
			h2, got, err := Records(b)
			if err != nil {
				t.Fatalf("Records: %v", err)
			}
			if h2 != h {
				t.Fatalf("Records header %+v, Validate header %+v", h2, h)
			}
			if err := sameRecords(got, want); err != nil {
				t.Fatal(err)
			}
			for i, r := range got {
				if r.Offset != int64(i) || r.Timestamp != first+int64(3*i) {
					t.Fatalf("record %d: offset %d timestamp %d", i, r.Offset, r.Timestamp)
				}
			}

			rebuilt := mustBuild(t, h, got)
			if _, err := Validate(rebuilt); err != nil {
				t.Fatalf("Validate(Build): %v", err)
			}
			_, again, err := Records(rebuilt)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRecords(again, want); err != nil {
				t.Fatal(err)
			}
			if c == CodecNone && !bytes.Equal(rebuilt, b) {
				t.Fatal("Build's uncompressed encoding differs from franz-go's")
			}
		})
	}
}

// Each visits the same records as Records, reusing its Record.
func TestEach(t *testing.T) {
	want := testRecords(9)
	b := mustBuild(t, Header{Attributes: int16(CodecLZ4), FirstTimestamp: 5}, want)
	var got []Record
	h, err := Each(b, func(r *Record) error {
		c := *r
		c.Headers = append([]RecordHeader(nil), r.Headers...)
		got = append(got, c)
		return nil
	})
	if err != nil || h.NumRecords != 9 {
		t.Fatalf("Each: %+v, %v", h, err)
	}
	if err := sameRecords(got, want); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	n := 0
	if _, err := Each(b, func(*Record) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("Each returned %v after %d calls; want the callback's error after 1", err, n)
	}
}

// LogAppendTime batches give every record the batch's MaxTimestamp.
func TestRecordsLogAppendTime(t *testing.T) {
	b := mustBuild(t, Header{FirstTimestamp: 100}, testRecords(3))
	SetLogAppendTime(b, 12345)
	h, recs, err := Records(b)
	if err != nil {
		t.Fatal(err)
	}
	if !h.LogAppendTime() || h.FirstTimestamp != 12345 || h.MaxTimestamp != 12345 {
		t.Fatalf("header %+v", h)
	}
	for _, r := range recs {
		if r.Timestamp != 12345 {
			t.Fatalf("record timestamp %d, want the append time", r.Timestamp)
		}
	}
}

// Snappy comes either xerial-framed (Java, franz-go) or as one raw block
// (librdkafka); both decode. S2's extensions to Snappy, which no Snappy
// consumer reads, are refused.
func TestSnappyFramings(t *testing.T) {
	want := testRecords(20)
	b := mustBuild(t, Header{}, want)
	raw := b[HeaderSize:]

	rawBlock := s2.EncodeSnappy(nil, raw)
	nb := append(bytes.Clone(b[:HeaderSize]), rawBlock...)
	nb[offAttributes+1] = byte(CodecSnappy)
	setLength(nb)
	if _, got, err := Records(fixCRC(nb)); err != nil {
		t.Fatalf("raw snappy block: %v", err)
	} else if err := sameRecords(got, want); err != nil {
		t.Fatal(err)
	}

	// xerial framing from an independent encoder, several 32 KiB blocks.
	big := testRecords(300)
	bb := mustBuild(t, Header{}, big)
	if len(bb) < 3*xerialBlockSize {
		t.Fatalf("test batch of %d bytes is too small", len(bb))
	}
	nb = append(bytes.Clone(bb[:HeaderSize]), xerial.Encode(nil, bb[HeaderSize:])...)
	nb[offAttributes+1] = byte(CodecSnappy)
	setLength(nb)
	if _, got, err := Records(fixCRC(nb)); err != nil {
		t.Fatalf("xerial framing: %v", err)
	} else if err := sameRecords(got, big); err != nil {
		t.Fatal(err)
	}
	// And Build's framing decodes with that package's decoder.
	built := mustBuild(t, Header{Attributes: int16(CodecSnappy)}, big)
	if dec, err := xerial.Decode(built[HeaderSize:]); err != nil || !bytes.Equal(dec, bb[HeaderSize:]) {
		t.Fatalf("Build's xerial framing: %v", err)
	}

	// Repetitive input makes S2 use its repeat-offset extension.
	s2Block := s2.Encode(nil, raw)
	if _, err := s2.Decode(nil, s2Block); err != nil {
		t.Fatal(err)
	}
	nb = append(bytes.Clone(b[:HeaderSize]), s2Block...)
	nb[offAttributes+1] = byte(CodecSnappy)
	setLength(nb)
	if _, _, err := Records(fixCRC(nb)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("S2 block passed off as snappy: err = %v, want ErrCorrupt", err)
	}
}

// setLength sets the length field from len(b).
func setLength(b []byte) {
	b[offLength] = byte((len(b) - 12) >> 24)
	b[offLength+1] = byte((len(b) - 12) >> 16)
	b[offLength+2] = byte((len(b) - 12) >> 8)
	b[offLength+3] = byte(len(b) - 12)
}

// Compaction keeps an emptied batch as a header alone, whatever its codec.
func TestEmptyBatch(t *testing.T) {
	for _, c := range allCodecs {
		b := mustBuild(t, Header{BaseOffset: 10, Attributes: int16(c), LastOffsetDelta: 4, MaxTimestamp: 7}, nil)
		if len(b) != HeaderSize {
			t.Fatalf("%v: empty batch of %d bytes", c, len(b))
		}
		h, recs, err := Records(b)
		if err != nil || len(recs) != 0 || h.LastOffset() != 14 || h.MaxTimestamp != 7 {
			t.Fatalf("%v: %+v %v %v", c, h, recs, err)
		}
		if _, err := ValidateStored(b); err != nil {
			t.Fatalf("%v: ValidateStored: %v", c, err)
		}
		if _, err := Validate(b); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("%v: Validate of an empty batch: %v, want ErrInvalidRecord", c, err)
		}
	}
}

// Build keeps a larger LastOffsetDelta and computes MaxTimestamp.
func TestBuildHeaderFields(t *testing.T) {
	recs := []Record{{OffsetDelta: 0, TimestampDelta: 4}, {OffsetDelta: 2, TimestampDelta: -1}}
	h, _, err := Records(mustBuild(t, Header{FirstTimestamp: 1000, LastOffsetDelta: 5, ProducerID: 7, BaseSequence: 3}, recs))
	if err != nil {
		t.Fatal(err)
	}
	if h.LastOffsetDelta != 5 || h.MaxTimestamp != 1004 || h.NumRecords != 2 || h.ProducerID != 7 || h.BaseSequence != 3 || h.Magic != 2 {
		t.Fatalf("header %+v", h)
	}
	h, _, _ = Records(mustBuild(t, Header{}, []Record{{OffsetDelta: 3}}))
	if h.LastOffsetDelta != 3 {
		t.Fatalf("LastOffsetDelta %d, want the record's 3", h.LastOffsetDelta)
	}
	if _, err := Build(Header{}, []Record{{OffsetDelta: -1}}); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("negative offset delta: %v", err)
	}
	if _, err := Build(Header{Attributes: 6}, nil); !errors.Is(err, ErrUnsupportedCodec) {
		t.Fatalf("codec 6: %v", err)
	}
}
