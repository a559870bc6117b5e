// Package subjects is the state machine's subjects module (issue 15,
// docs/subjects.md): what a partition keeps of its records' subjects, so
// that a read by pattern skips the batches that cannot match without
// reading them, and the subjects seen in each topic with their counts.
//
// A record's subject is found and checked by the topics module in its one
// pass over a produced batch's records (topics.recordSubject, from app
// version 11), which counts each batch's records by subject
// (Producing.Subjects); this module keeps, in the deterministic apply and
// in the same synced batch as the rest of a block's state:
//
//	j/b/<topic id [16]><partition u32><batch's last offset u64>
//	        the batch's summary (subject.EncodeSummary), for each batch
//	        with at least one subject; keyed by the last offset so that
//	        the first entry at or after an offset is the first batch that
//	        may hold it, and a moved log start drops whole batches
//	j/c/<topic id [16]><subject>
//	        uvarint: how many records with the subject the topic's
//	        partitions have been given (written, whether later removed by
//	        retention, compaction or an aborted transaction)
//
// Both are derived from the logs, as the key stream index is, and are
// outside the state trie (core/authstate.go); snapshots carry them. A
// batch a view copies is summarised too (Summarized, which the views
// module calls). The module uses the topics module below it (its types,
// the produce's appended batches, a trimmed log, a dropped topic) and no
// other; for topics whose subjects come from a schema field
// (stele.subject.from=field:PATH), reads find each record's subject with
// the registry through CommittedSubjectOfField, which the state machine
// sets to the schemas module's.
package subjects

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/subject"
)

// ModSubjects is the subjects module's name.
const ModSubjects core.Module = "subjects"

// Subjects is the subjects module of a state machine: the core's machine
// it runs on, the topics module below it, and the block's staged changes.
type Subjects struct {
	*core.Machine
	*topics.Topics
	// CommittedSubjectOfField finds a field of a schema-encoded value with
	// the tenant's committed registry, for reads of topics whose subjects
	// come from a field (set by the schemas module; nil: none).
	CommittedSubjectOfField func(tenant string, value []byte, path []string) ([]byte, bool, error)
	added                   []summaryAt         // the block's batch summaries
	counts                  map[countRef]uint64 // the block's records by topic and subject
	trims                   []trim              // the block's moved log starts
}

// summaryAt is one batch's summary, staged until the block's Commit.
type summaryAt struct {
	topic     *topics.Topic
	partition int32
	last      int64
	summary   []byte
}

// countRef names a subject in a topic.
type countRef struct {
	topic   *topics.Topic
	subject string
}

// NewSubjects is the subjects module of the machine m, above the topics
// module t.
func NewSubjects(m *core.Machine, t *topics.Topics) *Subjects {
	return &Subjects{Machine: m, Topics: t, counts: map[countRef]uint64{}}
}

// subjectsOf is the subjects module of the machine m.
func subjectsOf(m *core.Machine) *Subjects {
	return m.App.(interface{ SubjectsModule() *Subjects }).SubjectsModule()
}

// The store prefixes.
const (
	summaryPrefix = "j/b/"
	countPrefix   = "j/c/"
)

// SummaryPartitionPrefix is the prefix of partition pi's batch summaries.
func SummaryPartitionPrefix(id core.TopicID, pi int32) []byte {
	k := append([]byte(summaryPrefix), id[:]...)
	return binary.BigEndian.AppendUint32(k, uint32(pi))
}

// summaryKey is the key of the summary of the batch ending at last.
func summaryKey(id core.TopicID, pi int32, last int64) []byte {
	return binary.BigEndian.AppendUint64(SummaryPartitionPrefix(id, pi), uint64(last))
}

// CountPrefix is the prefix of the topic's subject counts.
func CountPrefix(id core.TopicID) []byte { return append([]byte(countPrefix), id[:]...) }

// RegisterSubjects is the subjects module's registration function
// (buildRegistry).
func RegisterSubjects(r *core.Registry, h *topics.TopicHooks) {
	// Before the topics' deletions (rank 60), after the key stream
	// entries (30): a topic produced to and deleted in one block leaves
	// nothing.
	core.RegisterModuleStep(r, subjectsOf, core.ModuleStep[*Subjects]{Rank: 32, Name: "subject summaries and counts", Module: ModSubjects,
		Stage: stage,
		Forget: func(f *Subjects) {
			clear(f.added)
			f.added = f.added[:0]
			clear(f.counts)
			f.trims = f.trims[:0]
		}})
	h.BatchAppended.Register(25, "subject summaries", ModSubjects, func(tm *topics.Topics, pr *topics.Producing, i int, _ []byte, at int64) core.Result {
		if pr.Subjects == nil || pr.Subjects[i] == nil {
			return core.Result{}
		}
		Summarized(tm.Machine, pr.T, pr.P.Index, at+int64(pr.Headers[i].LastOffsetDelta), pr.Subjects[i])
		return core.Result{}
	})
	h.LogTrimmed.Register(20, "subject summaries", ModSubjects, func(tm *topics.Topics, t *topics.Topic, p *topics.Partition) {
		// Batches wholly below the new log start are gone: so are their
		// summaries. (Staged at once: the block's later summaries are
		// all at or above the start.)
		f := subjectsOf(tm.Machine)
		f.trims = append(f.trims, trim{t, p.Index, p.Start})
	})
	h.TopicDropped.Register(25, "subject summaries and counts", ModSubjects, func(_ *topics.Topics, t *topics.Topic, b *core.StateBatch) {
		b.B.DeletePrefix(append([]byte(summaryPrefix), t.ID[:]...))
		b.B.DeletePrefix(CountPrefix(t.ID))
	})
}

// Summarized keeps the summary of a batch of partition pi of t ending at
// last, whose records have the subjects c counted: for a produced batch
// (the batch appended hook), and for a batch the views module copied into
// a view (whose records carry their subjects in the stele-subject header).
func Summarized(m *core.Machine, t *topics.Topic, pi int32, last int64, c *subject.Counter) {
	f := subjectsOf(m)
	s := subject.Summarize(c.Entries)
	if p := t.Config.SubjectFrom; p != nil {
		s.FromJSON, s.Pointer = true, p.String()
	} else if path := t.Config.SubjectField; path != nil {
		s.FromField, s.Field = true, strings.Join(path, ".")
	}
	f.added = append(f.added, summaryAt{t, pi, last, subject.EncodeSummary(nil, s)})
	for _, e := range c.Entries {
		f.counts[countRef{t, string(e.Subject)}] += e.Count
	}
}

// stage writes the block's summaries and adds its counts to the
// committed ones, in key order (a sorted run is cheap for the store's
// memtable). Nothing here is authenticated (authstate.go).
func stage(f *Subjects, b *core.StateBatch) error {
	for _, tr := range f.trims {
		if !tr.topic.Deleted {
			pre := SummaryPartitionPrefix(tr.topic.ID, tr.partition)
			b.B.DeleteRange(pre, binary.BigEndian.AppendUint64(bytes.Clone(pre), uint64(tr.start)))
		}
	}
	type kv struct{ k, v []byte }
	sums := make([]kv, 0, len(f.added))
	for _, a := range f.added {
		if !a.topic.Deleted {
			sums = append(sums, kv{summaryKey(a.topic.ID, a.partition, a.last), a.summary})
		}
	}
	slices.SortFunc(sums, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, s := range sums {
		b.B.Set(s.k, s.v)
	}
	type kn struct {
		k []byte
		n uint64
	}
	counts := make([]kn, 0, len(f.counts))
	for r, n := range f.counts {
		if !r.topic.Deleted {
			counts = append(counts, kn{append(CountPrefix(r.topic.ID), r.subject...), n})
		}
	}
	slices.SortFunc(counts, func(a, b kn) int { return bytes.Compare(a.k, b.k) })
	for _, c := range counts {
		n := c.n
		old, ok, err := f.Store.Get(c.k)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading a subject's count: %w", err)
		}
		if ok {
			prev, k := binary.Uvarint(old)
			if k <= 0 {
				return fmt.Errorf("stele/fsm: subject count %q is malformed", c.k)
			}
			n += prev
		}
		b.B.Set(c.k, binary.AppendUvarint(nil, n))
	}
	return nil
}

// trim is a partition whose log start moved up in the block.
type trim struct {
	topic     *topics.Topic
	partition int32
	start     int64
}
