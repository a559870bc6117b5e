package topics

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/internal/subject"
)

// The topics module's hook points: where the modules above it (keys,
// subjects, groups, producers, trust) act on what happens to a topic or a partition
// log, without the topics module naming them (registry.go's hook). The
// points are the registry's (its embedded topicHooks), made by the topics
// module's registration function (RegisterTopics, topics.go), which
// buildRegistry calls before any module above it; each of those registers
// its hooks from its own registration function, and the ranks fix their
// order (TestHooks). The lists are not changed after buildRegistry.

// Producing is a Produce being applied to one partition: its batches and
// what the record pass found in them, then, once the sequences are
// checked, where each goes. The hooks read it; they do not change it.
type Producing struct {
	T       *Topic
	P       *Partition
	Batches [][]byte        // as the command carries them
	Headers []record.Header // of each batch
	Bases   []int32         // the index of each batch's first record in the record set
	Keys    [][]KeyAt       // the keyed records of each batch
	// Conditional: some record states the version it expects.
	Conditional bool
	Signed      []bool  // the batch has a signed record
	Offsets     []int64 // each batch's base offset (a retry's: the first time's)
	Dup         []bool  // the batch is a retry, not written again
	// Subjects counts each batch's records by subject (nil for a batch
	// with none; the slice is nil under app versions before
	// SubjectsVersion), read by the topic's stele.subject.from.
	Subjects []*subject.Counter
}

// TopicHooks are the topics module's hook points.
type TopicHooks struct {
	// Transforms rewrite a produce's batches before anything else looks
	// at them (the plugins module's produce hooks): given the topic, a
	// hook returns nil when it has nothing to do there, or a function
	// that rewrites one batch (h is its header as sent) and returns the
	// batch to store in its place (nil: as it is) or a refusal of the
	// produce. It is not called for a retried batch of an idempotent
	// producer, nor for a batch the checks that follow refuse as sent.
	Transforms core.HookPoint[func(f *Topics, t *Topic) func(p *Partition, h record.Header, b []byte) ([]byte, core.Result)]
	// BatchChecks check one batch of an idempotent or transactional
	// producer before its sequence is (a refusal refuses the produce).
	BatchChecks core.HookPoint[func(f *Topics, t *Topic, p *Partition, h record.Header) core.Result]
	// ProduceChecks check a produce once its batches' offsets are known,
	// before anything is written; a check may return what to do once the
	// batches are written (nil: nothing).
	ProduceChecks core.HookPoint[func(f *Topics, pr *Producing) (core.Result, func())]
	// BatchAppended: batch i of a produce was appended at offset at (b is
	// the batch as written). A failure is the broker's own (a local fault).
	BatchAppended core.HookPoint[func(f *Topics, pr *Producing, i int, b []byte, at int64) core.Result]
	// MarkerWritten: a transaction marker of producer pid was appended to
	// p at offset at; first is the offset of the transaction's first batch
	// there (-1: it wrote none).
	MarkerWritten core.HookPoint[func(f *Topics, t *Topic, p *Partition, pid int64, commit bool, first, at int64)]
	// LogTrimmed: p's log start moved up (retention, DeleteRecords).
	LogTrimmed core.HookPoint[func(f *Topics, t *Topic, p *Partition)]
	// CompactionDecided: housekeeping decided to compact p's sealed
	// segments segs (all but the last), removing tombstones older than
	// horizon.
	CompactionDecided core.HookPoint[func(f *Topics, t *Topic, p *Partition, segs []storage.SegmentInfo, horizon int64)]
	// ConfigChanged: t's configs changed; was is its resolved config before.
	ConfigChanged core.HookPoint[func(f *Topics, t *Topic, was TopicConfig) core.Result]
	// TopicDeleted: t was deleted by a command of the block.
	TopicDeleted core.HookPoint[func(f *Topics, t *Topic)]
	// TopicDropped stages what the module keeps of a topic deleted in the
	// block, before the topic's own keys go (the topics step, rank 60).
	TopicDropped core.HookPoint[func(f *Topics, t *Topic, b *core.StateBatch)]
	// Housekeepers run at each housekeeping pass, before the partitions'
	// retention and compaction; they describe each change they make.
	Housekeepers core.HookPoint[func(f *Topics) []core.Change]
}

// UnmadeTopicHooks are the hook points of a registry the topics module has
// not registered in yet: registering a hook there panics.
func UnmadeTopicHooks() *TopicHooks { return &TopicHooks{} }

// newTopicHooks makes the topics module's hook points, without hooks.
func newTopicHooks() *TopicHooks {
	return &TopicHooks{
		Transforms:        core.HookPoint[func(f *Topics, t *Topic) func(p *Partition, h record.Header, b []byte) ([]byte, core.Result)]{Name: "transforms", Owner: ModTopics},
		BatchChecks:       core.HookPoint[func(f *Topics, t *Topic, p *Partition, h record.Header) core.Result]{Name: "batch checks", Owner: ModTopics},
		ProduceChecks:     core.HookPoint[func(f *Topics, pr *Producing) (core.Result, func())]{Name: "produce checks", Owner: ModTopics},
		BatchAppended:     core.HookPoint[func(f *Topics, pr *Producing, i int, b []byte, at int64) core.Result]{Name: "batch appended", Owner: ModTopics},
		MarkerWritten:     core.HookPoint[func(f *Topics, t *Topic, p *Partition, pid int64, commit bool, first, at int64)]{Name: "marker written", Owner: ModTopics},
		LogTrimmed:        core.HookPoint[func(f *Topics, t *Topic, p *Partition)]{Name: "log trimmed", Owner: ModTopics},
		CompactionDecided: core.HookPoint[func(f *Topics, t *Topic, p *Partition, segs []storage.SegmentInfo, horizon int64)]{Name: "compaction decided", Owner: ModTopics},
		ConfigChanged:     core.HookPoint[func(f *Topics, t *Topic, was TopicConfig) core.Result]{Name: "config changed", Owner: ModTopics},
		TopicDeleted:      core.HookPoint[func(f *Topics, t *Topic)]{Name: "topic deleted", Owner: ModTopics},
		TopicDropped:      core.HookPoint[func(f *Topics, t *Topic, b *core.StateBatch)]{Name: "topic dropped", Owner: ModTopics},
		Housekeepers:      core.HookPoint[func(f *Topics) []core.Change]{Name: "housekeeping", Owner: ModTopics},
	}
}

// Points lists the hook points, for TestHooks.
func (h *TopicHooks) Points() []core.HookPointer {
	return []core.HookPointer{&h.Transforms, &h.BatchChecks, &h.ProduceChecks, &h.BatchAppended, &h.MarkerWritten,
		&h.LogTrimmed, &h.CompactionDecided, &h.ConfigChanged, &h.TopicDeleted, &h.TopicDropped, &h.Housekeepers}
}

// trimmed runs the logTrimmed hooks.
func (f *Topics) trimmed(t *Topic, p *Partition) {
	for _, h := range f.hooks.LogTrimmed.Hooks {
		h.Fn(f, t, p)
	}
}
