package topics

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// produce appends a partition's batches, all or nothing: every batch is
// checked against the topic's configs before the first is written. The
// modules above topics take part through the hook points of
// topic_hooks.go, in this order: batchChecks for each batch of a producer
// (before its sequence), produceChecks once the offsets are known,
// batchAppended for each batch written.
//
// What is stored is the batch as sent but for what Kafka's broker rewrites
// in its header: the base offset and leader epoch; on a LogAppendTime topic
// the timestamp type and timestamps (the log append clock, append_clock.go:
// the block time under app version 1, the proposer's clock from 2); on a CreateTime topic
// a max timestamp other than the records' largest (or a LogAppendTime flag
// the producer set), restamped with theirs as LogValidator does, so the
// producer state, the time index and ListOffsets never go by a lying
// header. The rewrite is of a copy and the same on every broker: a
// certificate covers the bytes as sent, a signature no timestamp, and the
// app hash the stored bytes (docs/kafka-api.md).
//
// Before any of that, the transforms (the plugins module's produce
// plugins) may rewrite each batch but a retry's or one refused as sent
// (docs/plugins.md): the checks then see the batch rewritten, with the
// rules of a stored batch (it may have fewer records than offsets, or
// none), and the producer's sequence goes by the records it sent.
func (f *Topics) produce(c Produce) core.Result {
	t, r := f.lookup(c.Topic, core.TopicID{})
	if t == nil {
		return r
	}
	if c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
		return core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("topic '%s' has %d partitions; partition %d does not exist", t.Name, len(t.Partitions), c.Partition))
	}
	if IsView(t) {
		return viewRefusal(t, "its records are copied from its sources")
	}
	p := t.Partitions[c.Partition]
	batches, err := record.Split(c.Records)
	if err == nil && len(batches) == 0 {
		err = record.ErrTruncated
	}
	if err != nil {
		return core.Fail(kerr.CorruptMessage.Code, fmt.Sprintf("record set is not a sequence of whole record batches: %v", err))
	}
	// A produce plugin rewrites each batch before the checks below see
	// it; sent keeps the header as sent of each batch rewritten, whose
	// record count the producer's sequence numbers go by.
	var sent []*record.Header
	for _, hk := range f.hooks.Transforms.Hooks {
		rewrite := hk.Fn(f, t)
		if rewrite == nil {
			continue
		}
		if sent == nil {
			batches, sent = slices.Clone(batches), make([]*record.Header, len(batches))
		}
		for i, b := range batches {
			h, err := record.Validate(b)
			if sent[i] != nil {
				h = *sent[i] // an earlier plugin rewrote it, valid
			} else if err != nil || p.isRetry(h) {
				continue // refused below as sent, or not written again
			}
			nb, r := rewrite(p, h, b)
			if r.Code != 0 {
				return r
			}
			if nb != nil {
				batches[i], sent[i] = nb, &h
			}
		}
	}
	cfg := t.Config
	headers := make([]record.Header, len(batches))
	keys := make([][]KeyAt, len(batches)) // the key stream entries of each batch
	conditional := false                  // some record states the version it expects
	signed := make([]bool, len(batches))  // the batch has a signed record
	// validate checks a batch, calls fn with its records' keys (for the
	// key index) and returns its records' largest timestamp.
	validate := func(i int, b []byte, fn func(int32, []byte, []byte, []record.RecordHeader)) (record.Header, int64, error) {
		maxTs := int64(-1)
		check := record.ValidateKeys
		if sent != nil && sent[i] != nil {
			check = record.ValidateKeysRewritten
		}
		h, err := check(b, func(delta int32, ts int64, key, value []byte, hs []record.RecordHeader) {
			maxTs = max(maxTs, ts)
			fn(delta, key, value, hs)
		})
		return h, maxTs, err
	}
	if f.opts.WithoutKeyIndex && sent == nil {
		validate = func(_ int, b []byte, _ func(int32, []byte, []byte, []record.RecordHeader)) (record.Header, int64, error) {
			return record.ValidateMaxTimestamp(b)
		}
	}
	// Records have subjects from app version 11 (SubjectsVersion): each
	// batch's are counted for its summary (the subjects module's).
	withSubjects := f.BlockAppVersion() >= SubjectsVersion
	withViews := f.BlockAppVersion() >= ViewsVersion
	field := f.fieldSubject(t)
	var subjects []*subject.Counter // per batch: its records by subject, nil for none
	if withSubjects {
		subjects = make([]*subject.Counter, len(batches))
	}
	restamp := make([]bool, len(batches)) // the batch's header max timestamp is to be rewritten
	var keyBytes []byte                   // the batches' keys, copied: one allocation per doubling, not per key
	base := int32(0)                      // the index of the batch's first record in the record set
	bases := make([]int32, len(batches))
	for i, b := range batches {
		bases[i] = base
		var bad RecordErrors // records whose Stele headers are wrong
		h, maxTs, err := validate(i, b, func(delta int32, key, value []byte, hs []record.RecordHeader) {
			expect, snapshot, sig, err := keyHeaders(key, hs)
			signed[i] = signed[i] || sig
			if err != nil {
				bad.Add(base+delta, err.Error())
			}
			if withViews && err == nil {
				if err = sourceHeaderProblem(hs); err != nil {
					bad.Add(base+delta, err.Error())
				}
			}
			if withSubjects && err == nil { // one error per record: its first
				switch s, err := recordSubject(&cfg, hs, value, field); {
				case err != nil:
					bad.Add(base+delta, err.Error())
				case s != nil:
					if subjects[i] == nil {
						subjects[i] = &subject.Counter{}
					}
					subjects[i].Add(s)
				}
			}
			if key != nil {
				// keyBytes may move as it grows; a key already taken
				// keeps the array it was copied into.
				start := len(keyBytes)
				keyBytes = append(keyBytes, key...)
				keys[i] = append(keys[i], KeyAt{delta, keyBytes[start:len(keyBytes):len(keyBytes)], expect, snapshot})
				conditional = conditional || expect != NoExpectation
			}
		})
		if err != nil {
			return core.Fail(record.ErrorCode(err), err.Error())
		}
		if bad.total > 0 {
			return bad.Result(kerr.InvalidRecord.Code)
		}
		if res := f.checkBatch(t, p, h, b, base); res.Code != 0 {
			return res
		}
		if !cfg.LogAppendTime && h.NumRecords > 0 && (h.MaxTimestamp != maxTs || h.LogAppendTime()) {
			// The header claims another max timestamp than its records
			// hold: set it to theirs, as Kafka's LogValidator does, so
			// that the producer state, the time index, retention and
			// ListOffsets all go by the records (docs/kafka-api.md).
			restamp[i] = true
			h = h.WithMaxTimestamp(maxTs)
		}
		headers[i] = h
		base += h.LastOffsetDelta + 1
	}
	// Idempotent producers' sequences, against a staged copy of their
	// state: a retried batch is not written again, and the answer is the
	// offset it got the first time.
	offsets := make([]int64, len(batches))
	dup := make([]bool, len(batches))
	dupTime := int64(-1)                // the stored max timestamp of the first batch, a retry
	var staged map[int64]*producerState // made for the first idempotent batch
	next := p.Next
	for i, h := range headers {
		if h.ProducerID >= 0 {
			if sent != nil && sent[i] != nil {
				h.NumRecords = sent[i].NumRecords // what its sequence numbers count
			}
			for _, hk := range f.hooks.BatchChecks.Hooks {
				if r := hk.Fn(f, t, p, h); r.Code != 0 {
					return r
				}
			}
			if staged == nil {
				staged = map[int64]*producerState{}
			}
			st, ok := staged[h.ProducerID]
			if !ok && p.ProducerStates[h.ProducerID] != nil {
				st = p.ProducerStates[h.ProducerID].clone()
			}
			code, isDup, first := checkSequence(st, h, next == 0)
			if code != 0 {
				return core.Fail(code, fmt.Sprintf("producer %d epoch %d: batch with sequence %d in %s-%d: %s",
					h.ProducerID, h.ProducerEpoch, h.BaseSequence, t.Name, p.Index, sequenceProblem(code, st)))
			}
			if isDup {
				offsets[i], dup[i] = first.Offset, true
				if i == 0 {
					dupTime = first.Timestamp
				}
				staged[h.ProducerID] = st
				continue
			}
			if st == nil {
				st = &producerState{Epoch: h.ProducerEpoch, TxnFirst: -1}
			}
			stored := h.MaxTimestamp
			if cfg.LogAppendTime {
				stored = f.logAppendTime()
			}
			st.record(h, next, stored, f.BlockTime)
			if h.Transactional() && st.TxnFirst < 0 {
				st.TxnFirst = next
			}
			staged[h.ProducerID] = st
		}
		offsets[i] = next
		next += int64(h.LastOffsetDelta) + 1
	}
	pr := &Producing{T: t, P: p, Batches: batches, Headers: headers, Bases: bases, Keys: keys,
		Conditional: conditional, Signed: signed, Offsets: offsets, Dup: dup, Subjects: subjects}
	var written []func() // what the produce checks do once the batches are written
	for _, hk := range f.hooks.ProduceChecks.Hooks {
		r, then := hk.Fn(f, pr)
		if r.Code != 0 {
			return r
		}
		if then != nil {
			written = append(written, then)
		}
	}
	for i, b := range batches {
		if dup[i] {
			continue
		}
		b = append([]byte(nil), b...) // the block's bytes are not ours to rewrite
		h := headers[i]
		record.SetBaseOffset(b, p.Next)
		record.SetPartitionLeaderEpoch(b, 0)
		switch {
		case cfg.LogAppendTime:
			record.SetLogAppendTime(b, f.logAppendTime())
		case restamp[i]:
			record.SetMaxTimestamp(b, h.MaxTimestamp)
		}
		if err := p.Log.Append(b, f.BlockTime); err != nil {
			// Fail-stop: the log is cut back to the committed end at the
			// next start and the block replayed.
			return f.LocalFault("appending to %s-%d: %w", t.Name, p.Index, err)
		}
		f.proveAppend(t, p, p.Next, b)
		for _, hk := range f.hooks.BatchAppended.Hooks {
			if r := hk.Fn(f, pr, i, b, p.Next); r.Code != 0 {
				return r
			}
		}
		p.Next += int64(h.LastOffsetDelta) + 1
	}
	for _, then := range written {
		then()
	}
	for pid, st := range staged {
		if st != nil {
			p.ProducerStates[pid] = st
			p.dirtyProducers[pid] = true
		}
	}
	f.dirtyParts[p] = true
	res := core.Result{BaseOffset: offsets[0], LogAppendTime: -1, LogStartOffset: p.Start}
	switch {
	case dup[0]:
		// A retry is answered with the timestamp its producer state keeps
		// for the batch, whatever the topic's timestamp type, as Kafka's
		// UnifiedLog.append answers a duplicate (log_append_time from the
		// BatchMetadata, the stored batch's max timestamp): the append
		// time on a LogAppendTime topic, so a client looking the record up
		// by it finds it; the batch's max timestamp on a CreateTime one.
		res.LogAppendTime = dupTime
	case cfg.LogAppendTime:
		res.LogAppendTime = f.logAppendTime()
	}
	return res
}

// sequenceProblem says why a batch's sequence was refused.
func sequenceProblem(code int16, st *producerState) string {
	switch {
	case code == kerr.InvalidProducerEpoch.Code && st != nil:
		return fmt.Sprintf("the producer's epoch here is %d: fenced", st.Epoch)
	case code == kerr.OutOfOrderSequenceNumber.Code && st != nil && len(st.Entries) > 0:
		return fmt.Sprintf("expected sequence %d", st.Entries[len(st.Entries)-1].Next)
	case code == kerr.OutOfOrderSequenceNumber.Code:
		return "a new producer (or epoch) must start at sequence 0 here"
	}
	return "invalid producer epoch or sequence"
}

// checkBatch applies the topic's rules to one batch, as Kafka's LogValidator
// does: the batch's size and kind first, then each record (a key in a
// compacted topic, a timestamp within message.timestamp.difference.max.ms
// unless it is -1, no LogAppendTime type set by the producer),
// every failing record listed in the result (base is the index of the
// batch's first record in the record set).
func (f *Topics) checkBatch(t *Topic, p *Partition, h record.Header, b []byte, base int32) core.Result {
	cfg := t.Config
	if len(b) > int(cfg.MaxMessageBytes) {
		return core.Fail(kerr.MessageTooLarge.Code, fmt.Sprintf("record batch of %d bytes exceeds max.message.bytes %d", len(b), cfg.MaxMessageBytes))
	}
	if h.Control() {
		return core.Fail(kerr.InvalidRecord.Code, "clients may not write control batches")
	}
	checkTime := !cfg.LogAppendTime && cfg.TimestampDifferenceMaxMs < maxLong
	// A producer may not set the LogAppendTime type: Kafka refuses every
	// record of such a batch on a LogAppendTime topic, and on a CreateTime
	// one those without a timestamp (a LogAppendTime batch's records all
	// read its max timestamp) (LogValidator.validateTimestamp).
	producerLAT := h.LogAppendTime() && (cfg.LogAppendTime || h.MaxTimestamp == -1)
	if !cfg.Compact && !checkTime && !producerLAT {
		return core.Result{}
	}
	_, recs, err := record.Records(b)
	if err != nil {
		return core.Fail(kerr.CorruptMessage.Code, err.Error())
	}
	var bad RecordErrors
	timestamps := false // some record's timestamp is refused: INVALID_TIMESTAMP
	for i, rec := range recs {
		switch {
		case cfg.Compact && rec.Key == nil:
			bad.Add(base+int32(i), fmt.Sprintf("Compacted topic cannot accept message without key in topic partition %s-%d.", t.Name, p.Index))
		case producerLAT:
			timestamps = true
			bad.Add(base+int32(i), "Invalid timestamp type in message: the producer should not set timestamp type to LogAppendTime.")
		case checkTime && rec.Timestamp != -1 && outOfRange(rec.Timestamp, f.BlockTime, cfg.TimestampDifferenceMaxMs):
			// -1 is no timestamp: Kafka checks only the others.
			timestamps = true
			bad.Add(base+int32(i), fmt.Sprintf("Timestamp %d of message with offset %d is out of range. The timestamp should be within [%d, %d]",
				rec.Timestamp, base+int32(i), f.BlockTime-cfg.TimestampDifferenceMaxMs, f.BlockTime+cfg.TimestampDifferenceMaxMs))
		}
	}
	switch {
	case bad.total == 0:
		return core.Result{}
	case timestamps:
		return bad.Result(kerr.InvalidTimestamp.Code)
	}
	return bad.Result(kerr.InvalidRecord.Code)
}

// outOfRange reports whether ts is more than maxDiff from now.
func outOfRange(ts, now, maxDiff int64) bool {
	d := ts - now
	if d < 0 {
		d = -d
	}
	return d > maxDiff
}

// RecordErrors gathers the failing records of a batch, as Kafka's
// LogValidator does before refusing it whole (KIP-467): the first
// MaxRecordErrors of them, and how many there are.
type RecordErrors struct {
	list  []core.RecordError
	total int
}

// Len is how many records failed.
func (e *RecordErrors) Len() int { return e.total }

// Add records that the record at index (in the record set) failed, and why.
func (e *RecordErrors) Add(index int32, msg string) {
	e.total++
	if len(e.list) < core.MaxRecordErrors {
		e.list = append(e.list, core.RecordError{Index: index, Message: msg})
	}
}

// Result is the refusal of the batch with code, listing the records; its
// message, like Kafka's, counts them and shows the first three.
func (e *RecordErrors) Result(code int16) core.Result {
	var b strings.Builder
	if code == kerr.InvalidTimestamp.Code {
		b.WriteString("One or more records have been rejected due to invalid timestamp")
	} else {
		fmt.Fprintf(&b, "One or more records have been rejected due to %d record errors in total", e.total)
	}
	b.WriteString("; nothing of the batch was written; the first: ")
	for i, r := range e.list[:min(3, len(e.list))] {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "record %d: %s", r.Index, r.Message)
	}
	res := core.Fail(code, b.String())
	res.RecordErrors = e.list
	return res
}

func (f *Topics) deleteRecords(c DeleteRecords) core.Result {
	t, r := f.lookup(c.Topic, core.TopicID{})
	if t == nil {
		return r
	}
	if c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
		return core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("topic '%s' has %d partitions; partition %d does not exist", t.Name, len(t.Partitions), c.Partition))
	}
	if IsView(t) {
		return viewRefusal(t, "its records leave with its sources'")
	}
	p := t.Partitions[c.Partition]
	off := c.Offset
	if off == -1 {
		off = p.Next
	}
	if off > p.Next {
		return core.Fail(kerr.OffsetOutOfRange.Code, fmt.Sprintf("cannot delete records before offset %d: the high watermark is %d", off, p.Next))
	}
	if off > p.Start {
		p.Start = off
		f.dirtyParts[p] = true
		f.trimmed(t, p)
	}
	return core.Result{LowWatermark: p.Start}
}
