package record

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
)

// addSeeds adds batches of every codec, franz-go's and Build's, whole,
// torn and concatenated, and a few hostile ones.
func addSeeds(f *testing.F) {
	var all []byte
	for i, c := range allCodecs {
		fb := franzBatch(f, c, 1_700_000_000_000, testRecords(6))
		b := mustBuild(f, Header{BaseOffset: int64(i), Attributes: int16(c), FirstTimestamp: 5}, testRecords(3))
		f.Add(fb)
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(b[:HeaderSize])
		all = append(all, b...)
	}
	f.Add(all)
	f.Add(all[:len(all)-7])
	f.Add(append(bytes.Clone(all), make([]byte, 64)...))
	f.Add(mustBuild(f, Header{Attributes: int16(CodecGzip), LastOffsetDelta: 3}, nil))
	f.Add(withPayload(CodecNone, 1, []byte{12, 0, 0, 0, 1, 1, 0}))
	f.Add(withPayload(CodecNone, 1<<31-1, []byte{12, 0, 0, 0, 1, 1, 0}))
	f.Add(withPayload(CodecSnappy, 1, append(append([]byte{}, xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3, 1, 0, 'x')))
	f.Add([]byte{})
}

// FuzzRecords decodes arbitrary bytes, and the same bytes with their
// framing and CRC made right so that the decoders see them. Whatever
// decodes must re-encode with Build to the same records, Each must agree
// with Records, and what Records refuses no validator accepts.
func FuzzRecords(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRecords(t, b)
		if len(b) >= HeaderSize {
			fixed := bytes.Clone(b)
			fixed[offMagic] = Magic
			setLength(fixed)
			checkRecords(t, fixCRC(fixed))
		}
	})
}

func checkRecords(t *testing.T, b []byte) {
	checkMaxTimestamp(t, b)
	h, recs, err := Records(b)
	if err != nil {
		if _, verr := Validate(b); verr == nil {
			t.Fatalf("Validate accepts a batch Records refuses: %v", err)
		}
		if _, verr := ValidateStored(b); verr == nil {
			t.Fatalf("ValidateStored accepts a batch Records refuses: %v", err)
		}
		return
	}
	n := 0
	if _, err := Each(b, func(*Record) error { n++; return nil }); err != nil || n != len(recs) {
		t.Fatalf("Each saw %d records (%v), Records %d", n, err, len(recs))
	}
	for _, r := range recs {
		if r.OffsetDelta < 0 {
			return // Build refuses these, rightly
		}
	}
	rebuilt, err := Build(h, recs)
	if err != nil {
		t.Fatalf("Build of decoded records: %v", err)
	}
	h2, again, err := Records(rebuilt)
	if err != nil {
		t.Fatalf("Records of rebuilt batch: %v", err)
	}
	if err := sameRecords(again, recs); err != nil {
		t.Fatal(err)
	}
	last := h.LastOffsetDelta
	for _, r := range recs {
		last = max(last, r.OffsetDelta)
	}
	if h2.NumRecords != h.NumRecords || h2.Codec() != h.Codec() || h2.LastOffsetDelta != last {
		t.Fatalf("rebuilt header %+v from %+v", h2, h)
	}
}

// FuzzSplit checks that Split cuts b into contiguous whole batches and
// fails only when something is left it cannot frame.
// checkMaxTimestamp: ValidateMaxTimestamp accepts what Validate accepts,
// with the same header, and its max timestamp is the largest record
// timestamp, -1 at least, whatever the batch's MaxTimestamp field claims.
func checkMaxTimestamp(t *testing.T, b []byte) {
	vh, verr := Validate(b)
	h, maxTs, err := ValidateMaxTimestamp(b)
	if (err == nil) != (verr == nil) || h != vh {
		t.Fatalf("ValidateMaxTimestamp: %+v, %v; Validate: %+v, %v", h, err, vh, verr)
	}
	if err != nil {
		return
	}
	_, recs, err := Records(b)
	if err != nil {
		t.Fatalf("Validate accepts a batch Records refuses: %v", err)
	}
	want := int64(-1)
	for _, r := range recs {
		want = max(want, r.Timestamp)
	}
	if maxTs != want {
		t.Fatalf("ValidateMaxTimestamp says %d, the records' largest timestamp is %d (the header claims %d)", maxTs, want, h.MaxTimestamp)
	}
}

func FuzzSplit(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		batches, err := Split(b)
		off := 0
		for _, p := range batches {
			if len(p) < HeaderSize || !bytes.Equal(p, b[off:off+len(p)]) {
				t.Fatalf("piece of %d bytes at %d is not the input's", len(p), off)
			}
			if h, err := ParseHeader(p); err != nil || h.Size() != len(p) {
				t.Fatalf("piece at %d: %+v, %v", off, h, err)
			}
			off += len(p)
		}
		if (err == nil) != (off == len(b)) {
			t.Fatalf("Split consumed %d of %d bytes, err %v", off, len(b), err)
		}
	})
}

// FuzzValidPrefix checks that the prefix is whole, CRC-valid batches and
// that what follows does not start with one.
func FuzzValidPrefix(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		n, headers := ValidPrefix(b)
		if n < 0 || n > len(b) {
			t.Fatalf("prefix %d of %d bytes", n, len(b))
		}
		batches, err := Split(b[:n])
		if err != nil || len(batches) != len(headers) {
			t.Fatalf("prefix splits into %d batches (%v), %d headers", len(batches), err, len(headers))
		}
		for i, p := range batches {
			if h, err := CheckCRC(p); err != nil || h != headers[i] {
				t.Fatalf("batch %d: %+v, %v; ValidPrefix said %+v", i, h, err, headers[i])
			}
		}
		if n < len(b) {
			if next, err := Split(b[n:]); len(next) > 0 {
				if _, err := CheckCRC(next[0]); err == nil {
					t.Fatal("ValidPrefix stopped before a valid batch")
				}
			} else if err == nil {
				t.Fatal("Split frames the rest without error but returns nothing")
			}
		}
	})
}

// FuzzSnappyBlock checks decodeSnappy's two framings against the strict
// Snappy decoder: a raw block, and the same block as the one block of a
// xerial frame, decode exactly as snappy.DecodeStrict decodes the block
// (S2's extensions refused), and nothing panics.
func FuzzSnappyBlock(f *testing.F) {
	raw := mustBuild(f, Header{}, testRecords(20))
	f.Add(s2.EncodeSnappy(nil, raw))
	f.Add(s2.Encode(nil, raw)) // uses S2's repeat extension
	f.Add(s2.EncodeSnappy(nil, bytes.Repeat([]byte("abcabcabd"), 100)))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, src []byte) {
		n, err := s2.DecodedLen(src)
		if err != nil || n > 1<<20 {
			return
		}
		want, werr := snappy.DecodeStrict(nil, src)
		framed := binary.BigEndian.AppendUint32(append(append([]byte(nil), xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1), uint32(len(src)))
		framed = append(framed, src...)
		for name, in := range map[string][]byte{"raw": src, "xerial": framed} {
			if name == "raw" && bytes.HasPrefix(src, xerialMagic) {
				continue // read as a xerial frame, not a raw block
			}
			got, gerr := decodeSnappy(in, 1<<20)
			if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("%s: strict: %v (%d bytes); ours: %v (%d bytes)", name, werr, len(want), gerr, len(got))
			}
		}
	})
}
