package proof

// Table proofs. A topic served as a table (cleanup.policy compact or
// snapshot, GET /v1/tables) has, for every key and every partition the key
// has a readable version in, a leaf of the state trie:
//
//	TableKey(topic id, partition, key) = "l/" | id [16] | partition u32 | key
//
// whose value (DecodeTableVersion) is the key's latest version there: its
// offset, its timestamp, and the SHA-256 of its value, or a tombstone flag.
// A key's table value is the latest of its partitions' versions (the
// greatest timestamp, then the greatest partition), as GET
// /v1/tables/{topic}/{key} answers it; a key with no leaf in any partition
// has no value. So a TableProof proves the topic's entry (its id,
// partition count and cleanup.policy) and the key's leaf in each of its
// partitions, all at one height, and VerifyTable picks the latest.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// TableKey is the leaf of key's latest version in a partition of the topic
// with that id.
func TableKey(id [16]byte, partition int32, key []byte) []byte {
	k := make([]byte, 0, 2+16+4+len(key))
	k = append(append(k, "l/"...), id[:]...)
	k = binary.BigEndian.AppendUint32(k, uint32(partition))
	return append(k, key...)
}

// TableVersion is a key's latest version in one partition of a table.
type TableVersion struct {
	Partition int32
	Offset    int64 // the record's offset: its version
	Timestamp int64 // the record's timestamp, ms
	Deleted   bool  // the record is a tombstone (a null value)
	// ValueHash is the SHA-256 of the record's value (zero for a
	// tombstone). The record's headers are not covered.
	ValueHash [sha256.Size]byte
}

// tableFlagTombstone marks a tombstone's version.
const tableFlagTombstone = 1

// EncodeTableVersion is a TableKey's value (Partition is in the key, not
// here):
//
//	u8 format (1) | i64 offset | i64 timestamp | u8 flags (1: tombstone) | [32] sha256(value), only without the tombstone flag
func EncodeTableVersion(v TableVersion) []byte {
	b := make([]byte, 0, 1+8+8+1+sha256.Size)
	b = append(b, storeValueVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(v.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(v.Timestamp))
	if v.Deleted {
		return append(b, tableFlagTombstone)
	}
	return append(append(b, 0), v.ValueHash[:]...)
}

// DecodeTableVersion reads a TableKey's value; the partition is the key's.
func DecodeTableVersion(partition int32, b []byte) (TableVersion, error) {
	r := &valueReader{b: b}
	r.version()
	v := TableVersion{Partition: partition, Offset: int64(r.u64()), Timestamp: int64(r.u64())}
	switch flags := r.take(1); {
	case r.err != nil:
	case flags[0] == tableFlagTombstone:
		v.Deleted = true
	case flags[0] == 0:
		copy(v.ValueHash[:], r.take(sha256.Size))
	default:
		r.fail()
	}
	if r.err == nil && v.Offset < 0 {
		r.fail()
	}
	return v, r.end()
}

// Later reports whether a is a later version of a key than b, in the order
// GET /v1/tables picks a key's latest across partitions: the greater
// timestamp, then the greater partition (partitions have no order of
// their own).
func (a TableVersion) Later(b TableVersion) bool {
	return a.Timestamp > b.Timestamp || a.Timestamp == b.Timestamp && a.Partition > b.Partition
}

// IsTable reports whether a topic with these configs is served as a table:
// its cleanup.policy holds compact or snapshot (the default, delete, does
// not).
func IsTable(configs map[string]string) bool {
	for _, p := range strings.Split(configs["cleanup.policy"], ",") {
		if p = strings.TrimSpace(p); p == "compact" || p == "snapshot" {
			return true
		}
	}
	return false
}

// TableValue is what a verified table proof says of a key.
type TableValue struct {
	Height     int64
	HeaderHash []byte // of the signed header carrying the app hash (VerifyTable only)
	Time       int64  // its time, Unix milliseconds
	Validators int    // how many validators its set has (VerifyTable only)
	Topic      Topic
	Versions   []TableVersion // the key's latest version in each partition that has one, by partition
	// Found: the key has a version; Latest is it (Latest.Deleted: its
	// latest is a tombstone, the key was deleted).
	Found  bool
	Latest TableVersion
}

// Has reports whether the key's proven value is value: it has one, not a
// tombstone, whose SHA-256 is value's.
func (v *TableValue) Has(value []byte) bool {
	return v.Found && !v.Latest.Deleted && value != nil && sha256.Sum256(value) == v.Latest.ValueHash
}

// TableProof is the body of GET /v1/tables/{topic}/{key}/proof: the state
// proof of the topic's entry and of the key's leaf in each partition (in
// that order), and the record's value at the latest version it proves (nil
// when the key has none or it is a tombstone), for the reader to hash.
type TableProof struct {
	Topic string      `json:"topic"`
	Key   []byte      `json:"key"`
	Value []byte      `json:"value"`
	Proof *StateProof `json:"proof"`
}

// TableKeys are the keys a table proof of key proves, in its order, for a
// topic with that id and partition count.
func TableKeys(topic string, id [16]byte, partitions int32, key []byte) [][]byte {
	keys := [][]byte{TopicKey(topic)}
	for p := range partitions {
		keys = append(keys, TableKey(id, p, key))
	}
	return keys
}

// VerifyTable checks p against t and returns what it proves of the key:
// the state proof verifies (VerifyState), it proves the topic's entry and
// the key's leaf in every one of the topic's partitions and nothing else,
// the topic is served as a table, and the value it carries is the proven
// latest version's (or none, for a key without a value).
func (t *Trust) VerifyTable(p *TableProof) (*TableValue, error) {
	if p == nil || p.Proof == nil || len(p.Proof.Entries) == 0 {
		return nil, unproven("no table proof")
	}
	vs, err := t.VerifyState(p.Proof)
	if err != nil {
		return nil, err
	}
	tv, err := tableFromEntries(vs.Height, p.Topic, p.Key, p.Proof.Entries)
	if err != nil {
		return nil, err
	}
	tv.HeaderHash, tv.Time, tv.Validators = vs.HeaderHash, vs.Time, vs.Validators
	switch {
	case tv.Found && !tv.Latest.Deleted && !tv.Has(p.Value):
		return nil, unproven("the value served for key %q is not the one proven at %s-%d offset %d", p.Key, p.Topic, tv.Latest.Partition, tv.Latest.Offset)
	case (!tv.Found || tv.Latest.Deleted) && p.Value != nil:
		return nil, unproven("a value is served for key %q, which the proof says has none", p.Key)
	}
	return tv, nil
}

// tableFromEntries reads what verified entries say of key in topic.
func tableFromEntries(height int64, topic string, key []byte, es []StateEntry) (*TableValue, error) {
	if !bytes.Equal(es[0].Key, TopicKey(topic)) {
		return nil, unproven("the proof's first entry is %q, not topic %q", es[0].Key, topic)
	}
	if es[0].Value == nil {
		return nil, unproven("topic %q does not exist (proven absent)", topic)
	}
	top, err := DecodeTopic(es[0].Value)
	if err != nil {
		return nil, unproven("topic %q: %v", topic, err)
	}
	if !IsTable(top.Configs) {
		return nil, unproven("topic %q is not served as a table (cleanup.policy %q)", topic, top.Configs["cleanup.policy"])
	}
	want := TableKeys(topic, top.ID, top.Partitions, key)
	if len(es) != len(want) {
		return nil, unproven("topic %q has %d partitions: want %d entries, the proof has %d", topic, top.Partitions, len(want), len(es))
	}
	tv := &TableValue{Height: height, Topic: top}
	for i, e := range es[1:] {
		if !bytes.Equal(e.Key, want[i+1]) {
			return nil, unproven("entry %d is %q, want key %q of partition %d", i+1, e.Key, key, i)
		}
		if e.Value == nil {
			continue
		}
		v, err := DecodeTableVersion(int32(i), e.Value)
		if err != nil {
			return nil, unproven("key %q, partition %d: %v", key, i, err)
		}
		tv.Versions = append(tv.Versions, v)
		if !tv.Found || v.Later(tv.Latest) {
			tv.Latest, tv.Found = v, true
		}
	}
	return tv, nil
}

// TableLatest reads, without verifying anything, what a state proof's
// entries say of key in topic: the broker's own use, to serve the version
// it proves.
func TableLatest(topic string, key []byte, es []StateEntry) (*TableValue, error) {
	if len(es) == 0 {
		return nil, unproven("no entries")
	}
	return tableFromEntries(0, topic, key, es)
}

// ProveTable fetches and verifies key's value in a table topic (GET
// /v1/tables/{topic}/{key}/proof): its latest version and value, or that it
// has none.
func (c *Client) ProveTable(ctx context.Context, topic string, key []byte) (*TableValue, []byte, error) {
	var p TableProof
	u := c.base() + "/v1/tables/" + url.PathEscape(topic) + "/" + url.PathEscape(string(key)) + "/proof"
	if err := c.get(ctx, u, &p); err != nil {
		return nil, nil, fmt.Errorf("stele/proof: table proof: %w", err)
	}
	if p.Topic != topic || !bytes.Equal(p.Key, key) {
		return nil, nil, unproven("asked for key %q of %q, the broker answered for %q of %q", key, topic, p.Key, p.Topic)
	}
	tv, err := following(ctx, c, func() (*TableValue, error) { return c.Trust.VerifyTable(&p) })
	if err != nil {
		return nil, nil, err
	}
	return tv, slices.Clone(p.Value), nil
}
