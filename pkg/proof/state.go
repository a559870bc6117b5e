package proof

// State proofs. Every replicated key of a broker's metadata store is a leaf
// of a sparse Merkle trie (github.com/pokt-network/smt, SHA-256: a leaf's
// path is the hash of its key, its value the hash of the value) whose root,
// the state root, the app hash commits to:
//
//	app hash = AppHash(digest, state root, leaves root)
//
// A StateProof (GET /v1/state/proof?key=...) carries, for one height, the
// parts of that height's app hash, for each key asked its value (or none)
// and the trie's proof of it (membership, or absence), and the signed
// header of the next height. Trust.VerifyState accepts it only if the
// header is signed by the trusted validators, its app hash is made of the
// parts given, and every key's proof leads to the state root.
//
// The keys and values are the broker's store format (internal/fsm/core's
// persist.go), published here for the entries a client proves: TopicKey,
// PartitionKey, OffsetKey, ProducerKeyKey and their decoders. Their layout
// is part of the app hash's format (AppHashFormat).

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pokt-network/smt"
)

// MaxStateProofKeys bounds the keys of one state proof.
const MaxStateProofKeys = 1024

// StateProof is the proof of some keys of the state at Height, in the JSON
// the HTTP API serves.
type StateProof struct {
	// Height is the block after which the state was as proven; its app
	// hash is in the header of Height+1.
	Height     int64        `json:"height"`
	Digest     []byte       `json:"digest"`
	StateRoot  []byte       `json:"state_root"`
	LeavesRoot []byte       `json:"leaves_root"`
	Entries    []StateEntry `json:"entries"`
	// SignedHeader is the header of Height+1 and the commit that signed
	// it: a CometBFT SignedHeader, protobuf-encoded; Validators the set it
	// names when that is not the genesis set (Batch.Validators).
	SignedHeader []byte `json:"signed_header"`
	Validators   []byte `json:"validators,omitempty"`
}

// StateEntry is one key: its value (nil when the state has no such key;
// a present empty value is empty, not nil)
// and the trie's proof, the fields of smt.SparseMerkleProof.
type StateEntry struct {
	Key                   []byte   `json:"key"`
	Value                 []byte   `json:"value"`
	SideNodes             [][]byte `json:"side_nodes"`
	NonMembershipLeafData []byte   `json:"non_membership_leaf"`
}

// VerifiedState is a state proof Verify accepted: each key's value, nil for
// a key proven absent.
type VerifiedState struct {
	Height     int64
	HeaderHash []byte
	Time       int64 // the signed header's time, Unix milliseconds
	Validators int   // how many validators that header's set has
	Values     map[string][]byte
}

// TrieValue is what the state trie holds for a present key's value v:
// 0x01 | v, so a key with an empty value is a leaf and not an absence
// (the trie library proves an empty value as absence).
func TrieValue(v []byte) []byte { return append([]byte{1}, v...) }

func stateSpec() *smt.TrieSpec {
	s := smt.NewTrieSpec(sha256.New(), false)
	return &s
}

// VerifyState checks p against t: the signed header's commit carries more
// than two thirds of the trusted validators' voting power, it is the
// header of p.Height+1, its app hash is AppHash(p.Digest, p.StateRoot,
// p.LeavesRoot), and every entry's proof leads from its key and value (or
// its absence) to p.StateRoot.
func (t *Trust) VerifyState(p *StateProof) (*VerifiedState, error) {
	if p == nil || len(p.Entries) == 0 {
		return nil, unproven("no state proof")
	}
	if len(p.Entries) > MaxStateProofKeys {
		return nil, unproven("%d entries, at most %d", len(p.Entries), MaxStateProofKeys)
	}
	if len(p.StateRoot) != sha256.Size {
		return nil, unproven("state root of %d bytes", len(p.StateRoot))
	}
	sh, set, err := t.verifyHeader(p.SignedHeader, p.Validators)
	if err != nil {
		return nil, err
	}
	if sh.Height != p.Height+1 {
		return nil, unproven("the signed header is of height %d, the state's is %d (its app hash is in the header of %d)", sh.Height, p.Height, p.Height+1)
	}
	if want := AppHash(p.Digest, p.StateRoot, p.LeavesRoot); !bytes.Equal(sh.AppHash, want) {
		return nil, unproven("the signed app hash of height %d is %X, the proof gives %X", p.Height, []byte(sh.AppHash), want)
	}
	spec := stateSpec()
	v := &VerifiedState{Height: p.Height, HeaderHash: sh.Hash(), Time: sh.Time.UnixMilli(), Validators: set.Size(), Values: map[string][]byte{}}
	for _, e := range p.Entries {
		for _, n := range e.SideNodes {
			if len(n) != sha256.Size {
				return nil, unproven("key %q: a side node of %d bytes", e.Key, len(n))
			}
		}
		sp := &smt.SparseMerkleProof{SideNodes: e.SideNodes, NonMembershipLeafData: e.NonMembershipLeafData}
		var leaf []byte // nil: the proof of absence
		if e.Value != nil {
			leaf = TrieValue(e.Value)
		}
		ok, err := smt.VerifyProof(sp, p.StateRoot, e.Key, leaf, spec)
		if err != nil || !ok {
			what := "its value"
			if e.Value == nil {
				what = "its absence"
			}
			return nil, unproven("key %q: the proof of %s does not lead to the state root (%v)", e.Key, what, err)
		}
		v.Values[string(e.Key)] = e.Value
	}
	return v, nil
}

// The store's keys of the entries a client proves.

// TopicKey is a topic's key: its id, partition count and configs.
func TopicKey(topic string) []byte { return append([]byte("t/"), topic...) }

// PartitionKey is a partition's key: its log start and end offsets.
func PartitionKey(topic string, partition int32) []byte {
	k := append(append([]byte("p/"), topic...), 0)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

// OffsetKey is a group's committed offset of a partition.
func OffsetKey(group, topic string, partition int32) []byte {
	k := append(append([]byte("o/"), group...), 0)
	k = append(append(k, topic...), 0)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

// ProducerKeyKey is a principal's registered producer public key.
func ProducerKeyKey(principal string) []byte { return append([]byte("r/"), principal...) }

// The store's values. Each begins with a format byte.
const storeValueVersion = 1

// ErrStateValue is returned by the decoders for a value they cannot read.
var ErrStateValue = errors.New("stele/proof: malformed state value")

// Topic is a topic's proven state.
type Topic struct {
	ID                [16]byte
	ReplicationFactor int16
	Partitions        int32
	Configs           map[string]string // the configs set on the topic, not the defaults
	// Replicas are the partitions' replicas as a client assigned them: nil
	// when none was, else one list per partition (empty: not assigned).
	Replicas [][]int32
}

// Partition is a partition's proven offsets.
type Partition struct {
	LogStartOffset int64
	HighWatermark  int64 // the end of the log: the next offset to be written
}

// CommittedOffset is a group's proven committed offset of a partition.
type CommittedOffset struct {
	Offset       int64
	LeaderEpoch  int32
	Metadata     string
	CommitTimeMs int64
}

// DecodeTopic reads a TopicKey's value.
func DecodeTopic(v []byte) (Topic, error) {
	var t Topic
	r := &valueReader{b: v}
	r.version()
	copy(t.ID[:], r.take(16))
	t.ReplicationFactor, t.Partitions = int16(r.u16()), int32(r.u32())
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
	}
	t.Configs = map[string]string{}
	for i := uint64(0); i < n && r.err == nil; i++ {
		k := r.str()
		t.Configs[k] = r.str()
	}
	if n = r.uvarint(); n > uint64(len(r.b)) {
		r.fail()
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		m := r.uvarint()
		if m > uint64(len(r.b))/4 {
			r.fail()
			break
		}
		a := make([]int32, 0, m)
		for j := uint64(0); j < m; j++ {
			a = append(a, int32(r.u32()))
		}
		t.Replicas = append(t.Replicas, a)
	}
	return t, r.end()
}

// DecodePartition reads a PartitionKey's value.
func DecodePartition(v []byte) (Partition, error) {
	r := &valueReader{b: v}
	r.version()
	p := Partition{HighWatermark: int64(r.u64())}
	p.LogStartOffset = int64(r.u64())
	r.take(24) // compaction marks
	return p, r.end()
}

// SchemaKey is the key of a schema of the schema registry of tenant (""
// for the default tenant's) by its id: its type, text and references
// (docs/schemas.md).
func SchemaKey(tenant string, id int32) []byte {
	k := append(append([]byte("h/i/"), tenant...), 0)
	return binary.BigEndian.AppendUint32(k, uint32(id))
}

// Schema is a registered schema as the state holds it.
type Schema struct {
	Type string
	Text string
	// Refs are its references: name, subject and version each.
	Refs []SchemaRef
	// Canonical is the form under which the registry took two schemas
	// for one.
	Canonical string
}

// SchemaRef is one reference of a Schema.
type SchemaRef struct {
	Name, Subject string
	Version       int32
}

// DecodeSchema reads a SchemaKey's value.
func DecodeSchema(v []byte) (Schema, error) {
	r := &valueReader{b: v}
	r.version()
	s := Schema{Type: r.str(), Text: r.str()}
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		s.Refs = append(s.Refs, SchemaRef{Name: r.str(), Subject: r.str(), Version: int32(r.u32())})
	}
	s.Canonical = r.str()
	return s, r.end()
}

// DecodeCommittedOffset reads an OffsetKey's value.
func DecodeCommittedOffset(v []byte) (CommittedOffset, error) {
	r := &valueReader{b: v}
	r.version()
	o := CommittedOffset{Offset: int64(r.u64()), LeaderEpoch: int32(r.u32())}
	o.Metadata = r.str()
	o.CommitTimeMs = int64(r.u64())
	return o, r.end()
}

type valueReader struct {
	b   []byte
	err error
}

func (r *valueReader) fail() {
	if r.err == nil {
		r.err = ErrStateValue
	}
}

func (r *valueReader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.fail()
		return make([]byte, max(n, 0))
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *valueReader) version() {
	if v := r.take(1); r.err == nil && v[0] != storeValueVersion {
		r.err = fmt.Errorf("%w: format %d", ErrStateValue, v[0])
	}
}
func (r *valueReader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *valueReader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *valueReader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }

func (r *valueReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *valueReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	return string(r.take(int(n)))
}

func (r *valueReader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	return r.err
}
