package record

import (
	"encoding/binary"
	"math"
)

// RecordHeader is one header of a record. A nil Value is a null value.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one record of a v2 batch.
type Record struct {
	Attributes     int8 // unused by Kafka so far; kept as written
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte // nil means null
	Value          []byte // nil means null (a tombstone)
	Headers        []RecordHeader

	// Filled by Records and Each from the batch header; Build ignores them.
	Offset    int64 // BaseOffset + OffsetDelta
	Timestamp int64 // FirstTimestamp + TimestampDelta, or MaxTimestamp for LogAppendTime
}

// minRecordSize is the smallest encoded record: a one-byte length, then
// attributes, timestamp delta, offset delta, key length, value length and
// header count of one byte each.
const minRecordSize = 7

// Records checks the framing and CRC of one whole batch (as CheckCRC does),
// decompresses its records (gzip; Snappy, raw or in the xerial framing Java
// clients write; LZ4 frame; zstd) and decodes every record.
//
// Decoding fails, with an error wrapping ErrInvalidRecord, when a record is
// malformed (a varint too long or out of range, a negative length where
// Kafka allows none, a field running past its record, bytes left over in a
// record), when there are fewer or more records than NumRecords says, and,
// wrapping ErrTooLarge, when the records would inflate past
// DecompressLimit. A negative key or value length other than -1 is read as
// null, as Kafka does. Records does not check the rules Validate adds.
//
// Key, Value and header values alias batch when it is uncompressed, and a
// buffer private to this call otherwise. On top of the decompressed bytes,
// Records allocates a 112-byte Record per record (and a slice per record
// with headers): up to 16 times the records' size for minimal records.
// Each streams instead.
func Records(batch []byte) (Header, []Record, error) {
	w, err := open(batch)
	if err != nil {
		return Header{}, nil, err
	}
	recs := make([]Record, 0, w.left)
	for w.left > 0 {
		var r Record
		if err := w.next(&r, headersFresh); err != nil {
			return Header{}, nil, err
		}
		recs = append(recs, r)
	}
	if err := w.finish(); err != nil {
		return Header{}, nil, err
	}
	return w.h, recs, nil
}

// Each decodes the records of one batch in order, as Records does, and
// calls fn with each; it returns the batch header. The *Record passed to fn
// and its Headers slice are reused from one call to the next; Key, Value and
// header values alias batch (uncompressed) or a buffer private to this call,
// which stays valid after it.
//
// If fn returns an error, Each stops and returns that error unchanged. A
// malformed record stops Each with an error after fn has seen the records
// before it.
func Each(batch []byte, fn func(*Record) error) (Header, error) {
	w, err := open(batch)
	if err != nil {
		return Header{}, err
	}
	var r Record
	for w.left > 0 {
		if err := w.next(&r, headersReuse); err != nil {
			return Header{}, err
		}
		if err := fn(&r); err != nil {
			return Header{}, err
		}
	}
	if err := w.finish(); err != nil {
		return Header{}, err
	}
	return w.h, nil
}

// walker reads the records of one batch in order.
type walker struct {
	h     Header
	data  []byte // the records not read yet, decompressed
	left  int    // records not read yet
	index int    // index of the next record
}

// headerMode says what next does with record headers.
type headerMode int8

const (
	headersFresh headerMode = iota // a new Headers slice per record
	headersReuse                   // reuse the Headers slice of the Record passed in
	headersSkip                    // check the headers, keep none (no allocation)
)

// open checks framing and CRC of one whole batch, its codec and record
// count, and returns a walker over its decompressed records.
func open(batch []byte) (walker, error) {
	h, err := CheckCRC(batch)
	if err != nil {
		return walker{}, err
	}
	return openChecked(batch, h)
}

// openChecked is open for a batch whose framing and CRC are checked: h is
// its header.
func openChecked(batch []byte, h Header) (walker, error) {
	var err error
	c := h.Codec()
	if !c.valid() {
		return walker{}, errUnsupportedCodec(c)
	}
	if h.NumRecords < 0 {
		return walker{}, invalidf("record count %d is negative", h.NumRecords)
	}
	data := batch[HeaderSize:len(batch):len(batch)]
	// An empty batch that log compaction keeps for its producer state has
	// no records section at all, whatever its codec bits say.
	if c != CodecNone && (h.NumRecords > 0 || len(data) > 0) {
		if data, err = decompress(c, data); err != nil {
			return walker{}, err
		}
	}
	if int64(h.NumRecords) > int64(len(data)/minRecordSize) {
		return walker{}, invalidf("%d records cannot fit in %d bytes", h.NumRecords, len(data))
	}
	return walker{h: h, data: data, left: int(h.NumRecords)}, nil
}

// next decodes the next record into r. The caller checks w.left > 0.
func (w *walker) next(r *Record, mode headerMode) error {
	i := w.index
	length, n := varint32(w.data)
	if n <= 0 {
		return invalidf("record %d: malformed length", i)
	}
	if length < 0 || int64(length) > int64(len(w.data)-n) {
		return invalidf("record %d: length %d, but %d bytes remain (incorrect declared batch size)", i, length, len(w.data)-n)
	}
	body := w.data[n : n+int(length)]
	w.data = w.data[n+int(length):]
	w.left--
	w.index++
	if err := decodeBody(body, r, mode); err != nil {
		return invalidf("record %d: %s", i, err.msg)
	}
	r.Offset = w.h.BaseOffset + int64(r.OffsetDelta)
	if w.h.LogAppendTime() {
		r.Timestamp = w.h.MaxTimestamp
	} else {
		r.Timestamp = w.h.FirstTimestamp + r.TimestampDelta
	}
	return nil
}

// finish checks that nothing follows the last record.
func (w *walker) finish() error {
	if len(w.data) > 0 {
		return invalidf("%d bytes follow the last of %d records (incorrect declared batch size)", len(w.data), w.h.NumRecords)
	}
	return nil
}

// bodyError is a record decoding failure; next adds the record's index.
type bodyError struct{ msg string }

// decodeBody decodes one record body (everything after its length), which
// it must use exactly.
func decodeBody(p []byte, r *Record, mode headerMode) *bodyError {
	if len(p) == 0 {
		return &bodyError{"empty record"}
	}
	r.Attributes = int8(p[0])
	p = p[1:]
	var n int
	if r.TimestampDelta, n = binary.Varint(p); n <= 0 {
		return &bodyError{"malformed timestamp delta"}
	}
	p = p[n:]
	if r.OffsetDelta, n = varint32(p); n <= 0 {
		return &bodyError{"malformed offset delta"}
	}
	p = p[n:]
	var ok bool
	if r.Key, p, ok = nullableBytes(p); !ok {
		return &bodyError{"malformed key"}
	}
	if r.Value, p, ok = nullableBytes(p); !ok {
		return &bodyError{"malformed value"}
	}
	count, n := varint32(p)
	if n <= 0 {
		return &bodyError{"malformed header count"}
	}
	p = p[n:]
	// Each header takes at least two bytes (two one-byte lengths).
	if count < 0 || int64(count) > int64(len(p)/2) {
		return &bodyError{"invalid number of record headers"}
	}
	if mode == headersFresh && count > 0 {
		r.Headers = make([]RecordHeader, 0, count)
	} else {
		r.Headers = r.Headers[:0]
	}
	for range count {
		klen, n := varint32(p)
		if n <= 0 || klen < 0 || int64(klen) > int64(len(p)-n) {
			return &bodyError{"malformed header key"}
		}
		key := p[n : n+int(klen)]
		p = p[n+int(klen):]
		var value []byte
		if value, p, ok = nullableBytes(p); !ok {
			return &bodyError{"malformed header value"}
		}
		if mode != headersSkip {
			r.Headers = append(r.Headers, RecordHeader{Key: string(key), Value: value})
		}
	}
	if len(p) != 0 {
		return &bodyError{"bytes left over after the record's fields"}
	}
	return nil
}

// nullableBytes reads a varint length and that many bytes; a negative
// length is null, as Kafka reads it. The result's capacity is its length.
func nullableBytes(p []byte) (b, rest []byte, ok bool) {
	l, n := varint32(p)
	if n <= 0 {
		return nil, p, false
	}
	p = p[n:]
	if l < 0 {
		return nil, p, true
	}
	if int64(l) > int64(len(p)) {
		return nil, p, false
	}
	return p[:l:l], p[l:], true
}

// varint32 reads a zigzag varint of at most 5 bytes that fits 32 bits, as
// Kafka's ByteUtils.readVarint. n <= 0 means malformed or cut short.
func varint32(p []byte) (v int32, n int) {
	u, n := binary.Uvarint(p)
	if n <= 0 || n > 5 || u > math.MaxUint32 {
		return 0, -1
	}
	return int32(uint32(u)>>1) ^ -int32(u&1), n
}
