package record

import (
	"encoding/binary"
	"fmt"
)

// CheckCRC checks that b is exactly one whole v2 batch (its length field
// matches len(b)) whose CRC-32C matches, and returns its header. It does
// not decode records; see Validate and ValidateStored for that.
func CheckCRC(b []byte) (Header, error) {
	size, err := frameSize(b)
	if err != nil {
		return Header{}, err
	}
	if size != len(b) {
		return Header{}, invalidf("%d bytes follow a batch of %d bytes; expected exactly one batch", len(b)-size, size)
	}
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, err
	}
	if sum := checksum(b); sum != h.CRC {
		return Header{}, corruptf("CRC-32C of the batch is %08x, its CRC field says %08x", sum, h.CRC)
	}
	return h, nil
}

// Validate checks a batch a client produced as strictly as Apache Kafka's
// broker does on produce (ProduceRequest.validateRecords,
// UnifiedLog.analyzeAndValidateRecords and LogValidator, Kafka 3.x/4.x), for
// the checks that do not depend on topic configuration (internal/fsm's
// produce adds those). b must be:
//
//   - exactly one whole batch (CheckCRC): ErrTruncated, ErrUnsupportedMagic,
//     ErrCorrupt (length below 49, CRC mismatch), ErrInvalidRecord (bytes
//     after the batch: a produce carries one batch per partition);
//   - of a known codec: ErrUnsupportedCodec;
//   - numbered from zero: BaseOffset 0, NumRecords > 0 and LastOffsetDelta ==
//     NumRecords-1: ErrInvalidRecord;
//   - a data batch, not a control batch: ErrInvalidRecord;
//   - with BaseSequence >= 0 when it has a producer ID: ErrInvalidRecord;
//   - made of NumRecords well-formed records and nothing more, after
//     decompression (see Records): ErrInvalidRecord, ErrCorrupt or
//     ErrTooLarge;
//   - with record i at OffsetDelta i: ErrInvalidRecord. Kafka instead
//     rewrites a compressed batch with other offset deltas (and leaves an
//     uncompressed one as it is); Stele stores batches as they come, and no
//     current client writes other deltas.
//
// Validate is stricter than Kafka in one more way: a varint that does not
// fit its 32 or 64 bits is malformed here, where Java drops the high bits.
func Validate(b []byte) (Header, error) {
	return check(b, true, headersSkip, nil)
}

// ValidateKeys is Validate that also calls fn with the offset delta,
// timestamp (as Record.Timestamp reads it), key and value (nil when null) and headers
// of every record, in order. key, value and headers alias b (or, for a compressed
// batch, a buffer private to this call) and the headers slice is reused
// from one call to the next: copy what you keep.
func ValidateKeys(b []byte, fn func(offsetDelta int32, timestamp int64, key, value []byte, headers []RecordHeader)) (Header, error) {
	return check(b, true, headersReuse, func(_ Header, _ int, r Record) error {
		fn(r.OffsetDelta, r.Timestamp, r.Key, r.Value, r.Headers)
		return nil
	})
}

// ValidateKeysRewritten is ValidateKeys for a produced batch the broker
// rewrote before storing it (a produce plugin's output): the checks of
// ValidateStored, so that it may have fewer records than offsets, or
// none, and offset deltas that only increase.
func ValidateKeysRewritten(b []byte, fn func(offsetDelta int32, timestamp int64, key, value []byte, headers []RecordHeader)) (Header, error) {
	return check(b, false, headersReuse, func(_ Header, _ int, r Record) error {
		fn(r.OffsetDelta, r.Timestamp, r.Key, r.Value, r.Headers)
		return nil
	})
}

// ValidateMaxTimestamp is Validate that also returns the largest record
// timestamp, as Kafka's LogValidator computes a batch's max timestamp: -1
// (no timestamp) when no record has a larger one. A batch's MaxTimestamp
// field is only the producer's claim; this is what its records hold.
func ValidateMaxTimestamp(b []byte) (Header, int64, error) {
	maxTs := int64(-1)
	h, err := check(b, true, headersSkip, func(_ Header, _ int, r Record) error {
		maxTs = max(maxTs, r.Timestamp)
		return nil
	})
	return h, maxTs, err
}

// ValidateStored checks a batch the log itself holds or writes (fetched,
// replicated, recovered, rewritten by compaction) rather than one a client
// produced: as Validate, except that any base offset >= 0 is allowed, a
// batch may be a control batch, may be empty, and may have fewer records
// than offsets (compaction removes records but keeps a batch's offsets), so
// the record offset deltas need only increase and stay within
// [0, LastOffsetDelta].
func ValidateStored(b []byte) (Header, error) {
	return check(b, false, headersSkip, nil)
}

// check is the body of Validate and ValidateStored. It calls
// fn, if not nil, with every record and its index.
func check(b []byte, produced bool, headers headerMode, fn func(h Header, i int, r Record) error) (Header, error) {
	h, err := CheckCRC(b)
	if err != nil {
		return Header{}, err
	}
	if !h.Codec().valid() {
		return Header{}, errUnsupportedCodec(h.Codec())
	}
	if produced {
		err = checkProduced(h)
	} else {
		err = checkStored(h)
	}
	if err != nil {
		return Header{}, err
	}
	w, err := openChecked(b, h)
	if err != nil {
		return Header{}, err
	}
	var r Record
	prev := int32(-1)
	for w.left > 0 {
		i := w.index
		if err := w.next(&r, headers); err != nil {
			return Header{}, err
		}
		switch {
		case produced && r.OffsetDelta != int32(i):
			return Header{}, invalidf("record %d has offset delta %d; a produced batch numbers its records 0, 1, 2, ...", i, r.OffsetDelta)
		case !produced && (r.OffsetDelta <= prev || r.OffsetDelta > h.LastOffsetDelta):
			return Header{}, invalidf("record %d has offset delta %d after %d; deltas must increase within [0, %d]", i, r.OffsetDelta, prev, h.LastOffsetDelta)
		}
		prev = r.OffsetDelta
		if fn != nil {
			if err := fn(h, i, r); err != nil { // by value: r stays on the stack
				return Header{}, err
			}
		}
	}
	if err := w.finish(); err != nil {
		return Header{}, err
	}
	return h, nil
}

// checkProduced applies LogValidator.validateBatch's rules for batches from
// clients, and analyzeAndValidateRecords' base offset rule.
func checkProduced(h Header) error {
	switch {
	case h.BaseOffset != 0:
		return invalidf("base offset is %d; a produced batch must start at 0", h.BaseOffset)
	case h.LastOffsetDelta < 0:
		return invalidf("invalid offset range [0, %d]", h.LastOffsetDelta)
	case h.NumRecords <= 0:
		return invalidf("record count is %d; a produced batch needs at least one record", h.NumRecords)
	case int64(h.NumRecords) != int64(h.LastOffsetDelta)+1:
		return invalidf("offset range [0, %d] does not match the record count %d", h.LastOffsetDelta, h.NumRecords)
	case h.Control():
		return invalidf("clients may not write control batches")
	case h.ProducerID >= 0 && h.BaseSequence < 0:
		return invalidf("invalid sequence number %d for producer %d", h.BaseSequence, h.ProducerID)
	}
	return nil
}

// checkStored checks the header of a batch the log holds.
func checkStored(h Header) error {
	switch {
	case h.BaseOffset < 0:
		return invalidf("base offset %d is negative", h.BaseOffset)
	case h.LastOffsetDelta < 0:
		return invalidf("last offset delta %d is negative", h.LastOffsetDelta)
	case h.BaseOffset > maxOffset-int64(h.LastOffsetDelta):
		return invalidf("last offset overflows: %d + %d", h.BaseOffset, h.LastOffsetDelta)
	case int64(h.NumRecords) > int64(h.LastOffsetDelta)+1:
		return invalidf("%d records cannot fit offsets [0, %d]", h.NumRecords, h.LastOffsetDelta)
	}
	return nil
}

const maxOffset = 1<<63 - 1

// Split cuts a concatenation of whole batches (the records field of a
// Produce or Fetch, or a log segment) into batches, without checking CRCs.
// The pieces alias b. A partial trailing batch fails with ErrTruncated; a
// batch of another magic with ErrUnsupportedMagic; an impossible length with
// ErrCorrupt. On error, the whole batches before the bad one are returned
// with it.
func Split(b []byte) ([][]byte, error) {
	var batches [][]byte
	for len(b) > 0 {
		size, err := frameSize(b)
		if err != nil {
			return batches, err
		}
		batches = append(batches, b[:size:size])
		b = b[size:]
	}
	return batches, nil
}

// ValidPrefix returns the length of the longest prefix of b made of whole
// batches whose CRC checks out, and the headers of those batches. Log
// recovery uses it to cut a torn or corrupt tail; like Kafka's segment
// recovery, it does not decode records.
func ValidPrefix(b []byte) (n int, headers []Header) {
	for n < len(b) {
		size, err := frameSize(b[n:])
		if err != nil {
			break
		}
		h, err := CheckCRC(b[n : n+size])
		if err != nil {
			break
		}
		headers = append(headers, h)
		n += size
	}
	return n, headers
}

// frameSize returns the size of the batch b starts with, from its length
// field, checking its magic and that b holds all of it.
func frameSize(b []byte) (int, error) {
	if len(b) <= offMagic {
		return 0, fmt.Errorf("%w: %d bytes, too few for a batch's length and magic", ErrTruncated, len(b))
	}
	if m := int8(b[offMagic]); m != Magic {
		return 0, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, m)
	}
	length := int32(binary.BigEndian.Uint32(b[offLength:]))
	if length < minLength {
		return 0, fmt.Errorf("%w: batch length %d is below the minimum %d", ErrCorrupt, length, minLength)
	}
	size := int64(lengthOverhead) + int64(length)
	if size > int64(len(b)) {
		return 0, fmt.Errorf("%w: batch of %d bytes, %d present", ErrTruncated, size, len(b))
	}
	return int(size), nil
}
