package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// PlanFile is the name of the file, in a partition directory, that holds
// the compaction pass decided and not yet finished (PrepareCompaction).
const PlanFile = "compaction.plan"

// errEndOfPass stops the key map's scan at the pass's end offset.
var errEndOfPass = errors.New("stele/storage: end of compaction pass")

// CompactionPass is a compaction whose inputs are fixed: the segments it
// reads and may rewrite, the offset its key map stops at, the log settings
// its indexes follow. It is prepared by the applier and run on any
// goroutine, so that rewriting a large log never holds the applier up; what
// it writes depends only on those inputs, so every broker that runs the same
// decided pass writes the same bytes, however far its appends have gone
// meanwhile.
type CompactionPass struct {
	log  *Log
	opts CompactOptions
	cfg  LogConfig
	end  int64         // the key map reads batches below it
	segs []pinnedSeg   // the log's segments when prepared, each referenced
	plan bool          // a plan file was written; Run removes it
	done chan struct{} // closed when the references are dropped
}

// pinnedSeg is a segment of a pass, with its size when the pass was
// prepared (the active one keeps growing).
type pinnedSeg struct {
	seg        *segment
	size, next int64
}

// plan is PlanFile's content (JSON).
type plan struct {
	ID             int64  `json:"id"`
	Latest         bool   `json:"latest"`
	DeleteHorizon  int64  `json:"delete_horizon"`
	SnapshotHeader string `json:"snapshot_header,omitempty"`
	UpTo           int64  `json:"up_to"`
	End            int64  `json:"end"`
}

// PrepareCompaction fixes a pass of opts on the log as it is now and writes
// its plan durably to PlanFile, so that a crash before the pass finishes
// leaves what is needed to run it again (PlannedCompaction). It is for the
// applier and costs a small file's write and fsyncs; the pass itself, Run,
// may then run on any goroutine. The log must be durable up to opts.End (the
// state machine prepares passes in Commit, after its logs are synced).
//
// Until Run finishes, the log's segments that the pass has not yet rewritten
// are read as they were; appends, rolls and segment deletions go on (a
// deleted segment is simply not rewritten). Release drops a pass that will
// not run.
func (l *Log) PrepareCompaction(opts CompactOptions) (*CompactionPass, error) {
	return l.prepare(opts, true)
}

func (l *Log) prepare(opts CompactOptions, durable bool) (*CompactionPass, error) {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	if opts.End == 0 || opts.UpTo == 0 {
		// Bounds from the log as it is: the key map covers the active
		// segment, so it must be durable before the segments it shapes.
		if err := l.syncLocked(); err != nil {
			return nil, err
		}
	}
	p := &CompactionPass{log: l, opts: opts, cfg: l.cfg, end: opts.End, done: make(chan struct{})}
	l.mu.RLock()
	active := l.active()
	if p.end == 0 {
		p.end = active.next
	}
	if p.opts.UpTo == 0 {
		p.opts.UpTo = active.base
	}
	for _, s := range l.mu.segs {
		s.ref()
		p.segs = append(p.segs, pinnedSeg{s, s.size, s.next})
	}
	l.mu.RUnlock()
	p.opts.End = p.end
	if p.end > active.next {
		p.Release()
		return nil, fmt.Errorf("%w: compaction up to offset %d, the log ends at %d", ErrOffsetOutOfRange, p.end, active.next)
	}
	if durable {
		if err := writePlan(l.dir, p.opts); err != nil {
			p.Release()
			return nil, err
		}
		p.plan = true
	}
	return p, nil
}

// PlannedCompaction returns the pass whose plan the log's directory holds,
// written by PrepareCompaction and not yet removed by its Run: a pass that a
// crash or a Close interrupted. Its options are those the pass was prepared
// with; PrepareCompaction(opts) runs it again.
func (l *Log) PlannedCompaction() (CompactOptions, bool, error) {
	b, err := os.ReadFile(filepath.Join(l.dir, PlanFile))
	if errors.Is(err, fs.ErrNotExist) {
		return CompactOptions{}, false, nil
	}
	if err != nil {
		return CompactOptions{}, false, fmt.Errorf("stele/storage: %w", err)
	}
	var pl plan
	if err := json.Unmarshal(b, &pl); err != nil {
		return CompactOptions{}, false, corruptAt(filepath.Join(l.dir, PlanFile), 0, err.Error())
	}
	return CompactOptions{ID: pl.ID, Latest: pl.Latest, DeleteHorizon: pl.DeleteHorizon, SnapshotHeader: pl.SnapshotHeader,
		UpTo: pl.UpTo, End: pl.End}, true, nil
}

// DropPlannedCompaction removes the plan file, if any: the caller has
// decided that the pass it describes will not run (the state machine, for a
// plan written by a block that was never committed).
func (l *Log) DropPlannedCompaction() error {
	if err := os.Remove(filepath.Join(l.dir, PlanFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stele/storage: %w", err)
	}
	return nil
}

// Options returns the options the pass runs with, its bounds filled in.
func (p *CompactionPass) Options() CompactOptions { return p.opts }

// Run rewrites the pass's segments (Compact's rules) and returns what it
// did; it removes the plan file once every segment is swapped in. It waits
// for another pass of the same log to finish first. A Close or Remove of
// the log stops it at its next batch with ErrClosed, the plan kept. Run
// releases the pass: call it once.
func (p *CompactionPass) Run() (CompactStats, error) {
	defer p.Release()
	l := p.log
	l.passMu.Lock()
	defer l.passMu.Unlock()
	var stats CompactStats
	if err := p.stopping(); err != nil {
		return stats, err
	}
	km, err := p.buildKeyMap()
	if err != nil {
		return stats, err
	}
	stats.Keys = len(km.latest)
	for _, s := range p.segs {
		if !CleansSegment(s.seg.base, s.next, p.opts.UpTo, km.firstUnstable) { // tombstones.go
			break
		}
		stats.SegmentsExamined++
		if err := p.cleanSegment(s.seg, s.size, km, &stats); err != nil {
			return stats, err
		}
	}
	if p.plan {
		if err := os.Remove(filepath.Join(l.dir, PlanFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return stats, fmt.Errorf("stele/storage: %w", err)
		}
		// Not fsynced: a plan that reappears after a crash runs again and
		// changes nothing.
	}
	return stats, nil
}

// Release drops the pass's references to the log's segments. It may be
// called more than once.
func (p *CompactionPass) Release() {
	select {
	case <-p.done:
		return
	default:
	}
	for _, s := range p.segs {
		s.seg.unref()
	}
	close(p.done)
}

// stopping returns ErrClosed once Close or Remove of the log began.
func (p *CompactionPass) stopping() error {
	if p.log.stop.Load() {
		return ErrClosed
	}
	return nil
}

// writePlan writes PlanFile durably: a temporary file, fsynced, renamed,
// the directory fsynced.
func writePlan(dir string, opts CompactOptions) error {
	b, err := json.Marshal(plan{ID: opts.ID, Latest: opts.Latest, DeleteHorizon: opts.DeleteHorizon,
		SnapshotHeader: opts.SnapshotHeader, UpTo: opts.UpTo, End: opts.End})
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	name := filepath.Join(dir, PlanFile)
	f, err := os.Create(name + ".tmp")
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name+".tmp", name)
	}
	if err != nil {
		return fmt.Errorf("stele/storage: writing %s: %w", name, err)
	}
	return SyncDir(dir)
}
