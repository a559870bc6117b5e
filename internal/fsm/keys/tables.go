package keys

// Table leaves (issue 16): a topic served as a table (cleanup.policy
// compact or snapshot, GET /v1/tables) has, for each key and partition, a
// leaf of the authenticated state holding the key's latest readable
// version there:
//
//	l/<topic id [16]><partition u32><key>   proof.EncodeTableVersion: offset, timestamp, sha256(value) or tombstone
//
// So a key's table value, or its absence, is proven like any other state
// (proof.TableKey, proof.VerifyTable). A version is readable when it is in
// the log (at or above the log start, not removed by compaction) and not of
// an aborted or still open transaction. The leaves follow the log, always
// in the deterministic apply and in the block's batch:
//
//   - a record produced outside a transaction is its key's latest version
//     in its partition at once; a transaction's records become it at the
//     commit marker, where not overtaken by a later version;
//   - when the log start moves (retention, DeleteRecords) the leaves below
//     it go: every version of their key is below it;
//   - when a compaction is decided, the tombstone leaves it will remove (a
//     tombstone past the delete horizon, in a segment it cleans) go, by
//     storage's own rule (storage.TombstoneRule, which the pass runs
//     with), so the leaves and the compacted log cannot disagree on it;
//   - deleting the topic, or a cleanup.policy that stops serving it as a
//     table, removes its leaves; a cleanup.policy that starts serving it
//     builds them from the key index.
//
// The changes of a block are gathered in f.tables and written, in key
// order, by stage.

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/pkg/proof"
)

// tableChanges are a block's changes to the table leaves.
type tableChanges struct {
	writes  map[string]tableWrite      // by leaf key: the block's last change
	cleared []*topics.Topic            // topics whose committed leaves go (no longer tables, or rebuilt)
	trimmed map[*topics.Partition]bool // partitions whose log start moved
	compact []tableCompaction          // compactions decided
}

// tableWrite is a leaf's new version, or its removal.
type tableWrite struct {
	topic     *topics.Topic
	partition int32
	version   proof.TableVersion
	deleted   bool
}

// tableCompaction is a compaction decided on a table partition: the
// tombstones its rule removes go.
type tableCompaction struct {
	p    *topics.Partition
	rule storage.TombstoneRule
}

// IsTable reports whether t is served as a table.
func IsTable(t *topics.Topic) bool { return isTableConfig(t.Config) }

func isTableConfig(c topics.TopicConfig) bool { return c.Compact || c.Snapshot }

// registerTables registers the tables' hooks on the topics module
// (topic_hooks.go); RegisterKeys calls it.
func registerTables(r *core.Registry, h *topics.TopicHooks) {
	h.BatchAppended.Register(10, "table versions", ModKeys, func(tm *topics.Topics, pr *topics.Producing, i int, b []byte, _ int64) core.Result {
		f := keysOf(tm.Machine)
		if IsTable(pr.T) && !pr.Headers[i].Transactional() {
			if err := f.tableRecords(pr.T, pr.P, b); err != nil {
				return f.LocalFault("table versions of %s-%d: %w", pr.T.Name, pr.P.Index, err)
			}
		}
		return core.Result{}
	})
	h.MarkerWritten.Register(10, "table versions of a committed transaction", ModKeys, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition, pid int64, commit bool, first, at int64) {
		f := keysOf(tm.Machine)
		if commit && first >= 0 && IsTable(t) {
			if err := f.tableTxnCommitted(t, p, pid, first, at); err != nil {
				f.LocalFault("table versions of a transaction in %s-%d: %w", t.Name, p.Index, err)
			}
		}
	})
	h.LogTrimmed.Register(10, "table leaves below the log start", ModKeys, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition) { keysOf(tm.Machine).tableTrimmed(t, p) })
	h.CompactionDecided.Register(10, "tombstones a compaction removes", ModKeys, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition, segs []storage.SegmentInfo, horizon int64) {
		keysOf(tm.Machine).tableCompactionDecided(t, p, segs, horizon)
	})
	h.ConfigChanged.Register(10, "table leaves of a changed cleanup.policy", ModKeys, func(tm *topics.Topics, t *topics.Topic, was topics.TopicConfig) core.Result {
		f := keysOf(tm.Machine)
		if err := f.tableConfigChanged(t, isTableConfig(was)); err != nil {
			return f.LocalFault("table versions of %s: %w", t.Name, err)
		}
		return core.Result{}
	})
	h.TopicDropped.Register(20, "table leaves", ModKeys, func(_ *topics.Topics, t *topics.Topic, b *core.StateBatch) {
		b.DeletePrefix(tableTopicPrefix(t.ID))
	})
}

func tableTopicPrefix(id core.TopicID) []byte { return append([]byte("l/"), id[:]...) }

func tablePartitionPrefix(id core.TopicID, p int32) []byte { return proof.TableKey(id, p, nil) }

func (c *tableChanges) reset() {
	*c = tableChanges{}
}

func (c *tableChanges) set(t *topics.Topic, p int32, key []byte, v proof.TableVersion) {
	if c.writes == nil {
		c.writes = map[string]tableWrite{}
	}
	c.writes[string(proof.TableKey(t.ID, p, key))] = tableWrite{topic: t, partition: p, version: v}
}

// tableRecords makes the keyed records of batch b, just appended to p of
// table t outside a transaction, their keys' latest versions.
func (f *Index) tableRecords(t *topics.Topic, p *topics.Partition, b []byte) error {
	_, err := record.Each(b, func(r *record.Record) error {
		if r.Key != nil {
			f.tables.set(t, p.Index, r.Key, VersionOf(p.Index, r))
		}
		return nil
	})
	return err
}

func VersionOf(p int32, r *record.Record) proof.TableVersion {
	v := proof.TableVersion{Partition: p, Offset: r.Offset, Timestamp: r.Timestamp, Deleted: r.Value == nil}
	if !v.Deleted {
		v.ValueHash = sha256.Sum256(r.Value)
	}
	return v
}

// tableTxnCommitted makes the records of producer pid's transaction in p,
// from offset first to the marker at end, their keys' latest versions where
// no later version is.
func (f *Index) tableTxnCommitted(t *topics.Topic, p *topics.Partition, pid, first, end int64) error {
	return p.EachBatch(first, end, func(h record.Header, b []byte) error {
		if h.ProducerID != pid || !h.Transactional() || h.Control() {
			return nil
		}
		_, err := record.Each(b, func(r *record.Record) error {
			if r.Key == nil || r.Offset < first {
				return nil
			}
			cur, ok, err := f.tableLeaf(t, p.Index, r.Key)
			if err != nil || ok && cur.Offset > r.Offset {
				return err
			}
			f.tables.set(t, p.Index, r.Key, VersionOf(p.Index, r))
			return nil
		})
		return err
	})
}

// tableLeaf is key's leaf in partition p of t as the block leaves it so far.
func (f *Index) tableLeaf(t *topics.Topic, p int32, key []byte) (proof.TableVersion, bool, error) {
	k := proof.TableKey(t.ID, p, key)
	if w, ok := f.tables.writes[string(k)]; ok {
		return w.version, !w.deleted, nil
	}
	if slices.Contains(f.tables.cleared, t) {
		return proof.TableVersion{}, false, nil
	}
	v, ok, err := f.Store.Get(k)
	if err != nil || !ok {
		return proof.TableVersion{}, false, err
	}
	tv, err := proof.DecodeTableVersion(p, v)
	return tv, err == nil, err
}

// tableTrimmed notes that p's log start moved.
func (f *Index) tableTrimmed(t *topics.Topic, p *topics.Partition) {
	if !IsTable(t) {
		return
	}
	if f.tables.trimmed == nil {
		f.tables.trimmed = map[*topics.Partition]bool{}
	}
	f.tables.trimmed[p] = true
}

// tableCompactionDecided notes the tombstones a compaction decided on p
// (cleanup.policy with compact) will remove: storage's rule
// (storage.NewTombstoneRule, the one the pass runs with), over the sealed
// segments below the pass's bound (the active segment's base), with the
// oldest open transaction as the log's producers know it.
func (f *Index) tableCompactionDecided(t *topics.Topic, p *topics.Partition, segs []storage.SegmentInfo, horizon int64) {
	if !t.Config.Compact {
		return
	}
	unstable := int64(-1)
	for _, st := range p.ProducerStates {
		if st.TxnFirst >= 0 && (unstable < 0 || st.TxnFirst < unstable) {
			unstable = st.TxnFirst
		}
	}
	rule := storage.NewTombstoneRule(segs, segs[len(segs)-1].BaseOffset, unstable, horizon)
	if rule.Bound > 0 {
		f.tables.compact = append(f.tables.compact, tableCompaction{p: p, rule: rule})
	}
}

// tableConfigChanged follows a change of t's cleanup.policy: its leaves go
// when it stops being a table, and are built from the key index when it
// becomes one.
func (f *Index) tableConfigChanged(t *topics.Topic, was bool) error {
	now := IsTable(t)
	if was == now {
		return nil
	}
	f.tables.cleared = append(f.tables.cleared, t)
	for k, w := range f.tables.writes {
		if w.topic == t {
			delete(f.tables.writes, k)
		}
	}
	if now {
		return f.tableBackfill(t)
	}
	return nil
}

// tableBackfill builds t's leaves from the key index: each key's latest
// readable version in each partition.
func (f *Index) tableBackfill(t *topics.Topic) error {
	// The index as committed, and this block's entries after it (their
	// offsets are above every committed one).
	type ref struct {
		p   int32
		key string
	}
	offsets := map[ref][]KeyEntry{}
	var refs []ref
	add := func(r ref, e KeyEntry) {
		if _, ok := offsets[r]; !ok {
			refs = append(refs, r)
		}
		offsets[r] = append(offsets[r], e)
	}
	head := KeyTopicPrefix(t.ID)
	err := f.Store.Scan(head, func(k, v []byte) error {
		key, rest, err := unescapeKey(k[len(head):])
		if err != nil {
			return err
		}
		p, off, err := parseEntrySuffix(k, rest)
		if err != nil {
			return err
		}
		pid, _, err := ParseEntryValue(v)
		if err != nil {
			return err
		}
		add(ref{p, string(key)}, KeyEntry{Partition: p, Key: key, Offset: off, Pid: pid})
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range f.keysAdded {
		if e.Topic == t {
			add(ref{e.Partition, string(e.Key)}, e)
		}
	}
	for _, r := range refs {
		if int(r.p) >= len(t.Partitions) {
			continue
		}
		p := t.Partitions[r.p]
		es := offsets[r]
		for i := len(es) - 1; i >= 0; i-- {
			v, ok, err := f.readableVersion(p, es[i])
			if err != nil {
				return err
			}
			if ok {
				f.tables.set(t, r.p, []byte(r.key), v)
				break
			}
		}
	}
	return nil
}

// readableVersion reads the indexed record e of p as the applier sees the
// log: false if it is below the log start, of an aborted or open
// transaction, or removed by compaction.
func (f *Index) readableVersion(p *topics.Partition, e KeyEntry) (proof.TableVersion, bool, error) {
	if e.Offset < p.Start || e.Offset >= p.Next || p.InAbortedTxn(e.Pid, e.Offset) {
		return proof.TableVersion{}, false, nil
	}
	if st := p.ProducerStates[e.Pid]; e.Pid >= 0 && st != nil && st.TxnFirst >= 0 && e.Offset >= st.TxnFirst {
		return proof.TableVersion{}, false, nil
	}
	r, ok, err := recordAt(p.Log, e.Offset, p.Next, e.Key)
	if err != nil || !ok {
		return proof.TableVersion{}, false, err
	}
	return VersionOf(p.Index, r), true, nil
}

// recordAt reads the record of key at offset off of l (below upTo), false
// when compaction removed it.
func recordAt(l *storage.Log, off, upTo int64, key []byte) (*record.Record, bool, error) {
	data, err := l.Read(off, 1, upTo)
	if err != nil {
		return nil, false, err
	}
	batches, err := record.Split(data)
	if err != nil || len(batches) == 0 {
		return nil, false, fmt.Errorf("stele/fsm: reading offset %d: %v", off, err)
	}
	var found *record.Record
	_, err = record.Each(batches[0], func(r *record.Record) error {
		if r.Offset < off {
			return nil
		}
		if r.Offset == off && bytes.Equal(r.Key, key) {
			c := *r
			c.Key, c.Value = bytes.Clone(r.Key), cloneNil(r.Value)
			found = &c
		}
		return core.ErrStopScan
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return nil, false, err
	}
	return found, found != nil, nil
}

// stageTables writes the block's leaf changes into b: the cleared topics'
// leaves go, the trims and compactions are applied to the committed and
// staged leaves, then the writes, in key order.
func (f *Index) stageTables(b *core.StateBatch) error {
	c := &f.tables
	for _, t := range c.cleared {
		b.DeletePrefix(tableTopicPrefix(t.ID))
	}
	parts := make([]*topics.Partition, 0, len(c.trimmed))
	for p := range c.trimmed {
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(a, b *topics.Partition) int {
		if a.Topic != b.Topic {
			return cmp.Compare(a.Topic, b.Topic)
		}
		return int(a.Index - b.Index)
	})
	for _, p := range parts {
		start := p.Start
		if err := f.dropLeaves(p, func(v proof.TableVersion) (bool, error) { return v.Offset < start, nil }); err != nil {
			return err
		}
	}
	for _, cp := range c.compact {
		p, cp := cp.p, cp
		err := f.dropLeaves(p, func(v proof.TableVersion) (bool, error) {
			if !v.Deleted || v.Offset >= cp.rule.Bound {
				return false, nil
			}
			data, err := p.Log.Read(v.Offset, 1, p.Next)
			if err != nil {
				return false, err
			}
			h, err := record.ParseHeader(data)
			if err != nil {
				return false, err
			}
			return cp.rule.Removes(v.Offset, h.MaxTimestamp), nil
		})
		if err != nil {
			return err
		}
	}
	for _, k := range core.SortedKeys(c.writes) {
		w := c.writes[k]
		if w.topic.Deleted {
			continue
		}
		if w.deleted {
			b.Delete([]byte(k))
		} else {
			b.Set([]byte(k), proof.EncodeTableVersion(w.version))
		}
	}
	c.reset()
	return nil
}

// dropLeaves removes the leaves of p, committed or staged, that drop says
// go.
func (f *Index) dropLeaves(p *topics.Partition, drop func(proof.TableVersion) (bool, error)) error {
	t := f.ByName[p.Topic]
	if t == nil || int(p.Index) >= len(t.Partitions) || t.Partitions[p.Index] != p || !IsTable(t) {
		return nil
	}
	prefix := tablePartitionPrefix(t.ID, p.Index)
	remove := func(k string, v proof.TableVersion) error {
		ok, err := drop(v)
		if ok {
			f.tables.writes[k] = tableWrite{topic: t, partition: p.Index, version: v, deleted: true}
		}
		return err
	}
	if f.tables.writes == nil {
		f.tables.writes = map[string]tableWrite{}
	}
	for _, k := range core.SortedKeys(f.tables.writes) {
		if w := f.tables.writes[k]; !w.deleted && bytes.HasPrefix([]byte(k), prefix) {
			if err := remove(k, w.version); err != nil {
				return err
			}
		}
	}
	if slices.Contains(f.tables.cleared, t) {
		return nil // the committed leaves go; the staged ones were just seen
	}
	return f.Store.Scan(prefix, func(k, v []byte) error {
		if _, staged := f.tables.writes[string(k)]; staged {
			return nil
		}
		tv, err := proof.DecodeTableVersion(p.Index, v)
		if err != nil {
			return fmt.Errorf("stele/fsm: table leaf %q: %w", k, err)
		}
		return remove(string(k), tv)
	})
}
