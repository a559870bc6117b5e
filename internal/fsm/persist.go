package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// The metadata store's keys:
//
//	m/state                           height, app hash and its parts, block time, last housekeeping
//	m/producer-id                     the next producer id
//	t/<topic>                         a topic: ID, replication factor, partitions, configs
//	p/<topic>\x00<partition u32>      a partition's offsets and compaction marks
//	c/<height u64><digest [32]>       an applied certificate, until its window passed
//	g/... and o/...                   consumer groups and committed offsets (group_state.go)
//	s/<topic>\x00<partition u32><pid u64>  an idempotent producer's state in a partition (partition_producers.go)
//	x/...                             transactions (txns.go)
//	a/...                             a partition's aborted transactions (partition_txns.go)
//	k/<topic id><key>...              the key stream index (keys.go)
//	l/<topic id><partition u32><key>  a table topic's key's latest version in a partition (tables.go)
//	v/<height> and b/<topic id>...    batch proofs: leaves per block, block per batch (proofs.go)
//	r/<principal> and y/<principal>... producer keys and used signature sequences (signed.go)
//	u/version, u/plan, u/vote/<addr>  the app version, a scheduled upgrade, votes for one (upgrade.go)
//	z/<digest>                        the state trie's nodes (authstate.go)
//
// Every key but m/state, m/signers, c/, k/, v/, b/ and z/ is a leaf of the
// state trie, whose root the app hash commits to (authstate.go).
//
// Values use the command encoding's writer, prefixed by a format version.
const persistVersion = 1

var keyState = []byte("m/state")

func topicKey(name string) []byte { return append([]byte("t/"), name...) }

func partitionKey(topic string, index int32) []byte {
	k := append([]byte("p/"), topic...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(index))
}

func partitionPrefix(topic string) []byte { return append(append([]byte("p/"), topic...), 0) }

// stateVersion is m/state's format: 2 added the state root and the parts
// of the app hash, and moved the next producer id into the authenticated
// m/producer-id.
const stateVersion = 2

var keyProducerID = []byte("m/producer-id")

// encodeState is m/state: the block metadata, outside the state trie.
//
//	u8 version | i64 height | bytes app hash | i64 block time |
//	i64 last housekeeping | i64 height of the app hash | bytes state root |
//	bytes block digest | bytes leaves root
func (f *FSM) encodeState() []byte {
	w := &writer{}
	w.u8(stateVersion)
	w.i64(f.height)
	w.bytes(f.appHash)
	w.i64(f.blockTime)
	w.i64(f.lastHousekeep)
	w.i64(f.hashHeight)
	w.bytes(f.stateRoot)
	w.bytes(f.blockDigest)
	w.bytes(f.leavesRoot)
	return w.b
}

// stateParts are what m/state says the app hash is made of.
type stateParts struct {
	height, hashHeight                          int64
	appHash, stateRoot, blockDigest, leavesRoot []byte
}

func decodeState(v []byte) (stateParts, int64, int64, error) {
	var s stateParts
	r := &reader{b: v}
	if ver := r.u8(); ver != stateVersion {
		return s, 0, 0, fmt.Errorf("stele/fsm: state format %d is not supported by this version (%d): this data directory was written by another version of Stele", ver, stateVersion)
	}
	s.height, s.appHash = r.i64(), append([]byte(nil), r.bytes()...)
	blockTime, lastHousekeep := r.i64(), r.i64()
	s.hashHeight = r.i64()
	s.stateRoot = append([]byte(nil), r.bytes()...)
	s.blockDigest = append([]byte(nil), r.bytes()...)
	s.leavesRoot = append([]byte(nil), r.bytes()...)
	if err := r.done(); err != nil {
		return s, 0, 0, fmt.Errorf("stele/fsm: reading state: %w", err)
	}
	return s, blockTime, lastHousekeep, nil
}

// stage builds the batch of everything the applied block changed, and
// mirrors its authenticated keys into the state trie; Commit writes it.
func (f *FSM) stage() error {
	b := &stateBatch{b: f.store.NewBatch(), store: f.store, trie: f.trie, staged: map[string]struct{}{}}
	if f.opts.TraceState {
		h := f.height
		b.trace = func(op string, k, v []byte) {
			sum := sha256.Sum256(v)
			f.opts.Logger.Info("state trace", "height", h, "op", op, "key", fmt.Sprintf("%q", k), "value", fmt.Sprintf("%x", sum[:8]))
		}
	}
	f.pending = b
	for _, st := range steps {
		if st.stage == nil {
			continue
		}
		if err := st.stage(f, b); err != nil {
			return err
		}
	}
	return b.err
}

// persist writes the staged batch, the block metadata and the trie's new
// nodes in one synced batch.
func (f *FSM) persist() error {
	b := f.pending
	if b == nil { // ApplyBlock did not finish the block (a batch it could not have)
		return fmt.Errorf("%w: Commit of height %d, which was not applied whole", ErrHeight, f.height)
	}
	f.pending = nil
	b.b.Set(keyState, f.encodeState())
	if err := f.trie.commit(b.b); err != nil {
		b.b.Close()
		return fmt.Errorf("stele/fsm: state trie at height %d: %w", f.height, err)
	}
	if err := b.b.Commit(true); err != nil {
		return fmt.Errorf("stele/fsm: writing state at height %d: %w", f.height, err)
	}
	return nil
}

func encodeTopic(t *Topic) []byte {
	w := &writer{}
	w.u8(persistVersion)
	w.raw(t.ID[:])
	w.i16(t.ReplicationFactor)
	w.i32(int32(len(t.Partitions)))
	keys := sortedKeys(t.Configs)
	w.count(len(keys))
	for _, k := range keys {
		w.str(k)
		w.str(t.Configs[k])
	}
	encodeAssignments(w, t.Replicas)
	return w.b
}

// load reads the committed state and opens every partition log, cutting it
// back to its committed end.
func (f *FSM) load() error {
	v, ok, err := f.store.Get(keyState)
	if err != nil {
		return err
	}
	if ok {
		var st stateParts
		if st, f.blockTime, f.lastHousekeep, err = decodeState(v); err != nil {
			return err
		}
		f.height, f.appHash, f.stateRoot, f.blockDigest, f.leavesRoot = st.height, st.appHash, st.stateRoot, st.blockDigest, st.leavesRoot
		f.hashHeight = st.hashHeight
	}
	f.trie = openStateTrie(f.store, f.stateRoot)
	if err := f.loadUpgrade(); err != nil {
		return err
	}
	if v, ok, err := f.store.Get(keyProducerID); err != nil {
		return err
	} else if ok {
		if len(v) != 8 {
			return fmt.Errorf("stele/fsm: bad %s value %x", keyProducerID, v)
		}
		f.nextProducerID = int64(binary.BigEndian.Uint64(v))
	}
	f.stagedProducerID = f.nextProducerID
	if v, ok, err := f.store.Get(keySigners); err != nil {
		return err
	} else if ok {
		if f.signers, err = decodeSigners(v); err != nil {
			return fmt.Errorf("stele/fsm: reading signers: %w", err)
		}
	}
	err = f.store.Scan([]byte("c/"), func(k, _ []byte) error {
		if len(k) != 2+8+32 {
			return fmt.Errorf("stele/fsm: bad certificate key %x", k)
		}
		var d Digest
		copy(d[:], k[10:])
		f.certs[d] = int64(binary.BigEndian.Uint64(k[2:10]))
		return nil
	})
	if err != nil {
		return err
	}
	err = f.store.Scan([]byte("t/"), func(k, v []byte) error {
		name := string(k[2:])
		r := &reader{b: v}
		if ver := r.u8(); ver != persistVersion {
			return fmt.Errorf("stele/fsm: topic %q: state format %d not supported", name, ver)
		}
		t := &Topic{Name: name, Configs: map[string]string{}}
		copy(t.ID[:], r.take(16))
		t.ReplicationFactor = r.i16()
		n := r.i32()
		if n > MaxPartitions { // before the loop below makes them
			r.fail("%d partitions, at most %d", n, MaxPartitions)
		}
		for i, c := 0, r.count(2); i < c; i++ {
			t.Configs[r.str()] = r.str()
		}
		t.Replicas = decodeAssignments(r)
		if t.Replicas != nil && len(t.Replicas) != int(n) {
			return fmt.Errorf("stele/fsm: reading topic %q: %d partitions, %d replica lists", name, n, len(t.Replicas))
		}
		if err := r.done(); err != nil {
			return fmt.Errorf("stele/fsm: reading topic %q: %w", name, err)
		}
		t.Config = resolveConfig(t.Configs)
		for i := int32(0); i < n; i++ {
			t.Partitions = append(t.Partitions, newPartition(name, i))
		}
		f.topics[name] = t
		f.byID[t.ID] = t
		return nil
	})
	if err != nil {
		return err
	}
	for _, name := range sortedNames(f.topics) {
		if err := f.loadPartitions(f.topics[name]); err != nil {
			return err
		}
	}
	if err := f.loadGroups(); err != nil {
		return err
	}
	if err := f.loadProducers(); err != nil {
		return err
	}
	if err := f.loadTxns(); err != nil {
		return err
	}
	for _, name := range sortedNames(f.topics) {
		for _, p := range f.topics[name].Partitions {
			p.publishProducers()
			p.publishTxnState()
		}
	}
	return f.removeStrayLogs()
}

func (f *FSM) loadPartitions(t *Topic) error {
	states := map[int32][]byte{}
	err := f.store.Scan(partitionPrefix(t.Name), func(k, v []byte) error {
		idx := int32(binary.BigEndian.Uint32(k[len(k)-4:]))
		states[idx] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range t.Partitions {
		v, ok := states[p.Index]
		if !ok {
			return fmt.Errorf("stele/fsm: topic %q partition %d has no state", t.Name, p.Index)
		}
		r := &reader{b: v}
		if ver := r.u8(); ver != persistVersion {
			return fmt.Errorf("stele/fsm: partition %s-%d: state format %d not supported", t.Name, p.Index, ver)
		}
		p.next, p.start, p.cleanedUpTo, p.compactHorizon, p.compactedAt = r.i64(), r.i64(), r.i64(), r.i64(), r.i64()
		if err := r.done(); err != nil {
			return fmt.Errorf("stele/fsm: reading partition %s-%d: %w", t.Name, p.Index, err)
		}
		dir := f.partitionDir(t.Name, p.Index)
		if id, ok := readPartitionMetadata(dir); !ok || id != t.ID {
			return fmt.Errorf("stele/fsm: %s does not hold topic %s (id %s): the data directory is damaged", dir, t.Name, t.ID)
		}
		if err := f.openPartitionLog(t, p, false); err != nil {
			return fmt.Errorf("stele/fsm: opening %s: %w", dir, err)
		}
		if end := p.log.NextOffset(); end < p.next {
			return fmt.Errorf("stele/fsm: %s ends at offset %d but %d were committed: the log lost acknowledged data", dir, end, p.next)
		}
		if err := p.log.TruncateTo(p.next); err != nil {
			return fmt.Errorf("stele/fsm: cutting %s back to committed offset %d: %w", dir, p.next, err)
		}
		if err := f.settleFiles(p); err != nil {
			return fmt.Errorf("stele/fsm: %w", err)
		}
		if err := f.resumeCompaction(p); err != nil {
			return fmt.Errorf("stele/fsm: %w", err)
		}
		p.hwm.Store(p.next)
		p.lso.Store(p.start)
	}
	return nil
}

// resumeCompaction starts again, in the background, the pass of p that a
// crash or a Close interrupted: the one its plan file names, or, without
// one, the pass the last committed block decided (the crash came before
// its Commit wrote the plan). A plan of a block that was never committed is
// dropped; its block is replayed.
func (f *FSM) resumeCompaction(p *Partition) error {
	opts, planned, err := p.log.PlannedCompaction()
	switch {
	case err != nil:
		return fmt.Errorf("the compaction plan of %s-%d: %w", p.Topic, p.Index, err)
	case planned && opts.ID > f.height:
		return p.log.DropPlannedCompaction()
	case planned:
	case p.compactedAt == f.height && p.compactedAt > 0:
		opts = f.compactOptions(p)
	default:
		return nil
	}
	return f.planCompaction(p, opts)
}

// removeStrayLogs deletes partition directories that belong to no committed
// topic: leftovers of a deleted topic, or of a block that was applied but
// not committed before a crash.
func (f *FSM) removeStrayLogs() error {
	logs := filepath.Join(f.opts.Dir, "logs")
	entries, err := os.ReadDir(logs)
	if err != nil {
		return fmt.Errorf("stele/fsm: %w", err)
	}
	keep := map[string]bool{}
	for _, t := range f.topics {
		for _, p := range t.Partitions {
			keep[filepath.Base(f.partitionDir(t.Name, p.Index))] = true
		}
	}
	for _, e := range entries {
		if e.IsDir() && !keep[e.Name()] {
			f.opts.Logger.Info("removing stray partition directory", "dir", e.Name())
			if err := os.RemoveAll(filepath.Join(logs, e.Name())); err != nil {
				return fmt.Errorf("stele/fsm: %w", err)
			}
		}
	}
	return nil
}
