package fsm

import (
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
	batchChecks hookPoint[func(f *FSM, t *Topic, p *Partition, h record.Header) Result]
	// produceChecks check a produce once its batches' offsets are known,
	// before anything is written; a check may return what to do once the
	// batches are written (nil: nothing).
	produceChecks hookPoint[func(f *FSM, pr *producing) (Result, func())]
	// batchAppended: batch i of a produce was appended at offset at (b is
	// the batch as written). A failure is the broker's own (a local fault).
	batchAppended hookPoint[func(f *FSM, pr *producing, i int, b []byte, at int64) Result]
	// markerWritten: a transaction marker of producer pid was appended to
	// p at offset at; first is the offset of the transaction's first batch
	// there (-1: it wrote none).
	markerWritten hookPoint[func(f *FSM, t *Topic, p *Partition, pid int64, commit bool, first, at int64)]
	// logTrimmed: p's log start moved up (retention, DeleteRecords).
	logTrimmed hookPoint[func(f *FSM, t *Topic, p *Partition)]
	// compactionDecided: housekeeping decided to compact p's sealed
	// segments segs (all but the last), removing tombstones older than
	// horizon.
	compactionDecided hookPoint[func(f *FSM, t *Topic, p *Partition, segs []storage.SegmentInfo, horizon int64)]
	// configChanged: t's configs changed; was is its resolved config before.
	configChanged hookPoint[func(f *FSM, t *Topic, was TopicConfig) Result]
	// topicDeleted: t was deleted by a command of the block.
	topicDeleted hookPoint[func(f *FSM, t *Topic)]
	// topicDropped stages what the module keeps of a topic deleted in the
	// block, before the topic's own keys go (the topics step, rank 60).
	topicDropped hookPoint[func(f *FSM, t *Topic, b *stateBatch)]
	// housekeepers run at each housekeeping pass, before the partitions'
	// retention and compaction; they describe each change they make.
	housekeepers hookPoint[func(f *FSM) []change]
}

// newTopicHooks makes the topics module's hook points, without hooks.
func newTopicHooks() topicHooks {
	return topicHooks{
		batchChecks:       hookPoint[func(f *FSM, t *Topic, p *Partition, h record.Header) Result]{name: "batch checks", owner: modTopics},
		produceChecks:     hookPoint[func(f *FSM, pr *producing) (Result, func())]{name: "produce checks", owner: modTopics},
		batchAppended:     hookPoint[func(f *FSM, pr *producing, i int, b []byte, at int64) Result]{name: "batch appended", owner: modTopics},
		markerWritten:     hookPoint[func(f *FSM, t *Topic, p *Partition, pid int64, commit bool, first, at int64)]{name: "marker written", owner: modTopics},
		logTrimmed:        hookPoint[func(f *FSM, t *Topic, p *Partition)]{name: "log trimmed", owner: modTopics},
		compactionDecided: hookPoint[func(f *FSM, t *Topic, p *Partition, segs []storage.SegmentInfo, horizon int64)]{name: "compaction decided", owner: modTopics},
		configChanged:     hookPoint[func(f *FSM, t *Topic, was TopicConfig) Result]{name: "config changed", owner: modTopics},
		topicDeleted:      hookPoint[func(f *FSM, t *Topic)]{name: "topic deleted", owner: modTopics},
		topicDropped:      hookPoint[func(f *FSM, t *Topic, b *stateBatch)]{name: "topic dropped", owner: modTopics},
		housekeepers:      hookPoint[func(f *FSM) []change]{name: "housekeeping", owner: modTopics},
	}
}

// points lists the hook points, for TestHooks.
func (h *topicHooks) points() []hookPointer {
	return []hookPointer{&h.batchChecks, &h.produceChecks, &h.batchAppended, &h.markerWritten,
		&h.logTrimmed, &h.compactionDecided, &h.configChanged, &h.topicDeleted, &h.topicDropped, &h.housekeepers}
}

// trimmed runs the logTrimmed hooks.
func (f *FSM) trimmed(t *Topic, p *Partition) {
	for _, h := range f.reg.logTrimmed.hooks {
		h.fn(f, t, p)
	}
}
