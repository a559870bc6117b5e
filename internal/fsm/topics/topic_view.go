package topics

import (
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
)

// The topics module's types: a topic and its partitions as the applier
// holds them, the committed reads of a partition, and the View of the
// committed topics readers get (published by the topics' publish step,
// topic_state.go).

// ErrPartitionGone is returned by reads of a partition whose topic has been
// deleted since the caller looked it up.
var ErrPartitionGone = errors.New("stele/fsm: partition deleted")

// ErrCorruptLog is returned by a read that met a stored batch whose CRC no
// longer matches: the broker's storage is damaged (or was tampered with),
// and it must not serve what it holds.
var ErrCorruptLog = errors.New("stele/fsm: stored batch fails its CRC")

// ErrUnknownTopic: a read (KeyEvents, ProveBatch, a table read) named a
// topic that does not exist.
var ErrUnknownTopic = errors.New("stele/fsm: unknown topic")

// ErrOffsetOutOfRange is returned by reads below the log start offset or past
// the high watermark.
var ErrOffsetOutOfRange = errors.New("stele/fsm: offset out of range")

// Topic is the replicated state of one topic. Its fields are written only by
// the applier; readers see topics through a View.
type Topic struct {
	Name              string
	ID                core.TopicID
	ReplicationFactor int16
	// Configs holds the explicitly set configs; Config the effective ones.
	Configs    map[string]string
	Config     TopicConfig
	Partitions []*Partition
	// Replicas are the partitions' replicas as a client assigned them
	// (assignments.go): nil when no partition was assigned, else one list
	// per partition, empty for a partition created without an assignment.
	Replicas [][]int32
	Deleted  bool
}

// Partition is one partition's log and offsets. The applier owns next,
// start and the compaction marks; readers use the committed offsets, which
// are published at Commit, and the Read methods.
type Partition struct {
	Topic string
	Index int32
	Log   *storage.Log

	// Applier-owned state, persisted at Commit.
	Next           int64       // log end offset
	Start          int64       // log start offset
	cleanedUpTo    int64       // compaction has processed everything below this offset
	compactHorizon int64       // tombstone horizon of the last compaction decided
	compactedAt    int64       // height that decided it (0: never)
	pendingCompact bool        // decided by the block, to be planned at its Commit
	compaction     *compaction // the pass in the background, until awaited (compactor.go)

	// Idempotent producers' state here (partition_producers.go), applier-owned;
	// dirtyProducers are those the block changed.
	ProducerStates map[int64]*producerState
	dirtyProducers map[int64]bool
	// aborted transactions (partition_txns.go), by marker offset; the block's
	// additions and trims, to persist.
	aborted, abortedAdded, abortedDropped []AbortedTxn

	// Committed state, read by anyone.
	hwm           atomic.Int64
	lso           atomic.Int64
	Removed       atomic.Bool
	producersView atomic.Pointer[[]ProducerInfo]
	abortedView   atomic.Pointer[[]AbortedTxn]
	stable        atomic.Int64 // last stable offset
}

func NewPartition(topic string, index int32) *Partition {
	return &Partition{Topic: topic, Index: index, ProducerStates: map[int64]*producerState{}, dirtyProducers: map[int64]bool{}}
}

// HighWatermark is the offset after the last committed record.
func (p *Partition) HighWatermark() int64 { return p.hwm.Load() }

// LogStartOffset is the first offset a consumer may read.
func (p *Partition) LogStartOffset() int64 { return p.lso.Load() }

// Read returns whole committed batches starting with the one holding offset,
// at most maxBytes but at least one batch (KIP-74). It returns nil at the
// high watermark and ErrOffsetOutOfRange outside [log start, high watermark].
// The first batch may begin before offset (the client skips those records).
func (p *Partition) Read(offset int64, maxBytes int) ([]byte, error) {
	return p.ReadWith(offset, maxBytes, ReadOptions{})
}

// ReadCommitted is Read for read_committed readers: it stops at the last
// stable offset, below which every transaction is decided. (Records of
// aborted transactions are still returned, with AbortedTxns telling the
// reader which to skip, as Kafka does.)
func (p *Partition) ReadCommitted(offset int64, maxBytes int) ([]byte, error) {
	return p.ReadWith(offset, maxBytes, ReadOptions{Committed: true})
}

// ReadOptions says how a read of committed batches ends.
type ReadOptions struct {
	// Committed stops at the last stable offset (ReadCommitted).
	Committed bool
	// Within returns only whole batches that fit in maxBytes, so nothing
	// when the first batch is larger: how Kafka reads the partitions of a
	// fetch after the first that returned data (KIP-74). Without it the
	// first batch goes out whole however large.
	Within bool
}

// ReadWith is Read with the options o.
func (p *Partition) ReadWith(offset int64, maxBytes int, o ReadOptions) ([]byte, error) {
	if p.Removed.Load() {
		return nil, ErrPartitionGone
	}
	hwm, lso := p.hwm.Load(), p.lso.Load()
	if offset < lso || offset > hwm {
		return nil, fmt.Errorf("%w: offset %d, log start %d, high watermark %d", ErrOffsetOutOfRange, offset, lso, hwm)
	}
	upper := hwm
	if o.Committed {
		upper = min(hwm, p.stable.Load())
	}
	if offset >= upper {
		return nil, nil
	}
	read := p.Log.Read
	if o.Within {
		read = p.Log.ReadWithin
	}
	data, err := read(offset, maxBytes, upper)
	if err != nil {
		return nil, err
	}
	// Every batch is checked before it leaves the broker (CRC-32C costs far
	// less than sending the bytes): recovery checks only a log's tail, and
	// bytes damaged on disk later must never be served as committed data.
	for rest := data; len(rest) > 0; {
		h, err := record.ParseHeader(rest)
		if err != nil || h.Size() > len(rest) {
			return nil, fmt.Errorf("%w: %s-%d at offset %d: %v", ErrCorruptLog, p.Topic, p.Index, offset, err)
		}
		if _, err := record.CheckCRC(rest[:h.Size()]); err != nil {
			return nil, fmt.Errorf("%w: %s-%d, batch at offset %d: %v", ErrCorruptLog, p.Topic, p.Index, h.BaseOffset, err)
		}
		rest = rest[h.Size():]
	}
	return data, nil
}

// OffsetForTimestamp returns the first committed offset whose timestamp is at
// least ts (ListOffsets by time); found is false if there is none.
func (p *Partition) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	if p.Removed.Load() {
		return 0, 0, false, ErrPartitionGone
	}
	offset, timestamp, found, err = p.Log.OffsetForTimestamp(ts, p.hwm.Load())
	if found && offset < p.lso.Load() {
		offset = p.lso.Load()
	}
	return offset, timestamp, found, err
}

// MaxTimestamp returns the committed record with the largest timestamp
// (ListOffsets -3, KIP-734); offset -1 when the partition is empty.
func (p *Partition) MaxTimestamp() (offset, timestamp int64, err error) {
	if p.Removed.Load() {
		return 0, 0, ErrPartitionGone
	}
	if p.hwm.Load() == p.lso.Load() {
		return -1, -1, nil
	}
	return p.Log.MaxTimestamp(p.hwm.Load())
}

// TenantStoredBytes is the bytes of the logs of tenant's partitions, every
// segment's, the active one's included, as the block being applied has
// them. It is the same on every broker: each partition's compaction that a
// committed block decided is awaited first, as housekeeping awaits it
// before it reads the segments' sizes, and the segments below a log start
// are deleted at the Commit that moved it. The applier calls it.
func (f *Topics) TenantStoredBytes(tenant string) (int64, error) {
	var n int64
	for _, t := range f.byTenant[tenant] { // a sum: the order does not matter
		for _, p := range t.Partitions {
			if err := f.awaitCompaction(p); err != nil {
				return 0, err
			}
			for _, s := range p.Log.Segments() {
				n += s.Size
			}
		}
	}
	return n, nil
}

// Size is the partition's size on disk in bytes.
func (p *Partition) Size() int64 {
	if p.Removed.Load() {
		return 0
	}
	return p.Log.Size()
}

// View returns the committed topics.
func (f *Topics) View() *View { return f.view.Load() }

// View is an immutable picture of the committed topics. A new View is
// published at every Commit that changed a topic; partitions inside it carry
// live committed offsets.
type View struct {
	Height int64
	names  []string
	topics map[string]*TopicView
	byID   map[core.TopicID]*TopicView
	// logDefaults are the cluster-wide log defaults (log_defaults.go).
	logDefaults map[string]string
}

// TopicView is a committed topic as readers see it. Do not modify it.
type TopicView struct {
	Name              string
	ID                core.TopicID
	ReplicationFactor int16
	Configs           map[string]string
	Config            TopicConfig
	Partitions        []*Partition
	// Replicas are the partitions' assigned replicas (Topic.Replicas).
	Replicas [][]int32
}

// Topics returns the committed topics sorted by name.
func (v *View) Topics() []*TopicView {
	out := make([]*TopicView, len(v.names))
	for i, n := range v.names {
		out[i] = v.topics[n]
	}
	return out
}

// Topic returns the named topic, or nil.
func (v *View) Topic(name string) *TopicView { return v.topics[name] }

// LogDefaults returns the committed cluster-wide log defaults, by broker
// config name (log_defaults.go). Do not modify it.
func (v *View) LogDefaults() map[string]string { return v.logDefaults }

// TopicByID returns the topic with the given ID, or nil.
func (v *View) TopicByID(id core.TopicID) *TopicView { return v.byID[id] }

// Partition returns the partition, or nil if the topic or partition does not exist.
func (v *View) Partition(topic string, index int32) *Partition {
	t := v.topics[topic]
	if t == nil || index < 0 || int(index) >= len(t.Partitions) {
		return nil
	}
	return t.Partitions[index]
}

func buildView(height int64, topics map[string]*Topic, logDefaults map[string]string) *View {
	v := &View{Height: height, topics: make(map[string]*TopicView, len(topics)), byID: make(map[core.TopicID]*TopicView, len(topics)),
		logDefaults: make(map[string]string, len(logDefaults))}
	for k, val := range logDefaults {
		v.logDefaults[k] = val
	}
	for name, t := range topics {
		cfg := make(map[string]string, len(t.Configs))
		for k, val := range t.Configs {
			cfg[k] = val
		}
		tv := &TopicView{Name: t.Name, ID: t.ID, ReplicationFactor: t.ReplicationFactor, Configs: cfg, Config: t.Config,
			Partitions: append([]*Partition(nil), t.Partitions...), Replicas: append([][]int32(nil), t.Replicas...)}
		v.topics[name] = tv
		v.byID[t.ID] = tv
		v.names = append(v.names, name)
	}
	sort.Strings(v.names)
	return v
}
