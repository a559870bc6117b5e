package record

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Build encodes one v2 batch holding records, compressed with h.Codec().
// It takes from h the base offset, partition leader epoch, attributes,
// FirstTimestamp, producer ID and epoch and base sequence, and computes the
// rest:
//
//   - Magic is 2, NumRecords is len(records), Length and CRC are computed;
//   - LastOffsetDelta is the larger of h.LastOffsetDelta and the largest
//     record OffsetDelta, so that log compaction can keep the offsets of a
//     batch it removed records from (pass 0 to have it computed);
//   - MaxTimestamp is FirstTimestamp plus the largest record TimestampDelta
//     for a CreateTime batch with records, and h.MaxTimestamp otherwise
//     (the append time of a LogAppendTime batch, or what an emptied batch
//     had).
//
// Records are encoded from their OffsetDelta and TimestampDelta; their
// Offset and Timestamp fields are ignored. Build fails with
// ErrUnsupportedCodec for an unknown codec, ErrInvalidRecord for a negative
// OffsetDelta, and ErrTooLarge for fields or a batch too long for Kafka's
// 32-bit lengths. An empty batch has no records section whatever its codec,
// as Kafka writes one.
func Build(h Header, records []Record) ([]byte, error) {
	c := h.Codec()
	if !c.valid() {
		return nil, errUnsupportedCodec(c)
	}
	if len(records) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d records", ErrTooLarge, len(records))
	}
	h.Magic = Magic
	h.NumRecords = int32(len(records))
	maxDelta := int64(math.MinInt64)
	size := 0
	for i := range records {
		r := &records[i]
		if r.OffsetDelta < 0 {
			return nil, invalidf("record %d: offset delta %d is negative", i, r.OffsetDelta)
		}
		n, err := bodySize(r)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		size += varintSize(int64(n)) + n
		if size > math.MaxInt32 {
			return nil, fmt.Errorf("%w: records exceed %d bytes", ErrTooLarge, math.MaxInt32)
		}
		h.LastOffsetDelta = max(h.LastOffsetDelta, r.OffsetDelta)
		maxDelta = max(maxDelta, r.TimestampDelta)
	}
	if len(records) > 0 && !h.LogAppendTime() {
		h.MaxTimestamp = h.FirstTimestamp + maxDelta
	}

	var b []byte
	if c == CodecNone || len(records) == 0 {
		b = appendRecords(make([]byte, HeaderSize, HeaderSize+size), records)
	} else {
		raw := appendRecords(make([]byte, 0, size), records)
		var err error
		if b, err = compress(make([]byte, HeaderSize, HeaderSize+size/2+64), c, raw); err != nil {
			return nil, err
		}
	}
	if len(b)-lengthOverhead > math.MaxInt32 {
		return nil, fmt.Errorf("%w: batch exceeds %d bytes", ErrTooLarge, math.MaxInt32)
	}
	h.Length = int32(len(b) - lengthOverhead)
	appendHeader(b[:0], h) // overwrites the 61 bytes reserved at the front
	binary.BigEndian.PutUint32(b[offCRC:], checksum(b))
	return b, nil
}

func appendRecords(dst []byte, records []Record) []byte {
	for i := range records {
		dst = appendRecord(dst, &records[i])
	}
	return dst
}

// bodySize is the encoded size of r after its length varint.
func bodySize(r *Record) (int, error) {
	n := 1 + varintSize(r.TimestampDelta) + varintSize(int64(r.OffsetDelta))
	for _, f := range [][]byte{r.Key, r.Value} {
		if len(f) > math.MaxInt32 {
			return 0, fmt.Errorf("%w: a key or value of %d bytes", ErrTooLarge, len(f))
		}
		n += nullableSize(f)
	}
	if len(r.Headers) > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %d headers", ErrTooLarge, len(r.Headers))
	}
	n += varintSize(int64(len(r.Headers)))
	for _, hd := range r.Headers {
		if len(hd.Key) > math.MaxInt32 || len(hd.Value) > math.MaxInt32 {
			return 0, fmt.Errorf("%w: a header of %d+%d bytes", ErrTooLarge, len(hd.Key), len(hd.Value))
		}
		n += varintSize(int64(len(hd.Key))) + len(hd.Key) + nullableSize(hd.Value)
		if n > math.MaxInt32 {
			break // the caller rejects the size
		}
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%w: a record of more than %d bytes", ErrTooLarge, math.MaxInt32)
	}
	return n, nil
}

// appendRecord appends r, length first. bodySize has accepted it.
func appendRecord(dst []byte, r *Record) []byte {
	n, _ := bodySize(r)
	dst = binary.AppendVarint(dst, int64(n))
	dst = append(dst, byte(r.Attributes))
	dst = binary.AppendVarint(dst, r.TimestampDelta)
	dst = binary.AppendVarint(dst, int64(r.OffsetDelta))
	dst = appendNullable(dst, r.Key)
	dst = appendNullable(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, hd := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(hd.Key)))
		dst = append(dst, hd.Key...)
		dst = appendNullable(dst, hd.Value)
	}
	return dst
}

// appendNullable appends a varint length (-1 for nil) and b.
func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

func nullableSize(b []byte) int {
	if b == nil {
		return 1
	}
	return varintSize(int64(len(b))) + len(b)
}

// varintSize is the size of v as a zigzag varint.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
