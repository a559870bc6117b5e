// Package keys is the state machine's keys module: the key stream index
// (each key's events in a partition, optimistic concurrency on a record's
// expected version, key snapshots) and the table leaves derived from the
// logs (tables.go: each key's latest version of a table topic, under the
// app hash, read and proven by tables_read.go).
//
// It uses the topics module below it (its types, and the hook points it
// registers at: a produce's expected versions and appended batches, a
// committed transaction's markers, a trimmed or compacted log, a changed
// config, a dropped topic), imports no module above it, and works on
// Index, its part of a state machine, which the application (package fsm)
// makes with NewIndex and hands over through its KeysModule method
// (keysOf).
package keys

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
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
)

// KeyEntry is one indexed record, staged until the block's Commit.
type KeyEntry struct {
	Topic     *topics.Topic
	Partition int32
	Key       []byte
	Offset    int64
	Pid       int64 // the batch's producer id (-1: none), to skip aborted records
	Snapshot  bool  // the record carries SnapshotHeader
}

// keyRef names a key in one partition.
type keyRef struct {
	topic     *topics.Topic
	partition int32
	key       string
}

// ModKeys is the keys module's name.
const ModKeys core.Module = "keys"

// Index is the keys module of a state machine: the core's machine it runs
// on, the topics module below it, and its state.
type Index struct {
	*core.Machine
	*topics.Topics
	keysState
}

// NewIndex is the keys module of the machine m, above the topics module t.
func NewIndex(m *core.Machine, t *topics.Topics) *Index { return &Index{Machine: m, Topics: t} }

// keysOf is the keys module of the machine m.
func keysOf(m *core.Machine) *Index {
	return m.App.(interface{ KeysModule() *Index }).KeysModule()
}

// keysState is the keys module's part of the state machine (embedded in
// FSM): the block's key stream entries and table changes, staged at its
// end and dropped at Commit.
type keysState struct {
	keysAdded []KeyEntry       // key stream entries of the block
	keyStaged map[keyRef][]int // keysAdded by key, built when first needed in a block
	tables    tableChanges     // the block's changes to the table leaves (tables.go)
}

// stageKey adds e to the block's key stream entries.
func (f *Index) stageKey(e KeyEntry) {
	f.keysAdded = append(f.keysAdded, e)
	if f.keyStaged != nil {
		r := keyRef{e.Topic, e.Partition, string(e.Key)}
		f.keyStaged[r] = append(f.keyStaged[r], len(f.keysAdded)-1)
	}
}

// EntryValue is what an index entry holds: nothing for a record outside
// a producer's batch that is no snapshot; otherwise a flags byte (1: a
// snapshot record), then the batch's producer id when it has one.
func EntryValue(e KeyEntry) []byte {
	if e.Pid < 0 && !e.Snapshot {
		return nil
	}
	var flags byte
	if e.Snapshot {
		flags = 1
	}
	v := []byte{flags}
	if e.Pid >= 0 {
		v = binary.BigEndian.AppendUint64(v, uint64(e.Pid))
	}
	return v
}

// ParseEntryValue reads entryValue's encoding.
func ParseEntryValue(v []byte) (pid int64, snapshot bool, err error) {
	switch len(v) {
	case 0:
		return -1, false, nil
	case 1:
		return -1, v[0]&1 != 0, nil
	case 9:
		return int64(binary.BigEndian.Uint64(v[1:])), v[0]&1 != 0, nil
	}
	return 0, false, fmt.Errorf("stele/fsm: key index entry value %x is malformed", v)
}

// latestVersion is the offset of the latest record of key in partition p
// of t that is not in an aborted transaction (a record of a transaction
// not decided yet counts: it holds the key), or -1 when there is none:
// the version an optimistic-concurrency append states it expects. The
// records of this block come first, then the index.
func (f *Index) latestVersion(t *topics.Topic, p *topics.Partition, key []byte) (int64, error) {
	if f.keyStaged == nil {
		f.keyStaged = map[keyRef][]int{}
		for i, e := range f.keysAdded {
			r := keyRef{e.Topic, e.Partition, string(e.Key)}
			f.keyStaged[r] = append(f.keyStaged[r], i)
		}
	}
	staged := f.keyStaged[keyRef{t, p.Index, string(key)}]
	for i := len(staged) - 1; i >= 0; i-- {
		if e := f.keysAdded[staged[i]]; !p.InAbortedTxn(e.Pid, e.Offset) {
			return e.Offset, nil
		}
	}
	prefix := binary.BigEndian.AppendUint32(KeyPrefix(t.ID, key), uint32(p.Index))
	latest := int64(-1)
	err := f.Store.ScanReverse(prefix, func(k, v []byte) error {
		if len(k) != len(prefix)+8 {
			return fmt.Errorf("stele/fsm: key index entry %x is malformed", k)
		}
		off := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		pid, _, err := ParseEntryValue(v)
		if err != nil {
			return err
		}
		if p.InAbortedTxn(pid, off) {
			return nil
		}
		latest = off
		return core.ErrStopScan
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return 0, err
	}
	return latest, nil
}

// parseEntrySuffix reads the partition and offset that end an index entry
// k after its key's prefix.
func parseEntrySuffix(k, rest []byte) (int32, int64, error) {
	if len(rest) != 12 {
		return 0, 0, fmt.Errorf("stele/fsm: key index entry %x is malformed", k)
	}
	return int32(binary.BigEndian.Uint32(rest)), int64(binary.BigEndian.Uint64(rest[4:])), nil
}

func KeyTopicPrefix(id core.TopicID) []byte { return append([]byte("k/"), id[:]...) }

// KeyPrefix is the prefix of every entry of key in the topic.
func KeyPrefix(id core.TopicID, key []byte) []byte { return appendKeyPrefix(nil, id, key) }

// appendKeyPrefix appends keyPrefix(id, key) to dst.
func appendKeyPrefix(dst []byte, id core.TopicID, key []byte) []byte {
	dst = append(append(dst, "k/"...), id[:]...)
	return append(appendEscapedKey(dst, key), 0, 1)
}

// AppendKeyEntryKey appends e's entry key to dst: its key's prefix, then
// partition and offset.
func AppendKeyEntryKey(dst []byte, e KeyEntry) []byte {
	dst = appendKeyPrefix(dst, e.Topic.ID, e.Key)
	dst = binary.BigEndian.AppendUint32(dst, uint32(e.Partition))
	return binary.BigEndian.AppendUint64(dst, uint64(e.Offset))
}

// KeyEntryKeyLen is the length of e's entry key: "k/", the topic id, the
// key with each zero byte escaped to two, the terminator, partition and
// offset.
func KeyEntryKeyLen(e KeyEntry) int {
	return len("k/") + len(e.Topic.ID) + len(e.Key) + bytes.Count(e.Key, []byte{0}) + 2 + 4 + 8
}

// KeyEvent is one record of a key's stream.
type KeyEvent struct {
	Partition int32
	Offset    int64
	Timestamp int64 // ms
	Key       []byte
	Value     []byte // nil for a tombstone
	Headers   []record.RecordHeader
	Snapshot  bool // the record carries SnapshotHeader: it summarises the key up to itself
}

// KeyEvents returns up to limit committed records of key in topic, from
// offset from on, in order of partition and offset (a key written with
// Kafka's default partitioner lives in one partition, whose offsets are
// its versions). Records of aborted transactions, and of transactions not
// yet decided, are left out, as a read_committed consumer leaves them out.
// A topic that does not exist gives ErrUnknownTopic. The index is walked
// from offset from in each partition and no further than the limit.
func (f *Index) KeyEvents(topic string, key []byte, from int64, limit int) ([]KeyEvent, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	prefix := KeyPrefix(t.ID, key)
	var out []KeyEvent
	var c batchCache
	err := f.Store.Seek(prefix, storage.PrefixEnd(prefix), func(k, _ []byte) ([]byte, error) {
		pi, off, err := parseEntrySuffix(k, k[len(prefix):])
		if err != nil {
			return nil, err
		}
		if off < from { // to this partition's first entry at from
			return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(bytes.Clone(prefix), uint32(pi)), uint64(from)), nil
		}
		ev, ok, err := c.event(t, pi, off, key)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, ev)
		}
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

// KeyLatest returns the latest committed record of key in topic (as
// KeyEvents would list it last; a tombstone too, with a nil Value), or
// false when the key has none. When the key has records in several
// partitions, the latest is the one with the greatest timestamp (then
// partition): partitions have no order between them. A topic that does not
// exist gives ErrUnknownTopic.
func (f *Index) KeyLatest(topic string, key []byte) (KeyEvent, bool, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return KeyEvent{}, false, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	var best KeyEvent
	found := false
	for pi := range t.Partitions {
		prefix := binary.BigEndian.AppendUint32(KeyPrefix(t.ID, key), uint32(pi))
		var c batchCache
		err := f.Store.ScanReverse(prefix, func(k, _ []byte) error {
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("stele/fsm: malformed key index entry %x", k)
			}
			ev, ok, err := c.event(t, int32(pi), int64(binary.BigEndian.Uint64(k[len(prefix):])), key)
			if err != nil || !ok {
				return err
			}
			if !found || ev.Timestamp > best.Timestamp || ev.Timestamp == best.Timestamp && ev.Partition > best.Partition {
				best, found = ev, true
			}
			return core.ErrStopScan
		})
		if err != nil && !errors.Is(err, core.ErrStopScan) {
			return KeyEvent{}, false, err
		}
	}
	return best, found, nil
}

// batchCache reads indexed records, keeping the batch of the last one.
type batchCache struct {
	batch []byte
	head  record.Header
}

// event reads the record of key at offset off of partition pi, if it is
// committed, readable (not below the log start nor removed by compaction)
// and not of an aborted transaction.
func (c *batchCache) event(t *topics.TopicView, pi int32, off int64, key []byte) (KeyEvent, bool, error) {
	if int(pi) >= len(t.Partitions) {
		return KeyEvent{}, false, nil
	}
	p := t.Partitions[pi]
	if off < p.LogStartOffset() || off >= p.LastStableOffset() {
		return KeyEvent{}, false, nil // gone, or not decided yet (or newer than this view)
	}
	if c.batch == nil || c.head.BaseOffset > off || c.head.LastOffset() < off {
		data, err := p.Read(off, 1)
		if err != nil {
			return KeyEvent{}, false, err
		}
		batches, err := record.Split(data)
		if err != nil || len(batches) == 0 {
			return KeyEvent{}, false, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %v", t.Name, pi, off, err)
		}
		c.batch = batches[0]
		if c.head, err = record.ParseHeader(c.batch); err != nil {
			return KeyEvent{}, false, err
		}
	}
	if c.head.Control() || p.InAbortedTxn(c.head.ProducerID, off) {
		return KeyEvent{}, false, nil
	}
	var ev KeyEvent
	found := false
	_, err := record.Each(c.batch, func(rec *record.Record) error {
		if rec.Offset < off {
			return nil
		}
		if rec.Offset == off && bytes.Equal(rec.Key, key) {
			ev = KeyEvent{Partition: pi, Offset: rec.Offset, Timestamp: rec.Timestamp, Key: bytes.Clone(rec.Key), Value: cloneNil(rec.Value)}
			for _, hd := range rec.Headers {
				ev.Headers = append(ev.Headers, record.RecordHeader{Key: hd.Key, Value: cloneNil(hd.Value)})
				ev.Snapshot = ev.Snapshot || hd.Key == topics.SnapshotHeader
			}
			found = true
		}
		// Past it: found, or removed by compaction.
		return core.ErrStopScan
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return KeyEvent{}, false, fmt.Errorf("stele/fsm: %s-%d: reading offset %d: %w", t.Name, pi, off, err)
	}
	return ev, found, nil
}

func cloneNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// checkVersions checks, in offset order, every expectation of the batches
// about to be written at offsets (those not dup): a record's key must be
// at the version it states, counting the records before it. Any failure
// refuses the whole produce, the record listed in its RecordErrors (bases
// are the indexes of the batches' first records in the record set).
func (f *Index) checkVersions(t *topics.Topic, p *topics.Partition, keys [][]topics.KeyAt, bases []int32, offsets []int64, dup []bool) core.Result {
	latest := map[string]int64{} // versions the batches before have made
	for i, ks := range keys {
		if dup[i] {
			continue
		}
		for _, k := range ks {
			v, ok := latest[string(k.Key)]
			if !ok {
				var err error
				if v, err = f.latestVersion(t, p, k.Key); err != nil {
					return f.LocalFault("reading the latest version of a key of %s-%d: %w", t.Name, p.Index, err)
				}
			}
			if k.Expect != topics.NoExpectation && k.Expect != v {
				now := fmt.Sprintf("its latest is version %d", v)
				if v < 0 {
					now = "it has no event yet"
				}
				want := fmt.Sprintf("version %d", k.Expect)
				if k.Expect < 0 {
					want = "no event yet"
				}
				r := core.Fail(kerr.InvalidRecord.Code, fmt.Sprintf("version conflict on key %q in %s-%d: the record expects %s, but %s; nothing of the batch was written",
					k.Key, t.Name, p.Index, want, now))
				r.VersionConflict, r.KeyVersion = true, v
				r.RecordErrors = []core.RecordError{{Index: bases[i] + k.Delta, Message: fmt.Sprintf("version conflict on key %q: the record expects %s, but %s", k.Key, want, now)}}
				return r
			}
			latest[string(k.Key)] = offsets[i] + int64(k.Delta)
		}
	}
	return core.Result{}
}

// escapeKey is the escaped form of key without its terminator: the
// escaped form of every key starting with key starts with it.
func escapeKey(key []byte) []byte { return appendEscapedKey(nil, key) }

// appendEscapedKey appends key, escaped as escapeKey does, to dst.
func appendEscapedKey(dst, key []byte) []byte {
	for {
		i := bytes.IndexByte(key, 0)
		if i < 0 {
			return append(dst, key...)
		}
		dst = append(append(dst, key[:i]...), 0, 0xff)
		key = key[i+1:]
	}
}

// unescapeKey reads an escaped key and its terminator from the start of b
// and returns the key and the rest of b.
func unescapeKey(b []byte) (key, rest []byte, err error) {
	key = []byte{}
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			key = append(key, b[i])
			continue
		}
		if i+1 >= len(b) {
			break
		}
		switch b[i+1] {
		case 0xff:
			key = append(key, 0)
			i++
		case 1:
			return key, b[i+2:], nil
		default:
			return nil, nil, fmt.Errorf("stele/fsm: key index entry has a bad escape %x", b[i:i+2])
		}
	}
	return nil, nil, fmt.Errorf("stele/fsm: key index entry %x has no key terminator", b)
}

// Keys lists, in byte order, up to limit keys of topic that start with
// prefix and sort after after (nil: from the first), each with at least
// one record still in its partition's log (not yet removed by retention
// or DeleteRecords). A topic that does not exist gives ErrUnknownTopic.
func (f *Index) Keys(topic string, prefix, after []byte, limit int) ([][]byte, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	head := KeyTopicPrefix(t.ID)
	lower := append(append([]byte{}, head...), escapeKey(prefix)...)
	upper := storage.PrefixEnd(lower)
	if after != nil {
		if past := storage.PrefixEnd(KeyPrefix(t.ID, after)); bytes.Compare(past, lower) > 0 {
			lower = past
		}
	}
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	var out [][]byte
	err := f.Store.Seek(lower, upper, func(k, _ []byte) ([]byte, error) {
		key, rest, err := unescapeKey(k[len(head):])
		if err != nil {
			return nil, err
		}
		p, off, err := parseEntrySuffix(k, rest)
		if err != nil {
			return nil, err
		}
		if int(p) >= len(t.Partitions) || off < t.Partitions[p].LogStartOffset() || off >= t.Partitions[p].HighWatermark() {
			return nil, nil // gone (or newer than this view): look at the key's next entry
		}
		out = append(out, key)
		if len(out) >= limit {
			return nil, core.ErrStopScan
		}
		return storage.PrefixEnd(KeyPrefix(t.ID, key)), nil // the next key
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return nil, err
	}
	return out, nil
}

// KeySnapshot returns the partition and offset of the latest committed
// snapshot record of key in topic (not in an aborted transaction nor in one
// still open), and whether there is one. Across partitions the last
// partition's comes first: a key lives in one partition with Kafka's
// default partitioner.
func (f *Index) KeySnapshot(topic string, key []byte) (int32, int64, bool, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return 0, 0, false, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	prefix := KeyPrefix(t.ID, key)
	var part int32
	off := int64(-1)
	err := f.Store.ScanReverse(prefix, func(k, v []byte) error {
		pid, snap, err := ParseEntryValue(v)
		if err != nil || !snap {
			return err
		}
		p, o, err := parseEntrySuffix(k, k[len(prefix):])
		if err != nil {
			return err
		}
		if int(p) >= len(t.Partitions) || o >= t.Partitions[p].LastStableOffset() || t.Partitions[p].InAbortedTxn(pid, o) {
			return nil
		}
		part, off = p, o
		return core.ErrStopScan
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return 0, 0, false, err
	}
	return part, off, off >= 0, nil
}

// RegisterKeys is the keys module's registration function
// (buildRegistry, registry.go): its files' registrations.
func RegisterKeys(r *core.Registry, h *topics.TopicHooks) {
	registerKeyIndex(r, h) // keys.go
	registerTables(r, h)   // tables.go
}

// registerKeyIndex registers the key stream index's steps and hooks
// (RegisterKeys calls it).
func registerKeyIndex(r *core.Registry, h *topics.TopicHooks) {
	// Key stream entries before the topics' deletions (rank 60): a topic
	// produced to and deleted in one block leaves none.
	core.RegisterModuleStep(r, keysOf, core.ModuleStep[*Index]{Rank: 30, Name: "key stream entries", Module: ModKeys, Stage: stageKeyEntries,
		Forget: func(f *Index) {
			clear(f.keysAdded) // drop the keys' bytes
			f.keysAdded = f.keysAdded[:0]
			f.keyStaged = nil
		}})
	h.ProduceChecks.Register(10, "expected versions", ModKeys, func(tm *topics.Topics, pr *topics.Producing) (core.Result, func()) {
		f := keysOf(tm.Machine)
		if !pr.Conditional {
			return core.Result{}, nil
		}
		return f.checkVersions(pr.T, pr.P, pr.Keys, pr.Bases, pr.Offsets, pr.Dup), nil
	})
	h.BatchAppended.Register(20, "key stream entries", ModKeys, func(tm *topics.Topics, pr *topics.Producing, i int, _ []byte, at int64) core.Result {
		f := keysOf(tm.Machine)
		for _, k := range pr.Keys[i] {
			f.stageKey(KeyEntry{Topic: pr.T, Partition: pr.P.Index, Key: k.Key, Offset: at + int64(k.Delta), Pid: pr.Headers[i].ProducerID, Snapshot: k.Snapshot})
		}
		return core.Result{}
	})
	h.TopicDropped.Register(10, "key stream entries", ModKeys, func(_ *topics.Topics, t *topics.Topic, b *core.StateBatch) {
		b.DeletePrefix(KeyTopicPrefix(t.ID))
	})
	core.RegisterModuleStep(r, keysOf, core.ModuleStep[*Index]{Rank: 80, Name: "table versions", Module: ModKeys,
		Stage: func(f *Index, b *core.StateBatch) error {
			if err := f.stageTables(b); err != nil {
				return fmt.Errorf("stele/fsm: table versions: %w", err)
			}
			return nil
		}})
}

// stageKeyEntries writes the block's key stream entries, in key order: the
// store inserts a sorted run into its memtable at a fraction of the cost
// of scattered keys.
func stageKeyEntries(f *Index, b *core.StateBatch) error {
	type kv struct{ k, v []byte }
	entries := make([]kv, 0, len(f.keysAdded))
	size := 0
	for _, e := range f.keysAdded {
		if !e.Topic.Deleted {
			size += KeyEntryKeyLen(e)
		}
	}
	arena := make([]byte, 0, size) // every entry's key, in one allocation
	for _, e := range f.keysAdded {
		if !e.Topic.Deleted {
			start := len(arena)
			arena = AppendKeyEntryKey(arena, e)
			entries = append(entries, kv{arena[start:len(arena):len(arena)], EntryValue(e)})
		}
	}
	slices.SortFunc(entries, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, e := range entries {
		b.B.Set(e.k, e.v) // the key index is outside the state trie (authstate.go)
	}
	return nil
}
