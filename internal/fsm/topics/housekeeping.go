package topics

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/storage"
)

// Housekeeping is the topics module's step at the end of a block, after
// the groups' and the transactions' timers (registry.go); the block time
// of its last pass is m/state's state mark (registry.go, persist.go).
// RegisterTopics calls it.
func registerHousekeeping(r *core.Registry) {
	core.RegisterModuleBlockEnd(r, topicsOf, core.ModuleBlockEnd[*Topics]{Rank: 30, Name: "housekeeping", Module: ModTopics, Run: (*Topics).housekeep})
	// The block time of the last pass is kept in the core's m/state.
	core.RegisterModuleStateMark(r, topicsOf, core.ModuleStateMark[*Topics]{Name: "last housekeeping", Module: ModTopics,
		Value:   func(f *Topics) int64 { return f.LastHousekeep },
		Restore: func(f *Topics, t int64) { f.LastHousekeep = t }})
}

// housekeep runs the housekeepers' hooks (topic_hooks.go), then, for each
// partition, expires idle producers, runs retention and decides
// compactions, at most once per HousekeepingIntervalMs of block time, and
// describes each change it made (for the app hash). Everything it reads
// (configs, block time, the segments' committed sizes and timestamps, once
// the partition's last compaction has been awaited) is the same on every
// broker; the files it decides to delete or compact are changed after
// Commit.
func (f *Topics) housekeep() (changes []core.Change) {
	if f.BlockTime-f.LastHousekeep < f.opts.HousekeepingIntervalMs {
		return nil
	}
	f.LastHousekeep = f.BlockTime
	for _, h := range f.hooks.Housekeepers.Hooks {
		changes = append(changes, h.Fn(f)...)
	}
	for _, name := range SortedNames(f.ByName) {
		t := f.ByName[name]
		for _, p := range t.Partitions {
			changes = append(changes, f.expireProducers(p)...)
			if p.trimAborted() {
				f.dirtyParts[p] = true
			}
			// The segments' sizes and timestamps decide what follows:
			// they must be the compacted ones on every broker.
			if err := f.awaitCompaction(p); err != nil {
				f.Faulted(err)
				return nil
			}
			segs := p.Log.Segments()
			if t.Config.Delete {
				if start := retentionStart(t.Config, segs, p.Next, f.BlockTime); start > p.Start {
					p.Start = start
					f.dirtyParts[p] = true
					f.trimmed(t, p)
					changes = append(changes, core.Change{Kind: core.ChangeRetention, Name: t.Name, A: int64(p.Index), B: start})
				}
			}
			if (t.Config.Compact || t.Config.Snapshot) && compactionDue(t.Config, segs, p.cleanedUpTo) {
				p.cleanedUpTo = segs[len(segs)-1].BaseOffset
				p.compactHorizon = f.BlockTime - t.Config.DeleteRetentionMs
				p.compactedAt = f.Height
				p.pendingCompact = true
				f.dirtyParts[p] = true
				for _, h := range f.hooks.CompactionDecided.Hooks {
					h.Fn(f, t, p, segs, p.compactHorizon)
				}
				changes = append(changes, core.Change{Kind: core.ChangeCompact, Name: t.Name, A: int64(p.Index), B: p.cleanedUpTo, C: p.compactHorizon})
			}
		}
	}
	return changes
}

// retentionStart returns the log start offset retention allows: Kafka's rules
// for retention.ms (a segment goes once its largest timestamp is older than
// the retention) and retention.bytes (oldest segments go while the log
// without them is still at least that size). The active segment counts too,
// except when empty, as in Kafka.
func retentionStart(c TopicConfig, segs []storage.SegmentInfo, next, now int64) int64 {
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	drop := 0
	for i, s := range segs {
		if s.Size == 0 {
			break
		}
		byTime := c.RetentionMs >= 0 && s.MaxTimestamp >= 0 && now-s.MaxTimestamp > c.RetentionMs
		bySize := c.RetentionBytes >= 0 && total-s.Size >= c.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.Size
		drop = i + 1
	}
	if drop == 0 {
		return 0
	}
	if drop == len(segs) {
		return next
	}
	return segs[drop].BaseOffset
}

// compactionDue reports whether the sealed segments hold enough data that
// compaction has not seen: min.cleanable.dirty.ratio of their bytes.
func compactionDue(c TopicConfig, segs []storage.SegmentInfo, cleanedUpTo int64) bool {
	if len(segs) < 2 {
		return false
	}
	var total, dirty int64
	for _, s := range segs[:len(segs)-1] {
		total += s.Size
		if s.BaseOffset >= cleanedUpTo {
			dirty += s.Size
		}
	}
	return dirty > 0 && dirty*ratioScale >= c.MinCleanableDirtyRatioPPM*total
}
