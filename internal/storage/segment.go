package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/stele-io/stele/internal/durable"
	"github.com/stele-io/stele/internal/record"
)

// File name suffixes (Kafka's).
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	cleanedSuffix   = ".cleaned" // a compacted copy being written
	swapSuffix      = ".swap"    // a compacted copy committed, not yet renamed
)

// segment is one NNNNNNNNNNNNNNNNNNNN.log file with its .index and
// .timeindex.
//
// The published fields (size, next, ix) are written by the applier
// while it holds Log.mu and read by readers while they hold it for reading;
// the applier reads them without the lock. Entries of ix already published
// are never modified, so a reader may keep using a view after releasing the
// lock.
type segment struct {
	base int64
	path string // the directory and the 20-digit base offset, without suffix

	log, offIdx, timeIdx *os.File

	// refs counts the Log's reference and every reader's; the files close
	// when it drops to zero.
	refs atomic.Int32

	size int64 // bytes of whole batches
	next int64 // offset after the last batch (the next segment's base once sealed)
	ix   indexer

	// Applier only.
	flushedOffs  int  // offset index entries written to offIdx
	flushedTimes int  // time index entries written to timeIdx
	dirty        bool // the log file written since its last fsync
	idxDirty     bool // an index file written since its last fsync
}

// segView is a reader's picture of a segment, taken under Log.mu.
type segView struct {
	seg              *segment
	base, size, next int64
	maxTs, maxTsOff  int64
	offs, times      indexView
}

func segmentPath(dir string, base int64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d", base))
}

// createSegment creates the empty files of a new segment, replacing any
// leftovers of the same name.
func createSegment(dir string, base int64, cfg LogConfig) (*segment, error) {
	s := &segment{base: base, path: segmentPath(dir, base), next: base, ix: newIndexer(cfg), dirty: true}
	var err error
	flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if s.offIdx, err = os.OpenFile(s.path+indexSuffix, flags, 0o644); err != nil {
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	if s.timeIdx, err = os.OpenFile(s.path+timeIndexSuffix, flags, 0o644); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	if s.log, err = os.OpenFile(s.path+logSuffix, flags, 0o644); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	for _, f := range []*os.File{s.offIdx, s.timeIdx, s.log} {
		durable.Created(f)
	}
	s.refs.Store(1)
	return s, nil
}

// openSegmentFiles opens the files of an existing segment; the index files
// are created if missing.
func openSegmentFiles(dir string, base int64, cfg LogConfig) (*segment, error) {
	s := &segment{base: base, path: segmentPath(dir, base), next: base, ix: newIndexer(cfg)}
	var err error
	if s.log, err = os.OpenFile(s.path+logSuffix, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	if s.offIdx, err = os.OpenFile(s.path+indexSuffix, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	if s.timeIdx, err = os.OpenFile(s.path+timeIndexSuffix, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	s.refs.Store(1)
	return s, nil
}

// recoverActive makes the last segment of a log consistent after any stop,
// clean or not: it checks every batch (CRC, offsets in order and within
// reach of 32-bit relative offsets), cuts the file after the last good one
// (a torn or corrupt tail), and rebuilds both indexes from the batches, so
// an index written lazily before a crash cannot disagree with the log.
// It returns the segment's new state for the caller to publish (under
// Log.mu if readers may be about) and how many bytes it cut.
func (s *segment) recoverActive(cfg LogConfig) (st segState, cut int64, err error) {
	fi, err := s.log.Stat()
	if err != nil {
		return segState{}, 0, fmt.Errorf("stele/storage: %w", err)
	}
	ix := newIndexer(cfg)
	next := s.base
	valid, err := scanBatches(s.log, 0, fi.Size(), func(pos int64, h record.Header, _ []byte) error {
		if !fitsSegment(s.base, next, h) {
			return errStopScan
		}
		ix.add(s.base, pos, h)
		next = h.LastOffset() + 1
		return nil
	})
	if err != nil {
		return segState{}, 0, err
	}
	if valid < fi.Size() {
		if err := s.log.Truncate(valid); err != nil {
			return segState{}, 0, fmt.Errorf("stele/storage: cutting the torn tail of %s: %w", s.log.Name(), err)
		}
		s.dirty = true
	}
	if err := s.writeIndexes(ix); err != nil {
		return segState{}, 0, err
	}
	return segState{size: valid, next: next, ix: ix}, fi.Size() - valid, nil
}

// segState is the published state of a segment.
type segState struct {
	size, next int64
	ix         indexer
}

// publish sets s's published state. The caller holds Log.mu or is alone.
func (s *segment) publish(st segState) { s.size, s.next, s.ix = st.size, st.next, st.ix }

// loadSealed opens a sealed segment, the one before the segment based at
// nextBase. Like Kafka on a clean start it does not read the whole log: it
// checks the index files and the batches after the last offset index entry,
// which must end exactly at the end of the file and at offset nextBase-1.
// Missing or inconsistent indexes are rebuilt from a full scan; a segment
// that is not whole batches to its end then is an ErrCorrupt error naming
// the file and position.
func (s *segment) loadSealed(cfg LogConfig, nextBase int64) error {
	fi, err := s.log.Stat()
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	s.size, s.next = fi.Size(), nextBase
	offs, err1 := readIndex(s.offIdx, cfg)
	times, err2 := readIndex(s.timeIdx, cfg)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if len(offs) > 0 && checkOffsetIndex(offs, s.base, nextBase, s.size) == nil && checkTimeIndex(times, s.base, nextBase) == nil {
		ok, err := s.adoptIndexes(cfg, offs, times)
		if err != nil || ok {
			return err
		}
	}
	return s.rebuildSealed(cfg)
}

// adoptIndexes takes the checked index files of a sealed segment as they
// are if the batches after the last offset index entry end the segment
// properly. ok is false if they do not; the caller rebuilds.
func (s *segment) adoptIndexes(cfg LogConfig, offs, times []byte) (ok bool, err error) {
	last := offs[len(offs)-offsetEntrySize:]
	lastOff := s.base + int64(binary.BigEndian.Uint32(last))
	lastPos := int64(binary.BigEndian.Uint32(last[4:]))
	next, first := int64(-1), true
	end, err := scanBatches(s.log, lastPos, s.size, func(_ int64, h record.Header, _ []byte) error {
		if first && h.LastOffset() != lastOff || !first && !fitsSegment(s.base, next, h) {
			return errStopScan
		}
		first, next = false, h.LastOffset()+1
		return nil
	})
	if err != nil || end != s.size || next != s.next {
		return false, err
	}
	ix := newIndexer(cfg)
	ix.nOffs, ix.nTimes, ix.lastIdxPos = len(offs)/offsetEntrySize, len(times)/timeEntrySize, lastPos
	if len(times) > 0 {
		t := times[len(times)-timeEntrySize:]
		ix.lastTimeTs = int64(binary.BigEndian.Uint64(t))
		ix.lastTimeOff = s.base + int64(binary.BigEndian.Uint32(t[8:]))
		ix.maxTs, ix.maxTsOff = ix.lastTimeTs, ix.lastTimeOff
	}
	if ix.rollTs, err = firstTimestamp(s.log, s.size); err != nil {
		return false, err
	}
	s.ix, s.flushedOffs, s.flushedTimes = ix, ix.nOffs, ix.nTimes
	return true, nil
}

// rebuildSealed scans a whole sealed segment, checking every batch, and
// rewrites its indexes.
func (s *segment) rebuildSealed(cfg LogConfig) error {
	ix := newIndexer(cfg)
	next := s.base
	end, err := scanBatches(s.log, 0, s.size, func(pos int64, h record.Header, _ []byte) error {
		if !fitsSegment(s.base, next, h) {
			return errStopScan
		}
		ix.add(s.base, pos, h)
		next = h.LastOffset() + 1
		return nil
	})
	if err != nil {
		return err
	}
	if end != s.size {
		return corruptAt(s.log.Name(), end, "not a whole, valid batch in a sealed segment")
	}
	if next != s.next {
		return corruptAt(s.log.Name(), end, fmt.Sprintf("the segment ends at offset %d but the next segment starts at %d", next, s.next))
	}
	ix.seal(s.base)
	if err := s.writeIndexes(ix); err != nil {
		return err
	}
	s.ix = ix
	s.dropIndexMemory()
	return nil
}

// fitsSegment reports whether batch h may follow offset next in a segment
// based at base: offsets increase and stay within 32-bit relative offsets.
func fitsSegment(base, next int64, h record.Header) bool {
	return h.BaseOffset >= next && h.LastOffsetDelta >= 0 && h.LastOffset() >= h.BaseOffset &&
		h.LastOffset()-base <= math.MaxInt32
}

// firstTimestamp returns the MaxTimestamp of the first batch of a segment
// that has one (-1 if none): the rolling-based timestamp of Kafka's segment.ms.
func firstTimestamp(f *os.File, size int64) (int64, error) {
	w := newWalker(f, 0, size)
	for {
		h, _, ok, err := w.next()
		if err != nil || !ok {
			return -1, err
		}
		if h.MaxTimestamp >= 0 {
			return h.MaxTimestamp, nil
		}
	}
}

// writeIndexes makes the index files hold exactly the entries of ix,
// writing only what differs.
func (s *segment) writeIndexes(ix indexer) error {
	for _, x := range []struct {
		f       *os.File
		entries []byte
	}{{s.offIdx, ix.offs}, {s.timeIdx, ix.times}} {
		same, err := fileEquals(x.f, x.entries)
		if err != nil {
			return err
		}
		if same {
			continue
		}
		if err := x.f.Truncate(0); err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		if _, err := x.f.WriteAt(x.entries, 0); err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		s.idxDirty = true
	}
	s.flushedOffs, s.flushedTimes = ix.nOffs, ix.nTimes
	return nil
}

// flushIndexes writes the index entries appended since the last flush.
func (s *segment) flushIndexes() error {
	if s.ix.offs == nil && s.ix.times == nil {
		return nil // sealed: the files are complete
	}
	if s.flushedOffs < s.ix.nOffs {
		if _, err := s.offIdx.WriteAt(s.ix.offs[s.flushedOffs*offsetEntrySize:], int64(s.flushedOffs)*offsetEntrySize); err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		s.flushedOffs, s.idxDirty = s.ix.nOffs, true
	}
	if s.flushedTimes < s.ix.nTimes {
		if _, err := s.timeIdx.WriteAt(s.ix.times[s.flushedTimes*timeEntrySize:], int64(s.flushedTimes)*timeEntrySize); err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		s.flushedTimes, s.idxDirty = s.ix.nTimes, true
	}
	return nil
}

// fsync is how segments fsync their files (a variable so that a test can
// see which files are fsynced).
var fsync = durable.Sync

// sync makes the segment's batches durable: it writes pending index
// entries and fsyncs the log file if it changed since its last fsync. It
// does not fsync the index files: the segment it is called on at every
// commit is the active one, whose indexes every open rebuilds from the log
// (recoverActive), so a crash cannot leave them disagreeing with it, and
// waiting for two more flushes per partition and block bought nothing (two
// of the three serial fsyncs of a commit's partition). syncAll makes the
// indexes durable too: when the segment is sealed, and for the sealed
// segments Log.Sync finds changed (Close syncs as Sync does).
func (s *segment) sync() error {
	if err := s.flushIndexes(); err != nil {
		return err
	}
	if !s.dirty {
		return nil
	}
	if err := fsync(s.log); err != nil {
		return fmt.Errorf("stele/storage: fsync %s: %w", s.log.Name(), err)
	}
	s.dirty = false
	return nil
}

// syncAll is sync and, if they changed, an fsync of both index files: a
// sealed segment's indexes are read from disk as they are when they check
// out (loadSealed).
func (s *segment) syncAll() error {
	if err := s.sync(); err != nil {
		return err
	}
	if !s.idxDirty {
		return nil
	}
	for _, f := range []*os.File{s.offIdx, s.timeIdx} {
		if err := fsync(f); err != nil {
			return fmt.Errorf("stele/storage: fsync %s: %w", f.Name(), err)
		}
	}
	s.idxDirty = false
	return nil
}

// dropIndexMemory forgets the in-memory entries of a sealed segment, whose
// index files are complete; lookups read the files from then on.
func (s *segment) dropIndexMemory() { s.ix.offs, s.ix.times = nil, nil }

// view returns a reader's picture of s. The caller holds Log.mu.
func (s *segment) view() segView {
	v := segView{
		seg: s, base: s.base, size: s.size, next: s.next, maxTs: s.ix.maxTs, maxTsOff: s.ix.maxTsOff,
		offs:  indexView{f: s.offIdx, width: offsetEntrySize, n: s.ix.nOffs},
		times: indexView{f: s.timeIdx, width: timeEntrySize, n: s.ix.nTimes},
	}
	if s.ix.offs != nil || s.ix.times != nil {
		v.offs.mem = s.ix.offs[: s.ix.nOffs*offsetEntrySize : s.ix.nOffs*offsetEntrySize]
		v.times.mem = s.ix.times[: s.ix.nTimes*timeEntrySize : s.ix.nTimes*timeEntrySize]
		if v.offs.mem == nil {
			v.offs.mem = []byte{}
		}
		if v.times.mem == nil {
			v.times.mem = []byte{}
		}
	}
	return v
}

// info returns the SegmentInfo of s. The caller holds Log.mu.
func (s *segment) info() SegmentInfo {
	return SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Size: s.size, MaxTimestamp: s.ix.maxTs, RollTimestamp: s.ix.rollTs}
}

// ref adds a reader's reference. The caller holds Log.mu, so s is still in
// the log and its count is not zero.
func (s *segment) ref() { s.refs.Add(1) }

// unref drops a reference; the last one closes the files.
func (s *segment) unref() {
	if s.refs.Add(-1) == 0 {
		s.closeFiles()
	}
}

func (s *segment) closeFiles() {
	for _, f := range []*os.File{s.log, s.offIdx, s.timeIdx} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// removeFiles deletes the segment's files (the log first, so that a crash
// leaves at most orphan indexes, which OpenLog deletes).
func removeSegmentFiles(path string) error {
	var errs []error
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("stele/storage: %w", err))
		}
	}
	return errors.Join(errs...)
}

// fileEquals reports whether f holds exactly b.
func fileEquals(f *os.File, b []byte) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stele/storage: %w", err)
	}
	if fi.Size() != int64(len(b)) {
		return false, nil
	}
	old, err := readAll(f)
	return err == nil && bytes.Equal(old, b), err
}

// readIndex reads an index file, or returns nil for one larger than an
// index can be (to be rebuilt rather than read into memory).
func readIndex(f *os.File, cfg LogConfig) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	if fi.Size() > int64(cfg.MaxIndexBytes)+timeEntrySize {
		return nil, nil
	}
	return readAll(f)
}

// readAll reads a whole (index) file.
func readAll(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stele/storage: %w", err)
	}
	b := make([]byte, fi.Size())
	if err := readFull(f, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}
