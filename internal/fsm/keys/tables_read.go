package keys

// Reading tables from their leaves (tables.go): GET /v1/tables answers
// what the leaves say, and proves it on request.

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// ErrNotTable: a table read of a topic that is not served as a table.
var ErrNotTable = errors.New("stele/fsm: topic is not served as a table")

// TableLatest returns the latest version of key in table topic, as its
// leaves hold it (a tombstone too, with a nil Value), or false when it has
// none: the greatest timestamp, then partition, of the key's latest
// version in each partition. A topic that does not exist gives
// ErrUnknownTopic, one that is no table ErrNotTable.
func (f *Index) TableLatest(topic string, key []byte) (KeyEvent, bool, error) {
	var last error
	for range 3 {
		t, err := f.tableView(topic)
		if err != nil {
			return KeyEvent{}, false, err
		}
		var best proof.TableVersion
		found := false
		for pi := range t.Partitions {
			v, ok, err := f.Store.Get(proof.TableKey(t.ID, int32(pi), key))
			if err != nil {
				return KeyEvent{}, false, err
			}
			if !ok {
				continue
			}
			tv, err := proof.DecodeTableVersion(int32(pi), v)
			if err != nil {
				return KeyEvent{}, false, fmt.Errorf("stele/fsm: table leaf of %q in %s-%d: %w", key, topic, pi, err)
			}
			if !found || tv.Later(best) {
				best, found = tv, true
			}
		}
		if !found {
			return KeyEvent{}, false, nil
		}
		ev, err := f.tableEvent(t, key, best)
		if err == nil {
			return ev, true, nil
		}
		last = err // a commit in between moved the leaf on
	}
	return KeyEvent{}, false, last
}

// ProveTable returns the proof of key in table topic (without the signed
// header: the caller adds the header of Height+1), what it proves, and the
// record's value at the version it proves (nil for none or a tombstone).
func (f *Index) ProveTable(topic string, key []byte) (*proof.StateProof, *proof.TableValue, []byte, error) {
	var last error
	for range 3 {
		t, err := f.tableView(topic)
		if err != nil {
			return nil, nil, nil, err
		}
		keys := proof.TableKeys(topic, t.ID, int32(len(t.Partitions)), key)
		if len(keys) > proof.MaxStateProofKeys {
			return nil, nil, nil, fmt.Errorf("%w: topic %q has %d partitions, a table proof covers at most %d", core.ErrNoProof, topic, len(t.Partitions), proof.MaxStateProofKeys-1)
		}
		sp, err := f.ProveState(keys...)
		if err != nil {
			return nil, nil, nil, err
		}
		tv, err := proof.TableLatest(topic, key, sp.Entries)
		if err != nil { // the topic changed between the view and the proof
			last = fmt.Errorf("%w: %w", core.ErrStateMoved, err)
			continue
		}
		tv.Height = sp.Height
		if !tv.Found || tv.Latest.Deleted {
			return sp, tv, nil, nil
		}
		ev, err := f.tableEvent(t, key, tv.Latest)
		if err != nil {
			last = fmt.Errorf("%w: %w", core.ErrStateMoved, err)
			continue
		}
		return sp, tv, ev.Value, nil
	}
	return nil, nil, nil, last
}

func (f *Index) tableView(topic string) (*topics.TopicView, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", topics.ErrUnknownTopic, topic)
	}
	if !IsTable(&topics.Topic{Config: t.Config}) {
		return nil, fmt.Errorf("%w: %q (cleanup.policy %q): a table is served from a compact or snapshot topic", ErrNotTable, topic, t.Configs["cleanup.policy"])
	}
	return t, nil
}

// tableEvent reads the record a leaf names and checks it is the one the
// leaf holds.
func (f *Index) tableEvent(t *topics.TopicView, key []byte, v proof.TableVersion) (KeyEvent, error) {
	if int(v.Partition) >= len(t.Partitions) {
		return KeyEvent{}, fmt.Errorf("stele/fsm: %s has no partition %d", t.Name, v.Partition)
	}
	p := t.Partitions[v.Partition]
	if p.Removed.Load() {
		return KeyEvent{}, topics.ErrPartitionGone
	}
	r, ok, err := recordAt(p.Log, v.Offset, v.Offset+1, key)
	switch {
	case err != nil:
		return KeyEvent{}, err
	case !ok:
		return KeyEvent{}, fmt.Errorf("stele/fsm: %s-%d has no record of %q at offset %d", t.Name, v.Partition, key, v.Offset)
	case (r.Value == nil) != v.Deleted || r.Value != nil && sha256.Sum256(r.Value) != v.ValueHash:
		return KeyEvent{}, fmt.Errorf("stele/fsm: %s-%d offset %d is not the version its leaf holds", t.Name, v.Partition, v.Offset)
	}
	ev := KeyEvent{Partition: v.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		ev.Headers = append(ev.Headers, record.RecordHeader{Key: h.Key, Value: cloneNil(h.Value)})
		ev.Snapshot = ev.Snapshot || h.Key == topics.SnapshotHeader
	}
	return ev, nil
}
