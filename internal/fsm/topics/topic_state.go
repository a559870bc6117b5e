package topics

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The topics module's steps: its state read at Open (the topics, their
// partitions' offsets and their logs), its state into the block's batch
// (the deleted topics' keys, the changed topics and partitions) and its
// view; and the codec of its values, t/ and p/ (persist.go lists the keys).

// registerTopicState registers the topics' and partitions' step and the
// topics view's (RegisterTopics calls it).
func registerTopicState(r *core.Registry) {
	core.RegisterModuleStep(r, topicsOf, core.ModuleStep[*Topics]{Rank: 60, Name: "topics and partitions", Module: ModTopics, Load: loadTopics, Stage: stageTopics,
		Empty: func(f *Topics) {
			f.topicsState = topicsState{
				ByName:      map[string]*Topic{},
				ByID:        map[core.TopicID]*Topic{},
				byTenant:    map[string]map[string]*Topic{},
				DirtyTopics: map[string]bool{},
				dirtyParts:  map[*Partition]bool{},
				Compactor:   newCompactor(f.opts.CompactionWorkers),
			}
		},
		Sync: (*Topics).syncLogs, Settle: (*Topics).afterCommit, Forget: forgetTopics, Close: closeTopics})
	core.RegisterModuleStep(r, topicsOf, core.ModuleStep[*Topics]{Rank: 5, Name: "partitions and the topics view", Module: ModTopics, Publish: publishTopics})
}

// topicsState is the topics module's part of the state machine (embedded
// in FSM).
type topicsState struct {
	LastHousekeep int64          // block time of the last housekeeping pass (in m/state)
	logDefaults   logDefaults    // the cluster-wide log defaults (log_defaults.go)
	appendClock   logAppendClock // LogAppendTime's clock (append_clock.go)
	ByName        map[string]*Topic
	ByID          map[core.TopicID]*Topic
	DirtyTopics   map[string]bool
	dirtyParts    map[*Partition]bool
	deleted       []*Topic   // deleted this block; files removed after Commit
	leafRefs      []batchRef // where each of the block's leaves' batch went (topic_proofs.go)
	Compactor     *compactor
	view          atomic.Pointer[View] // the committed topics, published at Commit
	// byTenant holds the topics of each tenant (tenant~NAME) by name, as
	// ByName does (tenant_parts.go: indexTopic, unindexTopic), so what a
	// tenant uses is found without reading every topic of the cluster.
	byTenant map[string]map[string]*Topic
	// viewIndex holds the live views of each source topic by name,
	// sorted (views.go's ViewsOf); nil until asked after a change.
	viewIndex map[string][]*Topic
}

func stageTopics(f *Topics, b *core.StateBatch) error {
	for _, t := range f.deleted {
		for _, h := range f.hooks.TopicDropped.Hooks {
			h.Fn(f, t, b)
		}
		b.DeletePrefix(BatchProofPrefix(t.ID))
		b.DeletePrefix(producerPrefix(t.Name))
		b.DeletePrefix(abortedPrefix(t.Name))
		b.Delete(core.TopicKey(t.Name))
		for _, p := range t.Partitions {
			b.Delete(core.PartitionKey(t.Name, p.Index))
		}
	}
	names := make([]string, 0, len(f.DirtyTopics))
	for n := range f.DirtyTopics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if t := f.ByName[n]; t != nil {
			b.Set(core.TopicKey(n), EncodeTopic(t))
		}
	}
	for p := range f.dirtyParts {
		b.Set(core.PartitionKey(p.Topic, p.Index), encodePartition(p))
	}
	stageBatchRefs(f, b)
	return nil
}

// publishTopics makes the committed partition offsets, producer and
// transaction state and the topics view visible.
func publishTopics(f *Topics, metaChanged bool) {
	for p := range f.dirtyParts {
		p.hwm.Store(p.Next)
		p.lso.Store(p.Start)
		if len(p.dirtyProducers) > 0 || p.producersView.Load() == nil {
			p.publishProducers()
		}
		p.publishTxnState()
	}
	for _, t := range f.deleted {
		for _, p := range t.Partitions {
			p.Removed.Store(true)
		}
	}
	if metaChanged || f.view.Load() == nil {
		f.view.Store(buildView(f.Height, f.ByName, f.logDefaults.configs))
	}
}

// EncodeTopic is a topic's t/ value:
//
//	u8 version | [16] id | i16 replication factor | i32 partitions |
//	count configs × (str name | str value) | assignments
func EncodeTopic(t *Topic) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Raw(t.ID[:])
	w.I16(t.ReplicationFactor)
	w.I32(int32(len(t.Partitions)))
	keys := core.SortedKeys(t.Configs)
	w.Count(len(keys))
	for _, k := range keys {
		w.Str(k)
		w.Str(t.Configs[k])
	}
	encodeAssignments(w, t.Replicas)
	return w.B
}

// DecodeTopic reads the t/ value of the topic name: the topic, without its
// partitions or its resolved config, and how many it has. The count is a fixed-width field, not
// bounded by the value's length; it is refused above MaxPartitions, and
// the caller makes a partition only for a stored partition state
// (loadPartitions), so what a value makes Open allocate stays bounded.
func DecodeTopic(name string, v []byte) (*Topic, int32, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, 0, fmt.Errorf("stele/fsm: topic %q: state format %d not supported", name, ver)
	}
	t := &Topic{Name: name, Configs: map[string]string{}}
	copy(t.ID[:], r.Take(16))
	t.ReplicationFactor = r.I16()
	n := r.I32()
	if n < 0 || n > MaxPartitions {
		r.Fail("%d partitions, at most %d", n, MaxPartitions)
	}
	for i, c := 0, r.Count(2); i < c; i++ {
		t.Configs[r.Str()] = r.Str()
	}
	t.Replicas = decodeAssignments(r)
	if err := r.Done(); err != nil {
		return nil, 0, fmt.Errorf("stele/fsm: reading topic %q: %w", name, err)
	}
	if t.Replicas != nil && len(t.Replicas) != int(n) {
		return nil, 0, fmt.Errorf("stele/fsm: reading topic %q: %d partitions, %d replica lists", name, n, len(t.Replicas))
	}
	return t, n, nil
}

// encodePartition is a partition's p/ value:
//
//	u8 version | i64 log end offset | i64 log start offset |
//	i64 cleaned up to | i64 compaction horizon | i64 height of the last compaction
func encodePartition(p *Partition) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I64(p.Next)
	w.I64(p.Start)
	w.I64(p.cleanedUpTo)
	w.I64(p.compactHorizon)
	w.I64(p.compactedAt)
	return w.B
}

// DecodePartition reads a p/ value into p's offsets and compaction marks.
func DecodePartition(p *Partition, v []byte) error {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return fmt.Errorf("stele/fsm: partition %s-%d: state format %d not supported", p.Topic, p.Index, ver)
	}
	p.Next, p.Start, p.cleanedUpTo, p.compactHorizon, p.compactedAt = r.I64(), r.I64(), r.I64(), r.I64(), r.I64()
	if err := r.Done(); err != nil {
		return fmt.Errorf("stele/fsm: reading partition %s-%d: %w", p.Topic, p.Index, err)
	}
	return nil
}

// loadTopics reads the topics and their partitions, opens every partition
// log, cutting it back to its committed end, and removes the partition
// directories of no committed topic.
func loadTopics(f *Topics) error {
	f.ByName, f.ByID, f.byTenant = map[string]*Topic{}, map[core.TopicID]*Topic{}, map[string]map[string]*Topic{}
	counts := map[string]int32{}
	err := f.Store.Scan([]byte("t/"), func(k, v []byte) error {
		t, n, err := DecodeTopic(string(k[2:]), v)
		if err != nil {
			return err
		}
		t.Config = resolveConfig(t.Configs, f.logDefaults.configs) // loaded before (rank 55)
		f.ByName[t.Name], f.ByID[t.ID], counts[t.Name] = t, t, n
		f.indexTopic(t)
		return nil
	})
	if err != nil {
		return err
	}
	for _, name := range SortedNames(f.ByName) {
		if err := f.loadPartitions(f.ByName[name], counts[name]); err != nil {
			return err
		}
	}
	return f.removeStrayLogs()
}

// loadPartitions makes t's n partitions from their stored states, in
// order, and opens their logs.
func (f *Topics) loadPartitions(t *Topic, n int32) error {
	states := map[int32][]byte{}
	err := f.Store.Scan(core.PartitionPrefix(t.Name), func(k, v []byte) error {
		idx := int32(binary.BigEndian.Uint32(k[len(k)-4:]))
		states[idx] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return err
	}
	for i := int32(0); i < n; i++ {
		v, ok := states[i]
		if !ok {
			return fmt.Errorf("stele/fsm: topic %q partition %d has no state", t.Name, i)
		}
		p := NewPartition(t.Name, i)
		if err := DecodePartition(p, v); err != nil {
			return err
		}
		t.Partitions = append(t.Partitions, p)
		dir := f.partitionDir(t.Name, p.Index)
		if id, ok := readPartitionMetadata(dir); !ok || id != t.ID {
			return fmt.Errorf("stele/fsm: %s does not hold topic %s (id %s): the data directory is damaged", dir, t.Name, t.ID)
		}
		if err := f.openPartitionLog(t, p, false); err != nil {
			return fmt.Errorf("stele/fsm: opening %s: %w", dir, err)
		}
		if end := p.Log.NextOffset(); end < p.Next {
			return fmt.Errorf("stele/fsm: %s ends at offset %d but %d were committed: the log lost acknowledged data", dir, end, p.Next)
		}
		if err := p.Log.TruncateTo(p.Next); err != nil {
			return fmt.Errorf("stele/fsm: cutting %s back to committed offset %d: %w", dir, p.Next, err)
		}
		if err := f.settleFiles(p); err != nil {
			return fmt.Errorf("stele/fsm: %w", err)
		}
		if err := f.resumeCompaction(p); err != nil {
			return fmt.Errorf("stele/fsm: %w", err)
		}
		p.hwm.Store(p.Next)
		p.lso.Store(p.Start)
	}
	return nil
}

// resumeCompaction starts again, in the background, the pass of p that a
// crash or a Close interrupted: the one its plan file names, or, without
// one, the pass the last committed block decided (the crash came before
// its Commit wrote the plan). A plan of a block that was never committed is
// dropped; its block is replayed.
func (f *Topics) resumeCompaction(p *Partition) error {
	opts, planned, err := p.Log.PlannedCompaction()
	switch {
	case err != nil:
		return fmt.Errorf("the compaction plan of %s-%d: %w", p.Topic, p.Index, err)
	case planned && opts.ID > f.Height:
		return p.Log.DropPlannedCompaction()
	case planned:
	case p.compactedAt == f.Height && p.compactedAt > 0:
		opts = f.compactOptions(p)
	default:
		return nil
	}
	return f.planCompaction(p, opts)
}

// removeStrayLogs deletes partition directories that belong to no committed
// topic: leftovers of a deleted topic, or of a block that was applied but
// not committed before a crash.
func (f *Topics) removeStrayLogs() error {
	logs := filepath.Join(f.opts.Dir, "logs")
	entries, err := os.ReadDir(logs)
	if err != nil {
		return fmt.Errorf("stele/fsm: %w", err)
	}
	keep := map[string]bool{}
	for _, t := range f.ByName {
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
