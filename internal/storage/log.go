package storage

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/stele-io/stele/internal/record"
)

// Sentinel errors. Errors from this package wrap one of them (or an I/O
// error, or an error of package record for a batch that does not check out).
var (
	// ErrOffsetOutOfRange means an offset below the log's base offset or
	// above its end.
	ErrOffsetOutOfRange = errors.New("stele/storage: offset out of range")
	// ErrOffsetMismatch means Append was given a batch whose base offset is
	// not the log end offset.
	ErrOffsetMismatch = errors.New("stele/storage: batch base offset is not the log end offset")
	// ErrNotBatchBoundary means TruncateTo was asked to cut inside a batch,
	// or at an offset no batch ends before.
	ErrNotBatchBoundary = errors.New("stele/storage: offset is not at a batch boundary")
	// ErrCorrupt means a segment file that is not what this package writes,
	// where recovery may not simply cut it: a sealed segment that is not
	// whole valid batches to its end.
	ErrCorrupt = errors.New("stele/storage: corrupt segment")
	// ErrClosed means the log was closed or removed.
	ErrClosed = errors.New("stele/storage: log closed")
	// ErrConfig means a LogConfig value out of range.
	ErrConfig = errors.New("stele/storage: invalid log config")
)

// Log is one partition's log: a directory of segments (see the package
// documentation for the layout).
//
// Append, TruncateTo, DeleteSegmentsBefore, Compact, PrepareCompaction,
// SetConfig, Sync, Close and Remove are for one goroutine, the applier;
// applyMu serialises them in case of misuse. A prepared CompactionPass runs
// on any goroutine, concurrently with the applier, one pass per log at a
// time (passMu). Read, OffsetForTimestamp, MaxTimestamp, Segments,
// NextOffset, BaseOffset and Size may be called from any goroutine at any
// time.
//
// Lock order: passMu, then applyMu, then swapMu, then mu. A pass holds
// passMu throughout and swapMu while it renames a segment's files, never
// applyMu; Close and Remove raise stop first, so that a running pass gives
// up at its next batch instead of holding them up.
type Log struct {
	dir string

	passMu sync.Mutex
	swapMu sync.Mutex  // a compaction swap, against segment deletion
	stop   atomic.Bool // Close or Remove began: passes give up

	applyMu  sync.Mutex
	cfg      LogConfig // applier only
	dirDirty bool      // a file was created, renamed or removed since the last directory fsync

	// swapHook, set by tests, is called before each step of a compaction
	// swap; returning true stops the swap there as a crash would.
	swapHook func(base int64, step int) bool

	mu struct {
		sync.RWMutex
		segs   []*segment // in offset order; the last is the active segment
		closed bool
		// truncations counts TruncateTo calls that cut data; a read that
		// raced one is retried.
		truncations uint64
	}
}

// SegmentInfo describes one segment, for retention and compaction decisions.
type SegmentInfo struct {
	BaseOffset int64
	// NextOffset is the offset after the segment's last batch: the next
	// segment's base offset, or the log end offset for the active segment.
	NextOffset int64
	// Size is the segment's .log size in bytes.
	Size int64
	// MaxTimestamp is the largest batch MaxTimestamp in the segment, -1 if
	// no batch has a timestamp (Kafka's largestTimestamp, used by
	// retention.ms).
	MaxTimestamp int64
	// RollTimestamp is the MaxTimestamp of the segment's first batch that
	// has one, -1 if none: the timestamp segment.ms counts from (Kafka's
	// rollingBasedTimestamp).
	RollTimestamp int64
}

// OpenLog opens the partition directory dir with cfg (clamped, see
// LogConfig.Clamp), creating it with one empty
// segment at offset 0 if it does not exist, and recovers it:
//
//   - a compaction interrupted after its commit point (a .log.swap file) is
//     finished, and any earlier one (.cleaned files) is rolled back;
//   - index files without a .log are deleted;
//   - the last segment is checked batch by batch (CRC and offsets) and cut
//     after its last good batch, which removes a torn or corrupt tail; its
//     indexes are rebuilt;
//   - each sealed segment's indexes are checked and rebuilt if missing or
//     inconsistent; a sealed segment that does not end in whole batches at
//     the next segment's base offset is an ErrCorrupt error naming the file
//     and position.
//
// Files OpenLog does not know (partition.metadata and the like) are left
// alone.
func OpenLog(dir string, cfg LogConfig) (*Log, error) {
	cfg = cfg.Clamp()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	l := &Log{dir: dir, cfg: cfg}
	bases, changed, err := tidyDir(dir)
	if err != nil {
		return nil, err
	}
	l.dirDirty = changed
	var segs []*segment
	fail := func(err error) (*Log, error) {
		for _, s := range segs {
			s.unref()
		}
		return nil, err
	}
	if len(bases) == 0 {
		s, err := createSegment(dir, 0, cfg)
		if err != nil {
			return fail(err)
		}
		segs, l.dirDirty = append(segs, s), true
	}
	for i, base := range bases {
		s, err := openSegmentFiles(dir, base, cfg)
		if err != nil {
			return fail(err)
		}
		segs = append(segs, s)
		if i < len(bases)-1 {
			err = s.loadSealed(cfg, bases[i+1])
		} else {
			var st segState
			st, _, err = s.recoverActive(cfg)
			s.publish(st)
		}
		if err != nil {
			return fail(err)
		}
	}
	l.mu.segs = segs
	return l, nil
}

// SetConfig changes the settings future appends obey. Values out of range
// are clamped (see LogConfig.Clamp).
//
// If the index settings change, the active segment's indexes are rebuilt
// with them: whether an index is full decides rolls, so the active
// segment's indexes must depend only on its batches and the current config,
// as they do after OpenLog, not on when the config changed.
func (l *Log) SetConfig(cfg LogConfig) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	cfg = cfg.Clamp()
	old := l.cfg
	l.cfg = cfg
	if l.mu.closed || cfg.IndexIntervalBytes == old.IndexIntervalBytes && cfg.MaxIndexBytes == old.MaxIndexBytes {
		return nil
	}
	s := l.active()
	st, _, err := s.recoverActive(cfg)
	if err != nil {
		return err
	}
	l.mu.Lock()
	s.publish(st)
	l.mu.Unlock()
	return nil
}

// Append appends one batch, whose base offset the caller set to
// NextOffset(); it checks the batch's framing and CRC, not its records.
//
// Before appending it rolls to a new segment, by Kafka's rules
// (LogSegment.shouldRoll), if the active segment is not empty and
//
//   - the batch would take it past SegmentBytes, or
//   - the batch's MaxTimestamp (now, the block time, if it has none) is
//     more than SegmentMs after the segment's RollTimestamp, or
//   - its offset or time index is full, or
//   - the batch's last offset is too far from the segment's base offset for
//     a 32-bit relative offset.
//
// Every input is replicated (the batch, the config, the block time), so
// every broker rolls at the same offsets. Kafka falls back to the segment's
// creation time when its first batch has no timestamp; that time is not
// replicated, so a segment none of whose batches has a timestamp does not
// roll by time here.
//
// The segment being sealed is fsynced before the new one is created, so that
// after a crash only the last segment can have a torn tail.
func (l *Log) Append(batch []byte, now int64) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	h, err := record.CheckCRC(batch)
	if err != nil {
		return fmt.Errorf("stele/storage: append: %w", err)
	}
	s := l.active()
	if h.BaseOffset != s.next {
		return fmt.Errorf("%w: batch base offset %d, log end offset %d", ErrOffsetMismatch, h.BaseOffset, s.next)
	}
	if h.LastOffsetDelta < 0 || h.LastOffset() < h.BaseOffset {
		return fmt.Errorf("stele/storage: append: batch has last offset delta %d", h.LastOffsetDelta)
	}
	if l.shouldRoll(s, h, len(batch), now) {
		if s, err = l.roll(); err != nil {
			return err
		}
	}
	pos := s.size
	if _, err := s.log.WriteAt(batch, pos); err != nil {
		// Nothing is published: the next append overwrites the partial
		// write, and OpenLog cuts it.
		return fmt.Errorf("stele/storage: append to %s: %w", s.log.Name(), err)
	}
	ix := s.ix
	ix.add(s.base, pos, h)
	l.mu.Lock()
	s.size += int64(len(batch))
	s.next = h.LastOffset() + 1
	s.ix = ix
	l.mu.Unlock()
	s.dirty = true
	return nil
}

// shouldRoll applies the rules Append documents.
func (l *Log) shouldRoll(s *segment, h record.Header, size int, now int64) bool {
	if s.size == 0 {
		return false
	}
	ts := h.MaxTimestamp
	if ts < 0 {
		ts = now
	}
	return s.size+int64(size) > l.cfg.SegmentBytes ||
		s.ix.rollTs >= 0 && ts-s.ix.rollTs > l.cfg.SegmentMs ||
		s.ix.full() ||
		h.LastOffset()-s.base > math.MaxInt32
}

// roll seals the active segment (final time index entry, index files
// written, everything fsynced) and starts a new one at the log end offset.
func (l *Log) roll() (*segment, error) {
	old := l.active()
	ix := old.ix
	ix.seal(old.base)
	l.mu.Lock()
	old.ix = ix
	l.mu.Unlock()
	if err := old.syncAll(); err != nil {
		return nil, err
	}
	s, err := createSegment(l.dir, old.next, l.cfg)
	if err != nil {
		return nil, err
	}
	l.dirDirty = true
	l.mu.Lock()
	old.dropIndexMemory()
	l.mu.segs = append(l.mu.segs, s)
	l.mu.Unlock()
	return s, nil
}

// active returns the active segment. The caller is the applier or holds mu.
func (l *Log) active() *segment { return l.mu.segs[len(l.mu.segs)-1] }

// NextOffset returns the log end offset: the offset the next batch gets.
func (l *Log) NextOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return 0
	}
	return l.active().next
}

// BaseOffset returns the base offset of the first segment.
func (l *Log) BaseOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return 0
	}
	return l.mu.segs[0].base
}

// Segments describes the segments in offset order; the last is the active
// segment.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, len(l.mu.segs))
	for i, s := range l.mu.segs {
		out[i] = s.info()
	}
	return out
}

// Size returns the total size of the segments' .log files.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.mu.segs {
		n += s.size
	}
	return n
}

// Sync makes everything written so far durable: pending index entries are
// written, every segment file written since the last Sync is fsynced
// (except the active segment's index files, which every open rebuilds from
// its log: segment.sync), and so is the directory if files were created,
// renamed or removed.
func (l *Log) Sync() error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	return l.syncLocked()
}

// syncLocked is Sync for a caller holding applyMu.
func (l *Log) syncLocked() error {
	// A compaction swap may replace a sealed segment meanwhile (under mu);
	// the one replaced was synced when it was sealed.
	l.mu.RLock()
	segs := slices.Clone(l.mu.segs)
	l.mu.RUnlock()
	for i, s := range segs {
		sync := s.syncAll
		if i == len(segs)-1 {
			sync = s.sync
		}
		if err := sync(); err != nil {
			return err
		}
	}
	if l.dirDirty {
		if err := SyncDir(l.dir); err != nil {
			return err
		}
		l.dirDirty = false
	}
	return nil
}

// Close syncs the log and closes it. Reads in progress finish on the files
// they hold; later calls fail with ErrClosed.
func (l *Log) Close() error {
	l.stop.Store(true)
	l.passMu.Lock()
	defer l.passMu.Unlock()
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.mu.closed {
		return nil
	}
	err := l.syncLocked()
	l.closeLocked()
	return err
}

// Remove closes the log without syncing it and deletes its directory (topic
// deletion).
func (l *Log) Remove() error {
	l.stop.Store(true)
	l.passMu.Lock()
	defer l.passMu.Unlock()
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	l.closeLocked()
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("stele/storage: removing %s: %w", l.dir, err)
	}
	return nil
}

// closeLocked drops the log's references to its segments.
func (l *Log) closeLocked() {
	l.mu.Lock()
	segs := l.mu.segs
	l.mu.segs, l.mu.closed = nil, true
	l.mu.Unlock()
	for _, s := range segs {
		s.unref()
	}
}

// SyncDir fsyncs a directory, making file creations, renames and removals
// in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("stele/storage: fsync %s: %w", dir, err)
	}
	return nil
}
