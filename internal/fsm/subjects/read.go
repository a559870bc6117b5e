package subjects

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/internal/subject"
)

// Reads by subject, from the committed state: any goroutine.

// Record is a record read by subject.
type Record struct {
	Partition int32
	Offset    int64
	Timestamp int64 // ms
	Subject   []byte
	Key       []byte // nil when null
	Value     []byte // nil for a tombstone
	Headers   []record.RecordHeader
}

// ReadStats says what a read by subject cost: the batches whose summary
// matched and were read, those skipped on their summary alone, and the
// bytes of the batches read.
type ReadStats struct {
	BatchesRead    int64
	BatchesSkipped int64
	BytesRead      int64
}

// Add adds o to s.
func (s *ReadStats) Add(o ReadStats) {
	s.BatchesRead += o.BatchesRead
	s.BatchesSkipped += o.BatchesSkipped
	s.BytesRead += o.BytesRead
}

// SubjectRecords returns up to limit committed records of topic whose
// subject matches pat, partition by partition, from offset from[pi] in
// each partition pi listed in from (a partition the topic does not have
// is skipped), in offset order, as a read_committed consumer sees them:
// below the last stable offset, without records of aborted transactions.
// next holds, for each partition of from, the offset the following read
// starts at: after the last record returned, or after the last batch
// looked at. Only batches whose summary may match are read; a topic that
// does not exist gives topics.ErrUnknownTopic.
func (f *Subjects) SubjectRecords(topic string, pat subject.Pattern, from map[int32]int64, limit int) (out []Record, next map[int32]int64, stats ReadStats, err error) {
	return f.eachPartition(topic, from, limit, func(t *topics.TopicView, pi int32, off int64, n int) ([]Record, int64, ReadStats, error) {
		return readPartition(f.Store, t, pi, pat, off, n, f.committedField(topic))
	})
}

// eachPartition reads topic's partitions in from, in order, with read,
// until limit records are read: the records, each partition's offset
// after what was read (or where it would have started), and what it cost.
func (f *Subjects) eachPartition(topic string, from map[int32]int64, limit int,
	read func(t *topics.TopicView, pi int32, off int64, n int) ([]Record, int64, ReadStats, error)) (out []Record, next map[int32]int64, stats ReadStats, err error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, nil, stats, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	next = make(map[int32]int64, len(from))
	for pi := int32(0); int(pi) < len(t.Partitions); pi++ {
		off, ok := from[pi]
		if !ok {
			continue
		}
		if len(out) >= limit {
			next[pi] = off
			continue
		}
		recs, n, st, err := read(t, pi, off, limit-len(out))
		stats.Add(st)
		if err != nil {
			return nil, nil, stats, err
		}
		out = append(out, recs...)
		next[pi] = n
	}
	return out, next, stats, nil
}

// readPartition reads partition pi from offset off (readPartition's
// parts of SubjectRecords).
func readPartition(store *storage.Store, t *topics.TopicView, pi int32, pat subject.Pattern, off int64, limit int, field subject.FieldFunc) ([]Record, int64, ReadStats, error) {
	var stats ReadStats
	p := t.Partitions[pi]
	stable := p.LastStableOffset()
	off = max(off, p.LogStartOffset())
	if off >= stable {
		return nil, off, stats, nil
	}
	prefix := SummaryPartitionPrefix(t.ID, pi)
	lower := binary.BigEndian.AppendUint64(bytes.Clone(prefix), uint64(off))
	var out []Record
	var chunk readChunk
	next := off
	err := store.Seek(lower, storage.PrefixEnd(prefix), func(k, v []byte) ([]byte, error) {
		if len(k) != len(prefix)+8 {
			return nil, fmt.Errorf("stele/fsm: subject summary key %x is malformed", k)
		}
		last := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		if last >= stable {
			return nil, core.ErrStopScan // not decided yet, or newer than this view
		}
		s, err := subject.DecodeSummary(v)
		if err != nil {
			return nil, fmt.Errorf("stele/fsm: %s-%d: the summary of the batch ending at %d: %w", t.Name, pi, last, err)
		}
		if !s.Matches(pat) {
			stats.BatchesSkipped++
			next = last + 1
			chunk.size = 0 // the next match starts a run
			return nil, nil
		}
		b, h, err := chunk.batch(p, last)
		if errors.Is(err, topics.ErrOffsetOutOfRange) {
			return nil, core.ErrStopScan // retention moved the start since
		}
		if err != nil {
			return nil, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", t.Name, pi, last, err)
		}
		stats.BatchesRead++
		stats.BytesRead += int64(len(b))
		next = h.LastOffset() + 1
		if h.Control() || p.InAbortedTxn(h.ProducerID, h.BaseOffset) {
			return nil, nil
		}
		full := false
		_, err = record.Each(b, func(r *record.Record) error {
			if r.Offset < off {
				return nil
			}
			var hdr []byte
			for _, hd := range r.Headers {
				if hd.Key == subject.Header {
					hdr = hd.Value
					if hdr == nil {
						hdr = []byte{}
					}
					break
				}
			}
			sub := s.RecordSubject(hdr, r.Value, field)
			if sub == nil || !pat.Match(sub) {
				return nil
			}
			rec := Record{Partition: pi, Offset: r.Offset, Timestamp: r.Timestamp, Subject: bytes.Clone(sub),
				Key: cloneNil(r.Key), Value: cloneNil(r.Value)}
			for _, hd := range r.Headers {
				rec.Headers = append(rec.Headers, record.RecordHeader{Key: hd.Key, Value: cloneNil(hd.Value)})
			}
			out = append(out, rec)
			if len(out) >= limit {
				next = r.Offset + 1
				full = true
				return core.ErrStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, core.ErrStopScan) {
			return nil, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", t.Name, pi, last, err)
		}
		if full {
			return nil, core.ErrStopScan
		}
		return nil, nil
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return nil, off, stats, err
	}
	return out, next, stats, nil
}

// readChunk holds the batches of the last read of a partition's log, so
// that a run of matching batches comes from a few reads rather than one
// read each. The first batch of a run is read alone (a rare match costs
// its own bytes); each read after it within the run asks for twice as
// much, up to readChunkBytes.
type readChunk struct {
	batches [][]byte
	heads   []record.Header
	i       int // the batch to look at first
	size    int // the next read's size: 0 at the start of a run
}

// readChunkBytes is the most one read of the log asks for.
const readChunkBytes = 8 << 20

// batch returns the batch of p whose last offset is last.
func (c *readChunk) batch(p *topics.Partition, last int64) ([]byte, record.Header, error) {
	for ; c.i < len(c.heads); c.i++ {
		if h := c.heads[c.i]; h.LastOffset() >= last {
			if h.BaseOffset <= last {
				return c.batches[c.i], h, nil
			}
			break
		}
	}
	data, err := p.Read(last, max(c.size, 1))
	c.size = min(max(2*c.size, 64<<10), readChunkBytes)
	if err != nil {
		return nil, record.Header{}, err
	}
	batches, err := record.Split(data)
	if err == nil && len(batches) == 0 {
		err = record.ErrTruncated
	}
	if err != nil {
		return nil, record.Header{}, err
	}
	c.batches, c.heads, c.i = batches, c.heads[:0], 0
	for _, b := range batches {
		h, err := record.ParseHeader(b)
		if err != nil {
			return nil, record.Header{}, err
		}
		c.heads = append(c.heads, h)
	}
	if h := c.heads[0]; h.BaseOffset > last || h.LastOffset() < last {
		return nil, record.Header{}, fmt.Errorf("the log's batch at %d holds %d to %d", last, h.BaseOffset, h.LastOffset())
	}
	return c.batches[0], c.heads[0], nil
}

func cloneNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// SubjectCount is a subject seen in a topic and how many records were
// given it.
type SubjectCount struct {
	Subject []byte
	Records uint64
}

// SubjectCounts lists, in byte order, up to limit subjects of topic that
// are prefix or lie under it (whole tokens; empty: every subject) and
// sort after after (nil: from the first), with how many records the
// topic was given with each. A topic that does not exist gives
// topics.ErrUnknownTopic.
func (f *Subjects) SubjectCounts(topic string, prefix, after []byte, limit int) ([]SubjectCount, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	base := CountPrefix(t.ID)
	lower := append(bytes.Clone(base), prefix...)
	if after != nil && bytes.Compare(after, prefix) >= 0 {
		lower = append(append(bytes.Clone(base), after...), 0)
	}
	upper := storage.PrefixEnd(append(bytes.Clone(base), prefix...))
	var out []SubjectCount
	err := f.Store.Seek(lower, upper, func(k, v []byte) ([]byte, error) {
		sub := k[len(base):]
		if !subject.HasPrefix(sub, prefix) {
			return nil, nil
		}
		n, c := binary.Uvarint(v)
		if c <= 0 {
			return nil, fmt.Errorf("stele/fsm: subject count %q is malformed", k)
		}
		out = append(out, SubjectCount{Subject: bytes.Clone(sub), Records: n})
		if len(out) >= limit {
			return nil, core.ErrStopScan
		}
		return nil, nil
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return nil, err
	}
	return out, nil
}

// AllRecords reads topic's committed records as SubjectRecords does, every
// record whatever its subject (a record without one has a nil Subject; a
// stele-subject header's value is its subject, as written): from each
// partition's offset in from (a partition absent is not read), at most
// limit records, which readers of typed records use (docs/schemas.md).
// It reads the log, batch after batch: no summary lets it skip.
func (f *Subjects) AllRecords(topic string, from map[int32]int64, limit int) (out []Record, next map[int32]int64, stats ReadStats, err error) {
	return f.eachPartition(topic, from, limit, func(t *topics.TopicView, pi int32, off int64, n int) ([]Record, int64, ReadStats, error) {
		return readAll(t, pi, off, n)
	})
}

// readAll reads partition pi from offset off, every record.
func readAll(t *topics.TopicView, pi int32, off int64, limit int) ([]Record, int64, ReadStats, error) {
	var stats ReadStats
	p := t.Partitions[pi]
	stable := p.LastStableOffset()
	off = max(off, p.LogStartOffset())
	next := off
	var out []Record
	for next < stable && len(out) < limit {
		data, err := p.Read(next, readChunkBytes)
		if errors.Is(err, topics.ErrOffsetOutOfRange) {
			break // retention moved the start since
		}
		if err != nil {
			return nil, next, stats, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", t.Name, pi, next, err)
		}
		batches, err := record.Split(data)
		if err != nil {
			return nil, next, stats, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", t.Name, pi, next, err)
		}
		if len(batches) == 0 {
			break
		}
		for _, b := range batches {
			h, err := record.ParseHeader(b)
			if err != nil {
				return nil, next, stats, err
			}
			if h.BaseOffset >= stable || len(out) >= limit {
				break
			}
			stats.BatchesRead++
			stats.BytesRead += int64(len(b))
			last := h.LastOffset() + 1
			if h.Control() || p.InAbortedTxn(h.ProducerID, h.BaseOffset) {
				next = last
				continue
			}
			_, err = record.Each(b, func(r *record.Record) error {
				if r.Offset < next || r.Offset >= stable {
					return nil
				}
				rec := Record{Partition: pi, Offset: r.Offset, Timestamp: r.Timestamp, Key: cloneNil(r.Key), Value: cloneNil(r.Value)}
				for _, hd := range r.Headers {
					rec.Headers = append(rec.Headers, record.RecordHeader{Key: hd.Key, Value: cloneNil(hd.Value)})
					if hd.Key == subject.Header && hd.Value != nil {
						rec.Subject = bytes.Clone(hd.Value)
					}
				}
				out = append(out, rec)
				if len(out) >= limit {
					last = r.Offset + 1
					return core.ErrStopScan
				}
				return nil
			})
			if err != nil && !errors.Is(err, core.ErrStopScan) {
				return nil, next, stats, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", t.Name, pi, h.BaseOffset, err)
			}
			next = min(last, stable)
		}
	}
	return out, next, stats, nil
}

// committedField is how a read of topic finds a record's subject in a
// field of its value: with the topic's tenant's committed registry.
func (f *Subjects) committedField(topic string) subject.FieldFunc {
	if f.CommittedSubjectOfField == nil {
		return nil
	}
	tenant, _ := core.SplitTenant(topic)
	return func(value []byte, path []string) ([]byte, bool, error) {
		return f.CommittedSubjectOfField(tenant, value, path)
	}
}
