package record

import "encoding/binary"

// The setters rewrite fields of a batch in place. They expect b to start
// with a batch that was validated; a b too short for the field (or, for
// those recomputing the CRC, shorter than the batch its length field
// declares) is left unchanged rather than panicked on.

// SetBaseOffset sets the batch's base offset, as a broker does on append.
// The CRC does not cover it.
func SetBaseOffset(b []byte, off int64) {
	if len(b) >= offBaseOffset+8 {
		binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(off))
	}
}

// SetPartitionLeaderEpoch sets the batch's partition leader epoch, as a
// broker does on append. The CRC does not cover it.
func SetPartitionLeaderEpoch(b []byte, epoch int32) {
	if len(b) >= offLeaderEpoch+4 {
		binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
	}
}

// SetLogAppendTime marks the batch LogAppendTime, sets its first and max
// timestamps to ts, and recomputes the CRC: what a broker does when the
// topic's message.timestamp.type is LogAppendTime. (Kafka's broker sets only
// MaxTimestamp, which is every record's timestamp in a LogAppendTime batch;
// FirstTimestamp is set too here, as franz-go's kfake does, so that the
// batch reads the same whichever field a reader takes.)
func SetLogAppendTime(b []byte, ts int64) {
	batch, ok := wholeBatch(b)
	if !ok {
		return
	}
	attrs := binary.BigEndian.Uint16(batch[offAttributes:])
	binary.BigEndian.PutUint16(batch[offAttributes:], attrs|attrLogAppendTime)
	binary.BigEndian.PutUint64(batch[offFirstTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(batch[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(batch[offCRC:], checksum(batch))
}

// SetMaxTimestamp marks the batch CreateTime, sets its max timestamp to ts
// and recomputes the CRC: what Kafka's broker does to a batch produced to a
// CreateTime topic, ts being the largest record timestamp.
func SetMaxTimestamp(b []byte, ts int64) {
	batch, ok := wholeBatch(b)
	if !ok {
		return
	}
	attrs := binary.BigEndian.Uint16(batch[offAttributes:])
	binary.BigEndian.PutUint16(batch[offAttributes:], attrs&^attrLogAppendTime)
	binary.BigEndian.PutUint64(batch[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(batch[offCRC:], checksum(batch))
}

// WithMaxTimestamp returns h as SetMaxTimestamp(b, ts) leaves the header of
// the batch b it was parsed from, but for the CRC: marked CreateTime, with
// max timestamp ts.
func (h Header) WithMaxTimestamp(ts int64) Header {
	h.Attributes &^= attrLogAppendTime
	h.MaxTimestamp = ts
	return h
}

// WithoutCompression returns h marked uncompressed, for Build to encode
// records afresh without a codec.
func (h Header) WithoutCompression() Header {
	h.Attributes &^= attrCodecMask
	return h
}

// wholeBatch returns the batch b starts with, if b holds all of it.
func wholeBatch(b []byte) ([]byte, bool) {
	size, err := frameSize(b)
	if err != nil {
		return nil, false
	}
	return b[:size], true
}
