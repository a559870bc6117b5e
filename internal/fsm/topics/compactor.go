package topics

import (
	"errors"
	"fmt"
	"sync"

	"github.com/stele-io/stele/internal/storage"
)

// Compaction off the consensus path (issue 16, item 6).
//
// What a compaction does is decided in apply (housekeep: which partition,
// up to which offset, the tombstone horizon; the policy is the topic's) and
// hashed as now. Commit fixes the pass's inputs (storage.PrepareCompaction:
// the segments sealed at the decision, the key map bounded by the log end
// at the decision, a plan file written durably) and hands the rewrite to a
// goroutine here; the chain goes on at once. Readers read the old segments
// until each rewritten one is swapped in, and nothing they are served
// depends on when that happens beyond which of a key's superseded records
// are still there (docs/keys.md).
//
// Apply must not see the rewrite's progress, since segment sizes and
// timestamps feed retention and the next compaction decision, which are
// hashed. So the next housekeeping pass over the partition waits for the
// pass to finish (awaitCompaction) before reading its segments: every
// broker then decides from the compacted files, as when compaction ran in
// Commit. The chain waits there only if a rewrite takes longer than
// HousekeepingIntervalMs of block time. CaptureSnapshot waits for every
// pass too, so a snapshot holds the same files on every broker.
//
// Passes of one partition run one after the other (a new one is decided
// only after the last one was awaited, and storage serialises passes of a
// log); Options.CompactionWorkers bounds how many run at once in all.

// compaction is a pass handed to the background.
type compaction struct {
	p     *Partition
	done  chan struct{} // closed when the pass returned
	stats storage.CompactStats
	err   error
}

// compactor runs the passes and owns their goroutines: Close stops the
// passes (by closing their logs) and waits for the goroutines.
type compactor struct {
	slots chan struct{} // one token per pass allowed to run at once
	Wg    sync.WaitGroup
}

func newCompactor(workers int) *compactor {
	return &compactor{slots: make(chan struct{}, workers)}
}

// start runs pass for p in the background; p.compaction tracks it until
// awaitCompaction.
func (f *Topics) startCompaction(p *Partition, pass *storage.CompactionPass) {
	c := &compaction{p: p, done: make(chan struct{})}
	p.compaction = c
	cp := f.Compactor
	cp.Wg.Add(1)
	go func() {
		defer cp.Wg.Done()
		defer close(c.done)
		cp.slots <- struct{}{}
		defer func() { <-cp.slots }()
		if hook := f.opts.PassHookForTest; hook != nil {
			hook(p.Topic, p.Index)
		}
		c.stats, c.err = pass.Run()
	}()
}

// awaitCompaction waits for p's pass in flight, if any, and returns its
// error (a local fault: the plan stays, and Open runs the pass again).
// Applier only.
func (f *Topics) awaitCompaction(p *Partition) error {
	c := p.compaction
	if c == nil {
		return nil
	}
	<-c.done
	p.compaction = nil
	if c.err != nil {
		return fmt.Errorf("compacting %s-%d: %w", p.Topic, p.Index, c.err)
	}
	f.opts.Logger.Debug("compaction finished", "topic", p.Topic, "partition", p.Index,
		"segments_cleaned", c.stats.SegmentsCleaned, "bytes_before", c.stats.BytesBefore, "bytes_after", c.stats.BytesAfter)
	return nil
}

// WaitCompactions waits until every compaction decided by a committed block
// has been written, and returns the first pass's error. The applier calls
// it (CaptureSnapshot does); tests call it to look at compacted files.
func (f *Topics) WaitCompactions() error {
	var errs []error
	for _, name := range SortedNames(f.ByName) {
		for _, p := range f.ByName[name].Partitions {
			errs = append(errs, f.awaitCompaction(p))
		}
	}
	return errors.Join(errs...)
}

// CompactionRunning reports whether a pass of p is still being written.
func (p *Partition) CompactionRunning() bool {
	if p.compaction == nil {
		return false
	}
	select {
	case <-p.compaction.done:
		return false
	default:
		return true
	}
}

// compactOptions are the options of p's decided pass: the topic's policy,
// the decision's horizon and bounds (UpTo, the active segment's base when it
// was decided; End, the log end then, which is p.next in the Commit of the
// deciding block).
func (f *Topics) compactOptions(p *Partition) storage.CompactOptions {
	opts := storage.CompactOptions{Latest: true, DeleteHorizon: p.compactHorizon, UpTo: p.cleanedUpTo, End: p.Next, ID: p.compactedAt}
	if t := f.ByName[p.Topic]; t != nil {
		opts.Latest = t.Config.Compact
		if t.Config.Snapshot {
			opts.SnapshotHeader = SnapshotHeader
		}
	}
	return opts
}
