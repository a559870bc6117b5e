package core

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// The metadata store's keys:
//
//	m/state                           height, app hash and its parts, block time, last housekeeping
//	m/producer-id                     the next producer id (producer_state.go)
//	m/signers                         the validators seen signing (liveness.go)
//	m/log-defaults                    the cluster-wide log defaults (log_defaults.go)
//	t/<topic>                         a topic: ID, replication factor, partitions, configs (topic_state.go)
//	p/<topic>\x00<partition u32>      a partition's offsets and compaction marks (topic_state.go)
//	c/<height u64><digest [32]>       an applied certificate, until its window passed (cert.go)
//	g/... and o/...                   consumer groups and committed offsets (group_state.go)
//	s/<topic>\x00<partition u32><pid u64>  an idempotent producer's state in a partition (partition_producers.go)
//	x/...                             transactions (txns.go)
//	a/...                             a partition's aborted transactions (partition_txns.go)
//	k/<topic id><key>...              the key stream index (keys.go)
//	j/b/<topic id><partition u32><last offset u64> and j/c/<topic id><subject>
//	                                  batch subject summaries and subject counts (subjects/)
//	l/<topic id><partition u32><key>  a table topic's key's latest version in a partition (tables.go)
//	v/<height> and b/<topic id>...    batch proofs: leaves per block, block per batch (proofs.go)
//	r/<principal> and y/<principal>... producer keys and used signature sequences (signed.go)
//	u/version, u/plan, u/vote/<addr>  the app version, a scheduled upgrade, votes for one (cluster/upgrade.go)
//	i/<user>                          a user's SCRAM credentials (security/users.go)
//	e/<type><pattern><resource>       a resource pattern's ACL entries (security/acls.go)
//	q/<entity>                        a user's or client id's quotas (security/quotas.go)
//	w/<ip>                            an address's connection quota (security/ip_quotas.go)
//	n/<tenant>                        a tenant and its quotas (tenants/tenants.go)
//	z/<digest>                        the state trie's nodes (authstate.go)
//
// Every key but m/state, m/signers, c/, k/, j/, v/, b/ and z/ is a leaf of the
// state trie, whose root the app hash commits to (authstate.go).
//
// Values use the command encoding's writer, prefixed by a format version.
// The module that owns a prefix encodes and decodes its values (the file
// named above). What a module keeps in memory it reads back at Open in
// its load step (registry.go); k/, j/, l/, v/, b/, r/ and y/ are read when
// needed. The core reads only m/state (load, below), one field of which
// is the topics module's (stateMark, registry.go). The decoders bound
// what they allocate by the bytes they are given: FuzzDecodeStoreValues
// runs them all, but the subject summaries' (FuzzDecodeSummary, in
// internal/subject).
const PersistVersion = 1

var keyState = []byte("m/state")

func TopicKey(name string) []byte { return append([]byte("t/"), name...) }

func PartitionKey(topic string, index int32) []byte {
	k := append([]byte("p/"), topic...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(index))
}

func PartitionPrefix(topic string) []byte { return append(append([]byte("p/"), topic...), 0) }

// stateVersion is m/state's format: 2 added the state root and the parts
// of the app hash, and moved the next producer id into the authenticated
// m/producer-id.
const stateVersion = 2

var KeyProducerID = []byte("m/producer-id")

// encodeState is m/state: the block metadata, outside the state trie.
//
//	u8 version | i64 height | bytes app hash | i64 block time |
//	i64 last housekeeping | i64 height of the app hash | bytes state root |
//	bytes block digest | bytes leaves root
func (f *Machine) encodeState() []byte {
	w := &Writer{}
	w.U8(stateVersion)
	w.I64(f.Height)
	w.Bytes(f.AppHash)
	w.I64(f.BlockTime)
	var mark int64 // the last housekeeping, the topics' (stateMark)
	if f.reg.StateMark != nil {
		mark = f.reg.StateMark.Value(f)
	}
	w.I64(mark)
	w.I64(f.hashHeight)
	w.Bytes(f.StateRoot)
	w.Bytes(f.blockDigest)
	w.Bytes(f.leavesRoot)
	return w.B
}

// stateParts are what m/state says the app hash is made of.
type stateParts struct {
	height, hashHeight                          int64
	appHash, stateRoot, blockDigest, leavesRoot []byte
}

func DecodeState(v []byte) (stateParts, int64, int64, error) {
	var s stateParts
	r := &Reader{B: v}
	if ver := r.U8(); ver != stateVersion {
		return s, 0, 0, fmt.Errorf("stele/fsm: state format %d is not supported by this version (%d): this data directory was written by another version of Stele", ver, stateVersion)
	}
	s.height, s.appHash = r.I64(), append([]byte(nil), r.Bytes()...)
	blockTime, lastHousekeep := r.I64(), r.I64()
	s.hashHeight = r.I64()
	s.stateRoot = append([]byte(nil), r.Bytes()...)
	s.blockDigest = append([]byte(nil), r.Bytes()...)
	s.leavesRoot = append([]byte(nil), r.Bytes()...)
	if err := r.Done(); err != nil {
		return s, 0, 0, fmt.Errorf("stele/fsm: reading state: %w", err)
	}
	return s, blockTime, lastHousekeep, nil
}

// stage builds the batch of everything the applied block changed, and
// mirrors its authenticated keys into the state trie; Commit writes it.
func (f *Machine) stage() error {
	b := &StateBatch{B: f.Store.NewBatch(), store: f.Store, trie: f.trie, staged: map[string]struct{}{}}
	if f.opts.TraceState {
		h := f.Height
		b.trace = func(op string, k, v []byte) {
			sum := sha256.Sum256(v)
			f.opts.Logger.Info("state trace", "height", h, "op", op, "key", fmt.Sprintf("%q", k), "value", fmt.Sprintf("%x", sum[:8]))
		}
	}
	f.pending = b
	for _, st := range f.reg.Steps {
		if st.Stage == nil {
			continue
		}
		if err := st.Stage(f, b); err != nil {
			return err
		}
	}
	return b.err
}

// persist writes the staged batch, the block metadata and the trie's new
// nodes in one synced batch.
func (f *Machine) persist() error {
	b := f.pending
	if b == nil { // ApplyBlock did not finish the block (a batch it could not have)
		return fmt.Errorf("%w: Commit of height %d, which was not applied whole", ErrHeight, f.Height)
	}
	f.pending = nil
	b.B.Set(keyState, f.encodeState())
	if err := f.trie.commit(b.B); err != nil {
		b.B.Close()
		return fmt.Errorf("stele/fsm: state trie at height %d: %w", f.Height, err)
	}
	if err := b.B.Commit(true); err != nil {
		return fmt.Errorf("stele/fsm: writing state at height %d: %w", f.Height, err)
	}
	return nil
}

// load reads the committed state at Open: the core's own keys (m/state,
// whose last-housekeeping field is handed to the topics module, stateMark),
// then, in the steps' order (registry.go), every module's load, each of
// which reads its own prefixes and decodes them with its own decoders.
// The topics' load opens every partition log, cutting it back to its
// committed end.
func (f *Machine) load() error {
	v, ok, err := f.Store.Get(keyState)
	if err != nil {
		return err
	}
	if ok {
		var (
			st   stateParts
			mark int64
		)
		if st, f.BlockTime, mark, err = DecodeState(v); err != nil {
			return err
		}
		if f.reg.StateMark != nil {
			f.reg.StateMark.Restore(f, mark)
		}
		f.Height, f.AppHash, f.StateRoot, f.blockDigest, f.leavesRoot = st.height, st.appHash, st.stateRoot, st.blockDigest, st.leavesRoot
		f.hashHeight = st.hashHeight
	}
	f.trie = openStateTrie(f.Store, f.StateRoot)
	for _, st := range f.reg.Steps {
		if st.Load == nil {
			continue
		}
		if err := st.Load(f); err != nil {
			return err
		}
	}
	return nil
}

// A leaf is a module's state kept whole under one store key: the topics'
// cluster-wide log defaults (m/log-defaults) and the cluster's dynamic
// broker configs (m/broker-configs). Its module reads it at Open with
// loadLeaf and writes it in its stage step with stageLeaf, so the two
// leaves are stored alike: absent while empty, rewritten whole when
// changed.

// LoadLeaf reads the leaf at key into *dst through decode; an absent key
// leaves *dst as it is (the module's empty value).
func LoadLeaf[T any](f *Machine, key []byte, decode func([]byte) (T, error), dst *T) error {
	v, ok, err := f.Store.Get(key)
	if err != nil || !ok {
		return err
	}
	x, err := decode(v)
	if err != nil {
		return err
	}
	*dst = x
	return nil
}

// StageLeaf stages the leaf at key when the block changed it (*dirty,
// which it clears): a delete when it holds nothing (empty), else the
// bytes of encode(v).
func StageLeaf[T any](b *StateBatch, key []byte, dirty *bool, v T, empty bool, encode func(T) []byte) {
	if !*dirty {
		return
	}
	*dirty = false
	if empty {
		b.Delete(key)
		return
	}
	b.Set(key, encode(v))
}
