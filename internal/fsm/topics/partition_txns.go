package topics

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
)

// The transactional side of a partition log (KIP-98), part of the topics
// module as Kafka keeps it in the log's ProducerStateManager: the
// transaction markers written to it, its last stable offset and its
// aborted transactions, for read_committed readers. The transactions
// themselves (transactional ids, their partitions and offsets, EndTxn)
// are the producers module's (txns.go), which asks for the markers.
//
// The aborted transactions' keys in the metadata store:
//
//	a/<topic>\x00<partition u32><last offset u64><pid u64>  an aborted transaction

// WriteMarker appends a transaction marker for producer pid to p (the
// producers module asks for it when a transaction ends) and closes its
// transaction there: the last stable offset moves past it, and
// an abort is remembered for read_committed readers.
func (f *Topics) WriteMarker(p *Partition, pid int64, epoch int16, commit bool) {
	st := p.ProducerStates[pid]
	if st == nil {
		st = &producerState{TxnFirst: -1}
		p.ProducerStates[pid] = st
	}
	at := p.Next
	b := record.MarkerBatch(pid, epoch, commit, 0, f.logAppendTime())
	record.SetBaseOffset(b, at)
	if err := p.Log.Append(b, f.BlockTime); err != nil {
		// As in produce: the log is cut back at the next start; until
		// then this partition refuses writes past the failure.
		f.opts.Logger.Error("appending a transaction marker", "topic", p.Topic, "partition", p.Index, "err", err)
		return
	}
	if t := f.ByName[p.Topic]; t != nil && int(p.Index) < len(t.Partitions) && t.Partitions[p.Index] == p {
		f.proveAppend(t, p, at, b)
		for _, h := range f.hooks.MarkerWritten.Hooks {
			h.Fn(f, t, p, pid, commit, st.TxnFirst, at)
		}
	}
	p.Next++
	if !commit && st.TxnFirst >= 0 {
		a := AbortedTxn{ProducerID: pid, FirstOffset: st.TxnFirst, LastOffset: at}
		p.aborted = append(p.aborted, a)
		p.abortedAdded = append(p.abortedAdded, a)
	}
	if epoch > st.Epoch {
		st.Epoch, st.Entries = epoch, nil
	}
	st.TxnFirst = -1
	st.LastTimeMs = f.BlockTime
	p.dirtyProducers[pid] = true
	f.dirtyParts[p] = true
}

// AbortedTxn is an aborted transaction in one partition: its producer, its
// first offset there and the offset of its abort marker.
type AbortedTxn struct {
	ProducerID              int64
	FirstOffset, LastOffset int64
}

// AbortedTxns returns the committed aborted transactions of the partition
// that overlap [from, to): those a read_committed reader of that range must
// skip.
func (p *Partition) AbortedTxns(from, to int64) []AbortedTxn {
	v := p.abortedView.Load()
	if v == nil {
		return nil
	}
	var out []AbortedTxn
	for _, a := range *v {
		if a.LastOffset >= from && a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// InAbortedTxn reports whether a record of producer pid at offset off
// belongs to a committed aborted transaction (pid -1: no producer, never).
func (p *Partition) InAbortedTxn(pid, off int64) bool {
	if pid < 0 {
		return false
	}
	for _, a := range p.AbortedTxns(off, off+1) {
		if a.ProducerID == pid && a.FirstOffset <= off && off <= a.LastOffset {
			return true
		}
	}
	return false
}

// LastStableOffset is the offset below which every transaction is decided:
// read_committed readers see only what is below it.
func (p *Partition) LastStableOffset() int64 { return p.stable.Load() }

// stableOffset computes the last stable offset from the applier's state.
func (p *Partition) stableOffset() int64 {
	lso := p.Next
	for _, s := range p.ProducerStates {
		if s.TxnFirst >= 0 {
			lso = min(lso, s.TxnFirst)
		}
	}
	return lso
}

func abortedKey(topic string, part int32, a AbortedTxn) []byte {
	k := append(abortedPrefix(topic), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(k[len(k)-4:], uint32(part))
	k = binary.BigEndian.AppendUint64(k, uint64(a.LastOffset))
	return binary.BigEndian.AppendUint64(k, uint64(a.ProducerID))
}

func abortedPrefix(topic string) []byte { return append(append([]byte("a/"), topic...), 0) }

// persistAborted adds the aborted transactions the block added to or
// dropped from each partition to the state batch.
func (f *Topics) persistAborted(b *core.StateBatch) {
	for p := range f.dirtyParts {
		for _, a := range p.abortedAdded {
			b.Set(abortedKey(p.Topic, p.Index, a), binary.BigEndian.AppendUint64(nil, uint64(a.FirstOffset)))
		}
		for _, a := range p.abortedDropped {
			b.Delete(abortedKey(p.Topic, p.Index, a))
		}
	}
}

// loadAborted reads every partition's aborted transactions, then
// publishes every partition's producers and transaction state: its last
// load, after the producer states (rank 100) and the transactions (110).
func (f *Topics) loadAborted() error {
	err := f.Store.Scan([]byte("a/"), func(k, v []byte) error {
		topic, part, a, err := DecodeAborted(k, v)
		if err != nil {
			return err
		}
		t := f.ByName[topic]
		if t == nil || int(part) >= len(t.Partitions) {
			return nil
		}
		p := t.Partitions[part]
		p.aborted = append(p.aborted, a)
		return nil
	})
	if err != nil {
		return err
	}
	for _, name := range SortedNames(f.ByName) {
		for _, p := range f.ByName[name].Partitions {
			p.publishProducers()
			p.publishTxnState()
		}
	}
	return nil
}

// DecodeAborted reads an a/ entry (abortedKey): the aborted transaction's
// topic and partition, and the transaction.
//
//	key   a/<topic>\x00<partition u32><last offset u64><pid u64>
//	value u64 first offset
func DecodeAborted(k, v []byte) (string, int32, AbortedTxn, error) {
	rest, ok := bytes.CutPrefix(k, []byte("a/"))
	if !ok || len(rest) < 1+4+16 || rest[len(rest)-21] != 0 || len(v) != 8 {
		return "", 0, AbortedTxn{}, fmt.Errorf("stele/fsm: bad aborted-transaction key %q", k)
	}
	n := len(rest)
	a := AbortedTxn{LastOffset: int64(binary.BigEndian.Uint64(rest[n-16:])),
		ProducerID: int64(binary.BigEndian.Uint64(rest[n-8:])), FirstOffset: int64(binary.BigEndian.Uint64(v))}
	return string(rest[:n-21]), int32(binary.BigEndian.Uint32(rest[n-20:])), a, nil
}

// trimAborted forgets, in housekeeping, aborted transactions wholly below
// the log start offset.
func (p *Partition) trimAborted() bool {
	i := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].LastOffset >= p.Start })
	if i == 0 {
		return false
	}
	p.abortedDropped = append(p.abortedDropped, p.aborted[:i]...)
	p.aborted = slices.Clone(p.aborted[i:])
	return true
}

// publishTxnState publishes the partition's last stable offset and
// aborted transactions.
func (p *Partition) publishTxnState() {
	p.stable.Store(p.stableOffset())
	if p.abortedView.Load() == nil || len(p.abortedAdded) > 0 || len(p.abortedDropped) > 0 {
		v := slices.Clone(p.aborted)
		p.abortedView.Store(&v)
	}
	p.abortedAdded, p.abortedDropped = p.abortedAdded[:0], p.abortedDropped[:0]
}

// registerPartitionTxns registers the step of the partitions' aborted
// transactions (RegisterTopics calls it).
func registerPartitionTxns(r *core.Registry) {
	// After the transactions (rank 110), where they were written before
	// this state moved to the topics module.
	core.RegisterModuleStep(r, topicsOf, core.ModuleStep[*Topics]{Rank: 115, Name: "partitions' aborted transactions", Module: ModTopics,
		Load:  (*Topics).loadAborted,
		Stage: func(f *Topics, b *core.StateBatch) error { f.persistAborted(b); return nil }})
}

// StableNow is the partition's last stable offset in the apply, before the
// block commits (LastStableOffset is the committed one): the first offset
// of its oldest open transaction, else its end. Unless without >= 0, that
// producer's transaction is left out (the one whose marker is being
// written: MarkerWritten's hooks run before it is closed).
func (p *Partition) StableNow(without int64) int64 {
	lso := p.Next
	for pid, s := range p.ProducerStates { // a minimum: the order does not matter
		if s.TxnFirst >= 0 && pid != without {
			lso = min(lso, s.TxnFirst)
		}
	}
	return lso
}

// AbortedNow reports whether the record at off, of producer pid, is in a
// transaction aborted before now in the apply (InAbortedTxn reads the
// committed ones).
func (p *Partition) AbortedNow(pid, off int64) bool {
	if pid < 0 {
		return false
	}
	i := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].LastOffset >= off })
	for _, a := range p.aborted[i:] {
		if a.ProducerID == pid && a.FirstOffset <= off && off <= a.LastOffset {
			return true
		}
	}
	return false
}
