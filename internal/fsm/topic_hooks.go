package fsm

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
)

// The topics module's hook points: where the modules above it (keys,
// groups, producers, trust) act on what happens to a topic or a partition
// log, without the topics module naming them (registry.go's hook). The
// points are the registry's (its embedded topicHooks), made by the topics
// module's registration function (registerTopics, topics.go), which
// buildRegistry calls before any module above it; each of those registers
// its hooks from its own registration function, and the ranks fix their
// order (TestHooks). The lists are not changed after buildRegistry.

// producing is a Produce being applied to one partition: its batches and
// what the record pass found in them, then, once the sequences are
// checked, where each goes. The hooks read it; they do not change it.
type producing struct {
	t       *Topic
	p       *Partition
	batches [][]byte        // as the command carries them
	headers []record.Header // of each batch
	bases   []int32         // the index of each batch's first record in the record set
	keys    [][]keyAt       // the keyed records of each batch
	// conditional: some record states the version it expects.
	conditional bool
	signed      []bool  // the batch has a signed record
	offsets     []int64 // each batch's base offset (a retry's: the first time's)
	dup         []bool  // the batch is a retry, not written again
}

// topicHooks are the topics module's hook points.
type topicHooks struct {
	// batchChecks check one batch of an idempotent or transactional
	// producer before its sequence is (a refusal refuses the produce).
	batchChecks core.HookPoint[func(f *Topics, t *Topic, p *Partition, h record.Header) core.Result]
	// produceChecks check a produce once its batches' offsets are known,
	// before anything is written; a check may return what to do once the
	// batches are written (nil: nothing).
	produceChecks core.HookPoint[func(f *Topics, pr *producing) (core.Result, func())]
	// batchAppended: batch i of a produce was appended at offset at (b is
	// the batch as written). A failure is the broker's own (a local fault).
	batchAppended core.HookPoint[func(f *Topics, pr *producing, i int, b []byte, at int64) core.Result]
	// markerWritten: a transaction marker of producer pid was appended to
	// p at offset at; first is the offset of the transaction's first batch
	// there (-1: it wrote none).
	markerWritten core.HookPoint[func(f *Topics, t *Topic, p *Partition, pid int64, commit bool, first, at int64)]
	// logTrimmed: p's log start moved up (retention, DeleteRecords).
	logTrimmed core.HookPoint[func(f *Topics, t *Topic, p *Partition)]
	// compactionDecided: housekeeping decided to compact p's sealed
	// segments segs (all but the last), removing tombstones older than
	// horizon.
	compactionDecided core.HookPoint[func(f *Topics, t *Topic, p *Partition, segs []storage.SegmentInfo, horizon int64)]
	// configChanged: t's configs changed; was is its resolved config before.
	configChanged core.HookPoint[func(f *Topics, t *Topic, was TopicConfig) core.Result]
	// topicDeleted: t was deleted by a command of the block.
	topicDeleted core.HookPoint[func(f *Topics, t *Topic)]
	// topicDropped stages what the module keeps of a topic deleted in the
	// block, before the topic's own keys go (the topics step, rank 60).
	topicDropped core.HookPoint[func(f *Topics, t *Topic, b *core.StateBatch)]
	// housekeepers run at each housekeeping pass, before the partitions'
	// retention and compaction; they describe each change they make.
	housekeepers core.HookPoint[func(f *Topics) []core.Change]
}

// unmadeTopicHooks are the hook points of a registry the topics module has
// not registered in yet: registering a hook there panics.
func unmadeTopicHooks() *topicHooks { return &topicHooks{} }

// newTopicHooks makes the topics module's hook points, without hooks.
func newTopicHooks() *topicHooks {
	return &topicHooks{
		batchChecks:       core.HookPoint[func(f *Topics, t *Topic, p *Partition, h record.Header) core.Result]{Name: "batch checks", Owner: modTopics},
		produceChecks:     core.HookPoint[func(f *Topics, pr *producing) (core.Result, func())]{Name: "produce checks", Owner: modTopics},
		batchAppended:     core.HookPoint[func(f *Topics, pr *producing, i int, b []byte, at int64) core.Result]{Name: "batch appended", Owner: modTopics},
		markerWritten:     core.HookPoint[func(f *Topics, t *Topic, p *Partition, pid int64, commit bool, first, at int64)]{Name: "marker written", Owner: modTopics},
		logTrimmed:        core.HookPoint[func(f *Topics, t *Topic, p *Partition)]{Name: "log trimmed", Owner: modTopics},
		compactionDecided: core.HookPoint[func(f *Topics, t *Topic, p *Partition, segs []storage.SegmentInfo, horizon int64)]{Name: "compaction decided", Owner: modTopics},
		configChanged:     core.HookPoint[func(f *Topics, t *Topic, was TopicConfig) core.Result]{Name: "config changed", Owner: modTopics},
		topicDeleted:      core.HookPoint[func(f *Topics, t *Topic)]{Name: "topic deleted", Owner: modTopics},
		topicDropped:      core.HookPoint[func(f *Topics, t *Topic, b *core.StateBatch)]{Name: "topic dropped", Owner: modTopics},
		housekeepers:      core.HookPoint[func(f *Topics) []core.Change]{Name: "housekeeping", Owner: modTopics},
	}
}

// points lists the hook points, for TestHooks.
func (h *topicHooks) points() []core.HookPointer {
	return []core.HookPointer{&h.batchChecks, &h.produceChecks, &h.batchAppended, &h.markerWritten,
		&h.logTrimmed, &h.compactionDecided, &h.configChanged, &h.topicDeleted, &h.topicDropped, &h.housekeepers}
}

// trimmed runs the logTrimmed hooks.
func (f *Topics) trimmed(t *Topic, p *Partition) {
	for _, h := range f.hooks.logTrimmed.Hooks {
		h.Fn(f, t, p)
	}
}
