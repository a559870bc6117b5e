package record

import "fmt"

// Policy holds the topic settings Kafka's broker checks a produced batch
// against on top of Validate's rules (LogValidator.validateRecord,
// validateKey, validateTimestamp, and max.message.bytes).
type Policy struct {
	// MaxBatchBytes is max.message.bytes: the largest batch accepted, in
	// bytes. Zero or less means no limit.
	MaxBatchBytes int
	// Compacted is true when cleanup.policy includes compact: every record
	// then needs a non-null key.
	Compacted bool
	// LogAppendTime is true when message.timestamp.type is LogAppendTime.
	LogAppendTime bool
	// Now is the broker's time in milliseconds since the epoch, which
	// timestamps are compared with and LogAppendTime stamps. In Stele, the
	// time of the block the batch is applied in.
	Now int64
	// TimestampBeforeMaxMs and TimestampAfterMaxMs are
	// message.timestamp.before.max.ms and message.timestamp.after.max.ms:
	// how far before or after Now a CreateTime record's timestamp may be.
	// Zero or less means no limit (Kafka's default for both is
	// Long.MAX_VALUE before 4.0; 4.0 makes the "after" default one hour).
	TimestampBeforeMaxMs int64
	TimestampAfterMaxMs  int64
}

// Apply validates b as Kafka's broker validates a produced batch for a topic
// with this policy and, when it passes, rewrites in place what Kafka's
// broker rewrites in the CRC-covered part of the batch, returning the
// header after the rewrite:
//
//   - on a LogAppendTime topic, SetLogAppendTime(b, p.Now);
//   - on a CreateTime topic, SetMaxTimestamp(b, t) with t the largest record
//     timestamp (-1 if none has one), when the batch says otherwise or says
//     LogAppendTime.
//
// BaseOffset and PartitionLeaderEpoch, which the CRC does not cover, are
// left to the caller. On error b is unchanged.
//
// Apply fails as Validate does, and also with ErrTooLarge when b is longer
// than MaxBatchBytes, and with a *RecordError for the first record that
// breaks a rule (Kafka reports them all; the first is enough to refuse the
// batch): wrapping ErrInvalidRecord for a null key on a compacted topic, and
// ErrInvalidTimestamp for a CreateTime timestamp too far from Now or for a
// batch whose producer set LogAppendTime when Kafka refuses it (on a
// LogAppendTime topic, or for records without timestamps).
func (p Policy) Apply(b []byte) (Header, error) {
	if p.MaxBatchBytes > 0 && len(b) > p.MaxBatchBytes {
		return Header{}, fmt.Errorf("%w: the batch has %d bytes, more than max.message.bytes (%d)", ErrTooLarge, len(b), p.MaxBatchBytes)
	}
	maxTimestamp := int64(-1)
	h, err := check(b, true, headersSkip, func(h Header, i int, r Record) error {
		if p.Compacted && r.Key == nil {
			return &RecordError{Index: i, Err: invalidf("a compacted topic cannot accept a record without a key")}
		}
		if err := p.checkTimestamp(h, r); err != nil {
			return &RecordError{Index: i, Err: err}
		}
		maxTimestamp = max(maxTimestamp, r.Timestamp)
		return nil
	})
	if err != nil {
		return Header{}, err
	}
	switch {
	case p.LogAppendTime:
		SetLogAppendTime(b, p.Now)
	case h.LogAppendTime() || h.MaxTimestamp != maxTimestamp:
		SetMaxTimestamp(b, maxTimestamp)
	default:
		return h, nil
	}
	return ParseHeader(b)
}

// checkTimestamp is LogValidator.validateTimestamp.
func (p Policy) checkTimestamp(h Header, r Record) error {
	ts := r.Timestamp
	if !p.LogAppendTime && ts != -1 {
		// Differences computed unsigned: they do not overflow.
		if before := p.TimestampBeforeMaxMs; before > 0 && ts < p.Now && uint64(p.Now)-uint64(ts) > uint64(before) {
			return fmt.Errorf("%w: timestamp %d is more than %d ms before the broker's time %d (message.timestamp.before.max.ms)", ErrInvalidTimestamp, ts, before, p.Now)
		}
		if after := p.TimestampAfterMaxMs; after > 0 && ts > p.Now && uint64(ts)-uint64(p.Now) > uint64(after) {
			return fmt.Errorf("%w: timestamp %d is more than %d ms after the broker's time %d (message.timestamp.after.max.ms)", ErrInvalidTimestamp, ts, after, p.Now)
		}
		return nil
	}
	if h.LogAppendTime() {
		return fmt.Errorf("%w: a producer may not set the timestamp type to LogAppendTime", ErrInvalidTimestamp)
	}
	return nil
}
