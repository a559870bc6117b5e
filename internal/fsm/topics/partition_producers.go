package topics

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
)

// The idempotent producers' state of a partition log (KIP-98), part of the
// topics module as Kafka keeps it in the log's ProducerStateManager: every
// partition remembers, per producer, its epoch and its last five
// batches' sequence ranges. A batch that repeats one of them is a retry:
// it is not written again and is answered with the offset it got the
// first time (and the timestamp it was stored with, its log_append_time on
// a LogAppendTime topic). A batch that skips ahead gets OUT_OF_ORDER_SEQUENCE_NUMBER;
// one from an older epoch INVALID_PRODUCER_EPOCH. The state is replicated
// like everything else, so a retry sent to another broker after a crash
// is recognised there too. Producer ids themselves are handed out by the
// producers module (producers.go).

// ProducerIDExpirationMs is producer.id.expiration.ms: a producer that has
// not written to a partition for this long (block time) is forgotten
// there, as in Kafka.
const ProducerIDExpirationMs = 24 * 60 * 60 * 1000

// producerWindow is how many recent batches per producer and partition are
// remembered for duplicate detection (Kafka's, and clients' maximum of
// in-flight requests).
const producerWindow = 5

// seqEntry is one remembered batch: its sequence range [First, Next), the
// offset it was written at and its timestamp as stored (its MaxTimestamp,
// the block time on a LogAppendTime topic), which a retry is answered with
// as log_append_time, as Kafka's BatchMetadata keeps it.
type seqEntry struct {
	First, Next int32
	Offset      int64
	Timestamp   int64
}

// producerState is one producer's state in one partition.
type producerState struct {
	Epoch int16
	// Entries are the last batches, oldest first.
	Entries []seqEntry
	// LastTimeMs is the block time of its last write here.
	LastTimeMs int64
	// TxnFirst is the offset of the producer's first batch here in its
	// ongoing transaction; -1 when none is open here.
	TxnFirst int64
}

func (s *producerState) clone() *producerState {
	c := *s
	c.Entries = append([]seqEntry(nil), s.Entries...)
	return &c
}

// nextSeq adds n records to a sequence, wrapping as Kafka's do.
func nextSeq(first, n int32) int32 {
	return int32((int64(first) + int64(n)) % math.MaxInt32)
}

// checkSequence decides one batch of an idempotent producer against its
// state in the partition (nil: none yet). It returns the error code, or
// whether the batch is a duplicate of an earlier one and that one's entry.
func checkSequence(st *producerState, h record.Header, neverWritten bool) (code int16, dup bool, first seqEntry) {
	next := nextSeq(h.BaseSequence, h.NumRecords)
	switch {
	case h.ProducerEpoch < 0 || h.BaseSequence < 0:
		return kerr.InvalidRecord.Code, false, seqEntry{}
	case st == nil || (len(st.Entries) == 0 && h.ProducerEpoch == st.Epoch):
		// Kafka 2.5+ takes any first sequence from a producer it has no
		// state for, except in a partition that was never written to
		// (KAFKA-15591: two in-flight batches to a new partition could
		// otherwise land out of order, the first lost without an error).
		if neverWritten && h.BaseSequence != 0 {
			return kerr.OutOfOrderSequenceNumber.Code, false, seqEntry{}
		}
		return 0, false, seqEntry{}
	case h.ProducerEpoch < st.Epoch:
		return kerr.InvalidProducerEpoch.Code, false, seqEntry{}
	case h.ProducerEpoch > st.Epoch:
		if h.BaseSequence != 0 {
			return kerr.OutOfOrderSequenceNumber.Code, false, seqEntry{}
		}
		return 0, false, seqEntry{}
	}
	for _, e := range st.Entries {
		if e.First == h.BaseSequence && e.Next == next {
			return 0, true, e
		}
	}
	if last := st.Entries[len(st.Entries)-1]; h.BaseSequence != last.Next {
		return kerr.OutOfOrderSequenceNumber.Code, false, seqEntry{}
	}
	return 0, false, seqEntry{}
}

// isRetry reports whether the batch of header h, from an idempotent
// producer, is one p holds already: a retry, answered with the offset the
// batch got the first time and not written again.
func (p *Partition) isRetry(h record.Header) bool {
	st := p.ProducerStates[h.ProducerID]
	if h.ProducerID < 0 || st == nil {
		return false
	}
	_, dup, _ := checkSequence(st, h, false)
	return dup
}

// record remembers a batch appended at offset with timestamp ts (its
// MaxTimestamp as stored).
func (s *producerState) record(h record.Header, offset, ts, now int64) {
	if h.ProducerEpoch != s.Epoch {
		s.Epoch, s.Entries = h.ProducerEpoch, nil
	}
	s.Entries = append(s.Entries, seqEntry{First: h.BaseSequence, Next: nextSeq(h.BaseSequence, h.NumRecords), Offset: offset, Timestamp: ts})
	if len(s.Entries) > producerWindow {
		s.Entries = s.Entries[len(s.Entries)-producerWindow:]
	}
	s.LastTimeMs = now
}

// ProducerKey is a partition's producer state's key in the store.
func ProducerKey(topic string, partition int32, pid int64) []byte {
	k := append(producerPrefix(topic), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(k[len(k)-4:], uint32(partition))
	return binary.BigEndian.AppendUint64(k, uint64(pid))
}

func producerPrefix(topic string) []byte { return append(append([]byte("s/"), topic...), 0) }

func EncodeProducer(s *producerState) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I16(s.Epoch)
	w.I64(s.LastTimeMs)
	w.I64(s.TxnFirst)
	w.Count(len(s.Entries))
	for _, e := range s.Entries {
		w.I32(e.First)
		w.I32(e.Next)
		w.I64(e.Offset)
		w.I64(e.Timestamp)
	}
	return w.B
}

func DecodeProducer(v []byte) (*producerState, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: producer state format %d not supported", ver)
	}
	s := &producerState{Epoch: r.I16(), LastTimeMs: r.I64(), TxnFirst: r.I64()}
	for i, n := 0, r.Count(24); i < n; i++ {
		s.Entries = append(s.Entries, seqEntry{First: r.I32(), Next: r.I32(), Offset: r.I64(), Timestamp: r.I64()})
	}
	return s, r.Done()
}

// persistProducers writes the producer states the block changed.
func (f *Topics) persistProducers(b *core.StateBatch) {
	for p := range f.dirtyParts {
		for pid := range p.dirtyProducers {
			if s := p.ProducerStates[pid]; s != nil {
				b.Set(ProducerKey(p.Topic, p.Index, pid), EncodeProducer(s))
			} else {
				b.Delete(ProducerKey(p.Topic, p.Index, pid))
			}
		}
	}
}

// loadProducers reads every partition's producer states.
func (f *Topics) loadProducers() error {
	return f.Store.Scan([]byte("s/"), func(k, v []byte) error {
		if len(k) < 2+1+4+8 {
			return fmt.Errorf("stele/fsm: bad producer key %q", k)
		}
		topic := string(k[2 : len(k)-13])
		part := int32(binary.BigEndian.Uint32(k[len(k)-12:]))
		pid := int64(binary.BigEndian.Uint64(k[len(k)-8:]))
		t := f.ByName[topic]
		if t == nil || int(part) >= len(t.Partitions) {
			return nil // its topic was deleted; the deletion removes it
		}
		s, err := DecodeProducer(v)
		if err != nil {
			return fmt.Errorf("stele/fsm: producer %d of %s-%d: %w", pid, topic, part, err)
		}
		p := t.Partitions[part]
		p.ProducerStates[pid] = s
		return nil
	})
}

// expireProducers forgets, in housekeeping, producers idle for
// ProducerIDExpirationMs in a partition.
func (f *Topics) expireProducers(p *Partition) (changes []core.Change) {
	pids := make([]int64, 0, len(p.ProducerStates))
	for pid := range p.ProducerStates {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		if s := p.ProducerStates[pid]; s.TxnFirst < 0 && s.LastTimeMs+ProducerIDExpirationMs <= f.BlockTime {
			delete(p.ProducerStates, pid)
			p.dirtyProducers[pid] = true
			f.dirtyParts[p] = true
			changes = append(changes, core.Change{Kind: core.ChangeProducerExpired, Name: p.Topic, A: int64(p.Index), B: pid})
		}
	}
	return changes
}

// ProducerInfo describes one producer's state in a partition
// (DescribeProducers).
type ProducerInfo struct {
	ProducerID   int64
	Epoch        int16
	LastSequence int32
	LastTimeMs   int64
	// TxnStartOffset is the first offset of its open transaction here, -1
	// when none.
	TxnStartOffset int64
}

// Producers returns the committed producer states of the partition,
// sorted by producer id.
func (p *Partition) Producers() []ProducerInfo {
	v := p.producersView.Load()
	if v == nil {
		return nil
	}
	return *v
}

// publishProducers publishes the partition's producer states.
func (p *Partition) publishProducers() {
	out := make([]ProducerInfo, 0, len(p.ProducerStates))
	for pid, s := range p.ProducerStates {
		last := int32(-1)
		if n := len(s.Entries); n > 0 {
			last = s.Entries[n-1].Next - 1
			if last < 0 {
				last = math.MaxInt32 - 1
			}
		}
		out = append(out, ProducerInfo{ProducerID: pid, Epoch: s.Epoch, LastSequence: last, LastTimeMs: s.LastTimeMs, TxnStartOffset: s.TxnFirst})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	p.producersView.Store(&out)
	clear(p.dirtyProducers)
}

// registerPartitionProducers registers the step of the partitions'
// producer states (RegisterTopics calls it).
func registerPartitionProducers(r *core.Registry) {
	core.RegisterModuleStep(r, topicsOf, core.ModuleStep[*Topics]{Rank: 100, Name: "partitions' producer states", Module: ModTopics,
		Load:  (*Topics).loadProducers,
		Stage: func(f *Topics, b *core.StateBatch) error { f.persistProducers(b); return nil }})
}
