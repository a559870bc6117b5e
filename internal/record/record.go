// Package record reads and writes Kafka RecordBatch v2, the on-wire and
// on-disk batch format introduced by KIP-98 (magic 2).
//
// It parses batch headers, checks CRC-32C (Castagnoli) checksums, applies the
// checks Apache Kafka's broker applies to produced batches that do not
// depend on topic configuration (Validate; internal/fsm's produce applies
// the topic's), cuts
// concatenations of batches into whole batches (Split, ValidPrefix), rewrites
// the fields a broker rewrites (SetBaseOffset, SetPartitionLeaderEpoch,
// SetLogAppendTime, SetMaxTimestamp), decompresses and decodes records and
// their headers (Records, Each), and encodes batches (Build).
//
// Magic 0 and 1 message sets are not supported. Decoding is bounded and safe on
// hostile input: malformed bytes give an error wrapping one of the sentinel
// errors below, never a panic or an allocation out of proportion with the
// input (see DecompressLimit and Records).
//
// The package does no I/O and keeps no state beyond pools of codec
// (de)compressors. It imports no other Stele package.
package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
)

// HeaderSize is the number of bytes of a v2 batch header, baseOffset through
// recordsCount. The records follow it.
const HeaderSize = 61

// Byte offsets of the header fields.
const (
	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21 // the CRC covers everything from here to the end
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	// lengthOverhead is the part of a batch the Length field does not count:
	// baseOffset and the Length field itself.
	lengthOverhead = 12
	// minLength is the smallest valid Length: a header without records.
	minLength = HeaderSize - lengthOverhead
)

// Attribute bits (KIP-98; bit 6 is KIP-534's delete horizon).
const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// Magic is the only supported value of the magic byte.
const Magic = 2

// castagnoli is the CRC-32C table. It is filled once and only read.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec is the compression codec of a batch, the low three bits of its
// attributes.
type Codec int8

// The codecs Kafka defines. Values 5 to 7 are invalid.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// String returns the name Kafka's compression.type setting uses for c.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return "codec(" + strconv.Itoa(int(c)) + ")"
}

// valid reports whether c is one of the codecs Kafka defines.
func (c Codec) valid() bool { return c >= CodecNone && c <= CodecZstd }

// Header is the fixed 61-byte header of a v2 batch.
type Header struct {
	BaseOffset           int64
	Length               int32 // batchLength field: bytes after the Length field itself
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Codec returns the compression codec named by the attributes. It may be an
// invalid value (5 to 7); Validate rejects those.
func (h Header) Codec() Codec { return Codec(h.Attributes & attrCodecMask) }

// LogAppendTime reports whether the timestamp-type bit is set: every record's
// timestamp is then MaxTimestamp, the time the broker appended the batch.
func (h Header) LogAppendTime() bool { return h.Attributes&attrLogAppendTime != 0 }

// Transactional reports whether the batch is part of a transaction.
func (h Header) Transactional() bool { return h.Attributes&attrTransactional != 0 }

// Control reports whether the batch holds control records (transaction
// markers) rather than data.
func (h Header) Control() bool { return h.Attributes&attrControl != 0 }

// LastOffset is the offset of the batch's last record: BaseOffset +
// LastOffsetDelta.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the number of bytes of the whole batch: 12 + Length.
func (h Header) Size() int { return lengthOverhead + int(h.Length) }

// ParseHeader decodes the 61-byte header at the start of b without checking
// the CRC. It fails with ErrTruncated if len(b) < HeaderSize,
// ErrUnsupportedMagic if the magic byte is not 2 (v0/v1 message sets are not
// supported) and ErrCorrupt if Length is below 49, the size of a header
// without records. It does not look past the header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, a batch header needs %d", ErrTruncated, len(b), HeaderSize)
	}
	h := Header{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		Length:               int32(binary.BigEndian.Uint32(b[offLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		FirstTimestamp:       int64(binary.BigEndian.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		NumRecords:           int32(binary.BigEndian.Uint32(b[offNumRecords:])),
	}
	if h.Magic != Magic {
		return Header{}, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, h.Magic)
	}
	if h.Length < minLength {
		return Header{}, fmt.Errorf("%w: batch length %d is below the minimum %d", ErrCorrupt, h.Length, minLength)
	}
	return h, nil
}

// appendHeader appends the 61 header bytes of h as they are.
func appendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.BaseOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.Length))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.PartitionLeaderEpoch))
	dst = append(dst, byte(h.Magic))
	dst = binary.BigEndian.AppendUint32(dst, h.CRC)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.Attributes))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.LastOffsetDelta))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.FirstTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.MaxTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.ProducerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.ProducerEpoch))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.BaseSequence))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.NumRecords))
	return dst
}

// checksum computes the CRC-32C of a whole batch: attributes through the end.
func checksum(b []byte) uint32 { return crc32.Checksum(b[offAttributes:], castagnoli) }
