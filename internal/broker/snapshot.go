package broker

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/fsm"
)

// Defaults of SnapshotOptions.
const (
	// DefaultSnapshotInterval: a snapshot every 1000 heights. Under load
	// (tens of blocks a second) that is one a minute or so; taking one
	// holds the applier up for milliseconds (a store checkpoint and pins of
	// the logs: BenchmarkCaptureSnapshot, 5 ms for 100 partitions) and
	// building it reads only what changed since the previous one.
	DefaultSnapshotInterval = 1000
	// DefaultSnapshotKeep: the latest snapshot and the one before, so a
	// peer fetching the older one when a new one appears can finish.
	DefaultSnapshotKeep = 2
	// DefaultRetainBlocks: blocks kept below the committed height so that a
	// broker that was down catches up by block sync, without a wipe. At
	// tens of blocks a second under load that covers several minutes of
	// downtime (a crash and restart, a reboot); idle (one empty block every
	// 2 s) several hours. Blocks carry the record bytes, so this costs
	// about that many seconds of produce throughput in disk.
	DefaultRetainBlocks = 10000
)

// SnapshotOptions configures the snapshots a broker takes and serves for
// state sync, and how many blocks it asks the orderer to keep.
type SnapshotOptions struct {
	// Dir holds one directory per snapshot (named by its height) and the
	// staging directory of a restore. It must be on the data directory's
	// file system: snapshots hard-link segment files, and a restore renames
	// its staged state into place. Required.
	Dir string
	// Interval: a snapshot is taken after committing every height that is
	// a multiple of Interval. 0 means DefaultSnapshotInterval; negative
	// takes none (restoring a peer's snapshot still works), and then no
	// block is ever pruned.
	Interval int64
	// Keep is how many complete snapshots are kept; 0 means
	// DefaultSnapshotKeep.
	Keep int
	// RetainBlocks is how many blocks below the committed height the
	// orderer keeps; 0 means DefaultRetainBlocks, negative none (blocks
	// below the latest snapshot all go). It must exceed the heights the
	// chain advances while a node state-syncs (discovery, transfer): the
	// joiner then fetches the blocks after its snapshot from its peers.
	RetainBlocks int64
	Logger       *slog.Logger
}

func (o *SnapshotOptions) setDefaults() {
	if o.Interval == 0 {
		o.Interval = DefaultSnapshotInterval
	}
	if o.Keep <= 0 {
		o.Keep = DefaultSnapshotKeep
	}
	switch {
	case o.RetainBlocks == 0:
		o.RetainBlocks = DefaultRetainBlocks
	case o.RetainBlocks < 0:
		o.RetainBlocks = 0
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// restoreDir is the staging directory of a restore, inside Dir.
const restoreDir = "restore"

// SnapshotApp wraps a consensus.Application over an fsm with state sync:
// it implements consensus.Snapshotter, takes a snapshot after committing
// every Interval-th height, and turns the application's retain height into
// one that keeps what peers need: blocks below
//
//	min(retain height - RetainBlocks, height of the latest snapshot)
//
// may be pruned, and none while there is no snapshot. A node joining by
// state sync restores the latest snapshot, then fetches the blocks after it
// by block sync; a node that was down catches up by block sync while its
// last height is within RetainBlocks.
//
// Snapshots are built on a goroutine of SnapshotApp's; Close stops it.
type SnapshotApp struct {
	consensus.Application
	f    *fsm.FSM
	opts SnapshotOptions

	ctx    context.Context // cancelled by Close: stops a build
	cancel context.CancelFunc
	wg     sync.WaitGroup // the build goroutine

	mu struct {
		sync.Mutex
		snaps    []*fsm.Snapshot // complete snapshots, by ascending height
		building bool
		closed   bool
	}

	// restore is the restore in progress. OfferSnapshot and
	// ApplySnapshotChunk are called by one goroutine (the orderer's
	// snapshot connection), which alone touches it.
	restore *fsm.Restore
}

var (
	_ consensus.Application = (*SnapshotApp)(nil)
	_ consensus.Snapshotter = (*SnapshotApp)(nil)
	_ consensus.Versioned   = (*SnapshotApp)(nil)
	_ consensus.Versioned   = app{}
	_ consensus.Proposer    = (*SnapshotApp)(nil)
	_ consensus.Proposer    = app{}
	_ consensus.Membership  = (*SnapshotApp)(nil)
	_ consensus.Membership  = app{}
)

// FinalizedValidatorUpdates and Validators pass the wrapped application's
// consensus.Membership on, which embedding alone would hide.
func (s *SnapshotApp) FinalizedValidatorUpdates() []consensus.ValidatorUpdate {
	if m, ok := s.Application.(consensus.Membership); ok {
		return m.FinalizedValidatorUpdates()
	}
	return nil
}

func (s *SnapshotApp) Validators() []consensus.ValidatorUpdate {
	if m, ok := s.Application.(consensus.Membership); ok {
		return m.Validators()
	}
	return nil
}

// AppVersion implements consensus.Versioned: the state machine's, which
// after a restore is the restored state's.
func (s *SnapshotApp) AppVersion() uint64 { return uint64(s.f.AppVersion()) }

// FinalizedAppVersion implements consensus.Versioned.
func (s *SnapshotApp) FinalizedAppVersion() uint64 { return uint64(s.f.AppliedVersion()) }

// OpenProposal and CheckProposal pass the wrapped application's
// consensus.Proposer on, which embedding alone would hide.
func (s *SnapshotApp) OpenProposal(height int64, now time.Time) [][]byte {
	if p, ok := s.Application.(consensus.Proposer); ok {
		return p.OpenProposal(height, now)
	}
	return nil
}

func (s *SnapshotApp) CheckProposal(height int64, now time.Time, txs [][]byte) error {
	if p, ok := s.Application.(consensus.Proposer); ok {
		return p.CheckProposal(height, now, txs)
	}
	return nil
}

// ScheduleProposal passes the wrapped application's consensus.Scheduler
// on; without one, the proposal is the mempool's prefix that fits.
func (s *SnapshotApp) ScheduleProposal(height int64, now time.Time, txs [][]byte, sizes []int64, room int64) []int {
	if p, ok := s.Application.(consensus.Scheduler); ok {
		return p.ScheduleProposal(height, now, txs, sizes, room)
	}
	return consensus.Prefix(sizes, room)
}

// NewSnapshotApp wraps app, whose state machine is f. It opens the complete
// snapshots in opts.Dir and deletes incomplete ones (a crash during a
// build) and any restore's leftovers.
func NewSnapshotApp(app consensus.Application, f *fsm.FSM, opts SnapshotOptions) (*SnapshotApp, error) {
	opts.setDefaults()
	if opts.Dir == "" {
		return nil, errors.New("stele/broker: snapshot directory not set")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("stele/broker: snapshots: %w", err)
	}
	a := &SnapshotApp{Application: app, f: f, opts: opts}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	entries, err := os.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("stele/broker: snapshots: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(opts.Dir, e.Name())
		if e.Name() == restoreDir {
			a.remove(path)
			continue
		}
		if _, err := strconv.ParseUint(e.Name(), 10, 63); err != nil || !e.IsDir() {
			continue // not ours
		}
		s, err := fsm.OpenSnapshot(path)
		if err != nil {
			opts.Logger.Info("removing an incomplete snapshot", "dir", path, "err", err)
			a.remove(path)
			continue
		}
		a.mu.snaps = append(a.mu.snaps, s)
	}
	sort.Slice(a.mu.snaps, func(i, j int) bool { return a.mu.snaps[i].Height() < a.mu.snaps[j].Height() })
	a.pruneLocked()
	return a, nil
}

// Close stops a snapshot build in progress (its directory is removed) and
// waits for it. No snapshot is taken after Close.
func (a *SnapshotApp) Close() error {
	a.mu.Lock()
	a.mu.closed = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
	return nil
}

// Commit commits through the wrapped application, takes a snapshot at
// every Interval-th height, and returns the retain height described on
// SnapshotApp.
func (a *SnapshotApp) Commit() (int64, error) {
	retain, err := a.Application.Commit()
	if err != nil {
		return 0, err
	}
	if h, _ := a.f.Info(); a.opts.Interval > 0 && h > 0 && h%a.opts.Interval == 0 {
		a.capture(h)
	}
	return a.retainHeight(retain), nil
}

// retainHeight caps the application's retain height as SnapshotApp says.
func (a *SnapshotApp) retainHeight(appRetain int64) int64 {
	a.mu.Lock()
	var latest int64
	if n := len(a.mu.snaps); n > 0 {
		latest = a.mu.snaps[n-1].Height()
	}
	a.mu.Unlock()
	if appRetain <= 0 || latest == 0 {
		return 0
	}
	return max(min(appRetain-a.opts.RetainBlocks, latest), 0)
}

// capture takes the snapshot of height h on the applier and starts its
// build, unless one is still being built (that height is then skipped).
func (a *SnapshotApp) capture(h int64) {
	a.mu.Lock()
	if a.mu.closed || a.mu.building || (len(a.mu.snaps) > 0 && a.mu.snaps[len(a.mu.snaps)-1].Height() >= h) {
		if a.mu.building {
			a.opts.Logger.Warn("skipping a snapshot: the previous one is still being built", "height", h)
		}
		a.mu.Unlock()
		return
	}
	a.mu.building = true
	a.wg.Add(1) // under mu, so that Close, once it has set closed, waits for it
	var prev *fsm.Snapshot
	if n := len(a.mu.snaps); n > 0 {
		prev = a.mu.snaps[n-1]
	}
	a.mu.Unlock()

	dir := filepath.Join(a.opts.Dir, fmt.Sprintf("%020d", h))
	start := time.Now()
	c, err := a.f.CaptureSnapshot(dir)
	if err != nil {
		a.opts.Logger.Error("taking a snapshot", "height", h, "err", err)
		a.mu.Lock()
		a.mu.building = false
		a.mu.Unlock()
		a.wg.Done()
		return
	}
	a.opts.Logger.Debug("snapshot captured", "height", h, "took", time.Since(start))
	go a.build(c, prev, start)
}

// build completes a captured snapshot and makes it available.
func (a *SnapshotApp) build(c *fsm.SnapshotCapture, prev *fsm.Snapshot, start time.Time) {
	defer a.wg.Done()
	dir := c.Dir()
	s, err := fsm.BuildSnapshot(a.ctx, c, prev)
	if err == nil {
		s, err = byzantineSnapshot(s)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mu.building = false
	if err != nil {
		if a.ctx.Err() == nil {
			a.opts.Logger.Error("building a snapshot", "dir", dir, "err", err)
		}
		a.remove(dir)
		return
	}
	a.mu.snaps = append(a.mu.snaps, s)
	a.pruneLocked()
	a.opts.Logger.Info("snapshot taken", "height", s.Height(), "chunks", s.Chunks(), "bytes", s.Size(), "took", time.Since(start))
}

// pruneLocked deletes the snapshots beyond the Keep latest.
func (a *SnapshotApp) pruneLocked() {
	n := len(a.mu.snaps) - a.opts.Keep
	if n <= 0 {
		return
	}
	for _, s := range a.mu.snaps[:n] {
		a.remove(s.Dir())
	}
	a.mu.snaps = append([]*fsm.Snapshot(nil), a.mu.snaps[n:]...)
}

func (a *SnapshotApp) remove(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		a.opts.Logger.Warn("removing a snapshot directory", "dir", dir, "err", err)
	}
}

// SnapshotInfo describes one snapshot a broker holds (for status pages).
type SnapshotInfo struct {
	Height int64  `json:"height"`
	Chunks uint32 `json:"chunks"`
	Bytes  int64  `json:"bytes"`
	Hash   string `json:"hash"`
}

// Snapshots lists the complete snapshots, oldest first.
func (a *SnapshotApp) Snapshots() []SnapshotInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]SnapshotInfo, len(a.mu.snaps))
	for i, s := range a.mu.snaps {
		out[i] = SnapshotInfo{Height: s.Height(), Chunks: s.Chunks(), Bytes: s.Size(), Hash: hex.EncodeToString(s.Hash())}
	}
	return out
}
