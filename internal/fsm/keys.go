package fsm

// Key streams (issue 8, DESIGN.md §5): every record with a key is indexed
// in the deterministic apply, so that all events of one key are found with
// an index lookup instead of a scan of the partition, on every broker
// alike. The index lives in the metadata store, written in the same synced
// batch as the rest of a block's state (so it is never ahead of or behind
// the logs it points into, and snapshots carry it: they ship every key of
// the store):
//
//	k/<topic id [16]><escaped key>\x00\x01<partition u32><offset u64>
//
// The key is escaped so that a key's entries form one prefix and keys sort
// as their bytes do: 0x00 becomes 0x00 0xff, and 0x00 0x01 ends it (the
// order-preserving escape of CockroachDB's key encoding). Entries of a
// deleted topic go with it; entries pointing below a partition's log
// start (retention, DeleteRecords) or at records compaction removed are
// skipped when read.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/stele-io/stele/internal/record"
)

// ErrUnknownTopic: KeyEvents was asked about a topic that does not exist.
var ErrUnknownTopic = errors.New("stele/fsm: unknown topic")

// keyEntry is one indexed record, staged until the block's Commit.
type keyEntry struct {
	topic     *Topic
	partition int32
	key       []byte
	offset    int64
}

func keyTopicPrefix(id TopicID) []byte { return append([]byte("k/"), id[:]...) }

// keyPrefix is the prefix of every entry of key in the topic.
func keyPrefix(id TopicID, key []byte) []byte {
	k := keyTopicPrefix(id)
	for _, c := range key {
		if c == 0 {
			k = append(k, 0, 0xff)
			continue
		}
		k = append(k, c)
	}
	return append(k, 0, 1)
}

func keyEntryKey(e keyEntry) []byte {
	k := keyPrefix(e.topic.ID, e.key)
	k = binary.BigEndian.AppendUint32(k, uint32(e.partition))
	return binary.BigEndian.AppendUint64(k, uint64(e.offset))
}

// KeyEvent is one record of a key's stream.
type KeyEvent struct {
	Partition int32
	Offset    int64
	Timestamp int64 // ms
	Key       []byte
	Value     []byte // nil for a tombstone
	Headers   []record.RecordHeader
}

// KeyEvents returns up to limit committed records of key in topic, from
// offset from on, in order of partition and offset (a key written with
// Kafka's default partitioner lives in one partition, whose offsets are
// its versions). Records of aborted transactions, and of transactions not
// yet decided, are left out, as a read_committed consumer leaves them out.
// A topic that does not exist gives ErrUnknownTopic.
func (f *FSM) KeyEvents(topic string, key []byte, from int64, limit int) ([]KeyEvent, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	prefix := keyPrefix(t.ID, key)
	type ref struct {
		p   int32
		off int64
	}
	var refs []ref
	err := f.store.Scan(prefix, func(k, _ []byte) error {
		rest := k[len(prefix):]
		if len(rest) != 12 {
			return fmt.Errorf("stele/fsm: key index entry %x is malformed", k)
		}
		p, off := int32(binary.BigEndian.Uint32(rest)), int64(binary.BigEndian.Uint64(rest[4:]))
		if off >= from {
			refs = append(refs, ref{p, off})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []KeyEvent
	var cached []byte // the batch that held the last record read
	var cachedHead record.Header
	for _, r := range refs {
		if len(out) >= limit {
			break
		}
		if int(r.p) >= len(t.Partitions) {
			continue
		}
		p := t.Partitions[r.p]
		if r.off < p.LogStartOffset() || r.off >= p.LastStableOffset() {
			continue // gone, or not decided yet (or newer than this view)
		}
		if cached == nil || cachedHead.BaseOffset > r.off || cachedHead.LastOffset() < r.off {
			data, err := p.Read(r.off, 1)
			if err != nil {
				return nil, err
			}
			batches, err := record.Split(data)
			if err != nil || len(batches) == 0 {
				return nil, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %v", topic, r.p, r.off, err)
			}
			cached = batches[0]
			if cachedHead, err = record.ParseHeader(cached); err != nil {
				return nil, err
			}
		}
		if cachedHead.Control() || aborted(p, cachedHead.ProducerID, r.off) {
			continue
		}
		_, recs, err := record.Records(cached)
		if err != nil {
			return nil, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", topic, r.p, r.off, err)
		}
		for _, rec := range recs {
			if rec.Offset != r.off || !bytes.Equal(rec.Key, key) {
				continue // compaction removed it, or another key shares the batch
			}
			ev := KeyEvent{Partition: r.p, Offset: rec.Offset, Timestamp: rec.Timestamp, Key: bytes.Clone(rec.Key), Value: cloneNil(rec.Value)}
			for _, hd := range rec.Headers {
				ev.Headers = append(ev.Headers, record.RecordHeader{Key: hd.Key, Value: cloneNil(hd.Value)})
			}
			out = append(out, ev)
		}
	}
	return out, nil
}

// aborted reports whether a record of producer pid at offset off belongs to
// an aborted transaction.
func aborted(p *Partition, pid int64, off int64) bool {
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

func cloneNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}
