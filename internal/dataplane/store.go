package dataplane

// The batch store keeps the payloads of the certified data plane (DESIGN.md
// §4): a broker stores a batch here, fsynced, before it signs the batch's
// digest; the state machine reads it back by digest when the ordered
// certificate is applied, and peers that lack it fetch it from here.
//
// On disk a store is a directory of segment files named %020d.batch after
// the sequence number of their first record (the count of records written
// to the segments before it, so names increase). A segment is a run of
// records, all integers big-endian:
//
//	offset  size  field
//	0       4     magic "SBT2"
//	4       4     payload length n (1 .. MaxStoredBatchBytes)
//	8       8     height: the consensus height the batch belongs to (signed)
//	16      32    digest: SHA-256 of the payload
//	48      n     payload
//	48+n    4     CRC-32C (Castagnoli) of the header, bytes 0 .. 48
//
// The digest guards the payload, so the CRC covers only the header (a
// checksum of the payload as well would be one more pass over every byte
// stored). Records of magic "SBT1", written before, have a CRC of bytes
// 0 .. 48+n; they are read and checked as such.
//
// Each record starts at a multiple of 4096 bytes (storeAlign): zero bytes
// pad a record up to the next one. That lets a record be written with one
// O_DIRECT write where the file system allows it (Linux): the payload goes
// from the broker's memory to the disk without being copied into the page
// cache, which on the project's 2-core machine was the largest single cost
// of a produce (docs/benchmarks.md). The batch store is written far more
// than it is read (the state machine applies batches from memory, recent.go),
// so nothing is lost by keeping it out of the cache. Segments written before
// the padding (records back to back) are read as well.
//
// Only the last segment is written to. It is fsynced before a new one is
// created and the directory is fsynced after, so after a crash only the last
// segment can end in a torn record; OpenStore cuts it. A bad record header
// anywhere else is corruption: it and the rest of its segment are left on
// disk but not served. Payloads of sealed segments are checked against their
// digests when read, not at open (Store.load): one that fails is no longer
// served, and the data plane fetches it from a peer.

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/stele-io/stele/internal/durable"
	"github.com/stele-io/stele/internal/storage"
)

// Sentinel errors of the batch store.
var (
	// ErrNotFound means the store holds no batch with that digest: it was
	// never stored, was pruned, or was lost to corruption found at open.
	ErrNotFound = errors.New("stele/dataplane: batch not found")
	// ErrCorrupt means a stored batch failed its checks when read back.
	ErrCorrupt = errors.New("stele/dataplane: stored batch is corrupt")
	// ErrTooLarge means Put was given more than MaxStoredBatchBytes.
	ErrTooLarge = errors.New("stele/dataplane: batch too large")
	// ErrEmptyBatch means Put was given an empty payload.
	ErrEmptyBatch = errors.New("stele/dataplane: empty batch")
	// ErrStoreClosed means the store was closed.
	ErrStoreClosed = errors.New("stele/dataplane: batch store closed")
	// ErrStoreConfig means a StoreOptions value out of range.
	ErrStoreConfig = errors.New("stele/dataplane: invalid batch store options")
)

const (
	// MaxStoredBatchBytes is the largest payload Put accepts.
	MaxStoredBatchBytes = 64 << 20
	// DefaultStoreSegmentBytes is the default StoreOptions.SegmentBytes.
	DefaultStoreSegmentBytes = 256 << 20

	storeMagic       = "SBT2"
	storeMagicV1     = "SBT1" // CRC over header and payload
	storeHeaderSize  = 48
	storeTrailerSize = 4
	storeOverhead    = storeHeaderSize + storeTrailerSize
	storeAlign       = 4096 // records start at multiples of this
	// maxScratchBytes is the largest record buffer a store keeps between
	// Puts; larger records get a buffer of their own.
	maxScratchBytes = 16<<20 + storeAlign
	storeSuffix     = ".batch"
)

var storeCRC = crc32.MakeTable(crc32.Castagnoli)

// StoreOptions configures a Store. The zero value means the defaults.
type StoreOptions struct {
	// SegmentBytes is the roll size: a record that would take the active
	// segment past it goes to a new segment (a record larger than it gets a
	// segment of its own). Default 256 MiB.
	SegmentBytes int64
	// Logger receives reports of torn tails cut and corruption found; nil
	// discards them.
	Logger *slog.Logger
}

// WithDefaults returns o with every zero field set to its default.
func (o StoreOptions) WithDefaults() StoreOptions {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultStoreSegmentBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first field out of range, after defaults are applied.
func (o StoreOptions) Validate() error {
	if o = o.WithDefaults(); o.SegmentBytes < 1 {
		return fmt.Errorf("%w: segment bytes %d is not positive", ErrStoreConfig, o.SegmentBytes)
	}
	return nil
}

// StoreStats describes a Store.
type StoreStats struct {
	Batches  int   // batches served (indexed)
	Bytes    int64 // bytes of whole records in the segments, headers included
	Segments int   // segment files
}

// Store is a durable, content-addressed store of batches keyed by the
// SHA-256 of their payload. All its methods are safe for concurrent use.
//
// Put appends under wmu and then waits for an fsync that covers its record
// (group commit: one waiting Put at a time, the leader, fsyncs the active
// segment for every record appended so far, and wakes the others). A
// record is indexed, and so visible to Get and Has, only once durable.
// A failed fsync leaves the file's state unknown, so it fails the store:
// every later Put returns that error; Get goes on serving what was durable.
//
// Lock order: wmu, then mu. gc.mu is never held while taking either.
type Store struct {
	dir          string
	segmentBytes int64
	log          *slog.Logger

	// wmu serialises writers (appends, rolls, publishing, Prune, Close);
	// the fields below are theirs.
	wmu        sync.Mutex
	lastTicket uint64                    // ticket of the last record appended; tickets order appends
	pending    map[[32]byte]storePending // appended, not yet known durable
	failed     error                     // sticky: a failed fsync
	scratch    []byte                    // storeAlign-aligned buffer a record is assembled in

	// mu guards what readers see. index and segs change only with wmu held
	// too, so a writer may read them under wmu alone.
	mu struct {
		sync.RWMutex
		index  map[[32]byte]storeLoc
		segs   []*storeSegment // in name order; the last is the active segment
		closed bool
	}

	// gc is the group commit's state.
	gc struct {
		mu      sync.Mutex
		cond    *sync.Cond
		running bool   // a leader is syncing
		closing bool   // Close waits to be the last leader; no other may start
		done    uint64 // every ticket up to this is durable and indexed
		err     error  // the store failed
		closed  bool
	}

	bytes atomic.Int64 // StoreStats.Bytes
	syncs atomic.Int64 // fsyncs of segment files (tests)

	// syncHook, set by tests before use, is called by a leader after it
	// took the state to sync and before it fsyncs.
	syncHook func()
}

// storeSegment is one segment file. refs counts the store's reference and
// each reader's; the file closes when it drops to zero.
type storeSegment struct {
	id   int64
	path string
	f    *os.File // reads, truncation, fsync
	w    *os.File // appends: f opened with O_DIRECT where possible, else f
	refs atomic.Int32

	// Written with wmu held.
	size      int64      // bytes of whole records
	records   int64      // records in [0, size)
	maxHeight int64      // largest height of those records, MinInt64 if none
	digests   [][32]byte // their digests, for Prune
	removed   bool       // pruned (set with mu held too)
}

// storeLoc is where a batch is: its record starts at off in seg.
type storeLoc struct {
	seg    *storeSegment
	off    int64
	n      uint32 // payload length
	height int64  // the record's
}

// storePending is a record appended but not yet known durable.
type storePending struct {
	ticket uint64
	loc    storeLoc
}

// OpenStore opens the batch store in dir, creating dir if needed, and
// rebuilds its index from the segment files: every record of the last
// segment is checked whole (CRC and digest), the others' headers and CRCs
// (load). The last segment is cut after its last good record (a torn
// tail); a bad record in another segment is logged, and it and the rest of
// that segment are not served. A payload that fails its digest in a sealed
// segment is found by Get, and that batch alone is no longer served. Bad
// files never make OpenStore fail; I/O errors do.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stele/dataplane: %w", err)
	}
	ids, err := listStoreSegments(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, segmentBytes: opts.SegmentBytes, log: opts.Logger, pending: map[[32]byte]storePending{}}
	s.mu.index = map[[32]byte]storeLoc{}
	s.gc.cond = sync.NewCond(&s.gc.mu)
	fail := func(err error) (*Store, error) {
		for _, seg := range s.mu.segs {
			seg.unref()
		}
		return nil, err
	}
	for i, id := range ids {
		seg, err := openStoreSegment(dir, id, os.O_RDWR)
		if err != nil {
			return fail(err)
		}
		s.mu.segs = append(s.mu.segs, seg)
		if err := s.load(seg, i == len(ids)-1); err != nil {
			return fail(err)
		}
	}
	if len(s.mu.segs) == 0 {
		seg, err := openStoreSegment(dir, 0, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return fail(err)
		}
		s.mu.segs = append(s.mu.segs, seg)
		if err := storage.SyncDir(dir); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// Put stores payload, which belongs to consensus height height, and returns
// its SHA-256 once it is durable (fsynced). A payload already stored is not
// written again and its digest returns at once, unless Prune could drop it
// before a batch of this height (it was stored for a lower height only, in
// a segment with no higher one): then a new copy is written for the new
// height.
func (s *Store) Put(payload []byte, height int64) ([32]byte, error) {
	if len(payload) == 0 {
		return [32]byte{}, ErrEmptyBatch
	}
	if len(payload) > MaxStoredBatchBytes {
		return [32]byte{}, fmt.Errorf("%w: %d bytes; at most %d may be stored", ErrTooLarge, len(payload), MaxStoredBatchBytes)
	}
	d := sha256.Sum256(payload)
	s.mu.RLock()
	loc, ok := s.mu.index[d]
	s.mu.RUnlock()
	if ok && loc.height >= height {
		return d, nil
	}
	var hdr [storeHeaderSize]byte
	copy(hdr[:], storeMagic)
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	binary.BigEndian.PutUint64(hdr[8:], uint64(height))
	copy(hdr[16:], d[:])
	var trailer [storeTrailerSize]byte
	binary.BigEndian.PutUint32(trailer[:], crc32.Checksum(hdr[:], storeCRC))

	s.wmu.Lock()
	ticket, err := s.appendLocked(d, height, hdr[:], payload, trailer[:])
	s.wmu.Unlock()
	if err == nil && ticket != 0 {
		err = s.waitDurable(ticket)
	}
	if err != nil {
		return [32]byte{}, err
	}
	return d, nil
}

// Get returns the payload whose SHA-256 is d: ErrNotFound if the store does
// not hold it, ErrCorrupt if its record fails its CRC or the payload its
// digest. A batch found corrupt is no longer served: Has is false for it,
// and a Put stores it again.
func (s *Store) Get(d [32]byte) ([]byte, error) {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return nil, ErrStoreClosed
	}
	loc, ok := s.mu.index[d]
	if ok {
		loc.seg.ref()
	}
	s.mu.RUnlock()
	if !ok {
		return nil, ErrNotFound
	}
	defer loc.seg.unref()
	rec := make([]byte, storeOverhead+int(loc.n))
	if n, err := loc.seg.f.ReadAt(rec, loc.off); n < len(rec) {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, s.forget(d, loc, "the file ends inside the record")
		}
		return nil, fmt.Errorf("stele/dataplane: reading batch %x at %d of %s: %w", d[:8], loc.off, loc.seg.path, err)
	}
	if why := checkStoreRecord(rec, d); why != "" {
		return nil, s.forget(d, loc, why)
	}
	return rec[storeHeaderSize : storeHeaderSize+int(loc.n)], nil
}

// Has reports whether the store holds, durably, the batch whose digest is d.
func (s *Store) Has(d [32]byte) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.mu.index[d]
	return ok && !s.mu.closed
}

// Prune deletes every segment other than the active one all of whose
// records have a height below belowHeight (a segment with no readable
// record included), and stops serving their batches. It returns how many
// segments it deleted.
func (s *Store) Prune(belowHeight int64) (removedSegments int, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.mu.closed {
		return 0, ErrStoreClosed
	}
	segs := s.mu.segs
	var keep, drop []*storeSegment
	for i, seg := range segs {
		if i < len(segs)-1 && seg.maxHeight < belowHeight {
			drop = append(drop, seg)
		} else {
			keep = append(keep, seg)
		}
	}
	if len(drop) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	for _, seg := range drop {
		seg.removed = true
		for _, d := range seg.digests {
			if loc, ok := s.mu.index[d]; ok && loc.seg == seg {
				delete(s.mu.index, d)
			}
		}
	}
	s.mu.segs = keep
	s.mu.Unlock()
	var errs []error
	for _, seg := range drop {
		s.bytes.Add(-seg.size)
		if err := os.Remove(seg.path); err != nil {
			errs = append(errs, fmt.Errorf("stele/dataplane: pruning: %w", err))
		}
		seg.unref() // readers still holding it finish on the open file
	}
	if err := storage.SyncDir(s.dir); err != nil {
		errs = append(errs, err)
	}
	return len(drop), errors.Join(errs...)
}

// Stats describes the store.
func (s *Store) Stats() StoreStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return StoreStats{Batches: len(s.mu.index), Bytes: s.bytes.Load(), Segments: len(s.mu.segs)}
}

// Close makes every record appended so far durable (Puts waiting for it
// then succeed) and closes the store; later calls fail with ErrStoreClosed.
// Gets in progress finish on the files they hold.
func (s *Store) Close() error {
	s.wmu.Lock()
	if s.mu.closed {
		s.wmu.Unlock()
		return nil
	}
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()
	s.wmu.Unlock()

	s.gc.mu.Lock()
	s.gc.closing = true
	for s.gc.running {
		s.gc.cond.Wait()
	}
	s.gc.running = true
	s.gc.mu.Unlock()
	upTo, err := s.syncAndPublish()
	s.gc.mu.Lock()
	s.gc.running, s.gc.closed = false, true
	if err != nil {
		s.gc.err = err
	} else if upTo > s.gc.done {
		s.gc.done = upTo
	}
	s.gc.cond.Broadcast()
	s.gc.mu.Unlock()

	s.wmu.Lock()
	s.mu.Lock()
	segs := s.mu.segs
	s.mu.segs, s.mu.index = nil, nil
	s.mu.Unlock()
	s.wmu.Unlock()
	for _, seg := range segs {
		seg.unref()
	}
	return err
}

// appendLocked appends one record to the active segment, rolling first if
// it would take the segment past the roll size, and returns its ticket: 0
// if the batch is already durable. The caller holds wmu.
func (s *Store) appendLocked(d [32]byte, height int64, hdr, payload, trailer []byte) (uint64, error) {
	switch {
	case s.mu.closed:
		return 0, ErrStoreClosed
	case s.failed != nil:
		return 0, s.failed
	}
	if loc, ok := s.mu.index[d]; ok && loc.seg.maxHeight >= height {
		return 0, nil
	}
	if p, ok := s.pending[d]; ok && p.loc.seg.maxHeight >= height {
		return p.ticket, nil
	}
	seg := s.mu.segs[len(s.mu.segs)-1]
	size := alignUp(int64(storeOverhead + len(payload)))
	if seg.size > 0 && seg.size+size > s.segmentBytes {
		var err error
		if seg, err = s.rollLocked(); err != nil {
			return 0, err
		}
	}
	pos := seg.size
	rec := s.recordBuffer(int(size))
	copy(rec, hdr)
	copy(rec[storeHeaderSize:], payload)
	copy(rec[storeHeaderSize+len(payload):], trailer)
	clear(rec[storeOverhead+len(payload):])
	_, err := seg.w.WriteAt(rec, pos)
	if err != nil && seg.w != seg.f && errors.Is(err, syscall.EINVAL) {
		// A file system that opened the file for O_DIRECT but refuses
		// the write (an alignment it wants larger): write through the
		// page cache from now on.
		s.log.Warn("batch store: direct writes refused; writing through the page cache", "file", seg.path, "err", err)
		_ = seg.w.Close()
		seg.w = seg.f
		_, err = seg.w.WriteAt(rec, pos)
	}
	if err != nil {
		// Nothing is published; the next record overwrites this one
		// and OpenStore would cut it.
		_ = seg.f.Truncate(pos)
		return 0, fmt.Errorf("stele/dataplane: writing a batch to %s: %w", seg.path, err)
	}
	seg.size += size
	seg.records++
	seg.maxHeight = max(seg.maxHeight, height)
	seg.digests = append(seg.digests, d)
	s.bytes.Add(size)
	s.lastTicket++
	s.pending[d] = storePending{ticket: s.lastTicket, loc: storeLoc{seg: seg, off: pos, n: uint32(len(payload)), height: height}}
	return s.lastTicket, nil
}

// recordBuffer returns a storeAlign-aligned buffer of size bytes (a
// multiple of storeAlign) to assemble a record in, as O_DIRECT writes
// require. The caller holds wmu.
func (s *Store) recordBuffer(size int) []byte {
	if cap(s.scratch) >= size {
		return s.scratch[:size]
	}
	b := alignedBuffer(size)
	if size <= maxScratchBytes {
		s.scratch = b
	}
	return b
}

// alignedBuffer allocates size bytes starting at a multiple of storeAlign.
func alignedBuffer(size int) []byte {
	b := make([]byte, size+storeAlign)
	skip := (storeAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%storeAlign)) % storeAlign
	return b[skip : skip+size : skip+size]
}

// alignUp rounds n up to a multiple of storeAlign.
func alignUp(n int64) int64 { return (n + storeAlign - 1) &^ (storeAlign - 1) }

// rollLocked fsyncs the active segment, creates the next one and fsyncs the
// directory, so that only the last segment can have unsynced records. The
// caller holds wmu.
func (s *Store) rollLocked() (*storeSegment, error) {
	old := s.mu.segs[len(s.mu.segs)-1]
	if old.id > math.MaxInt64-old.records {
		return nil, fmt.Errorf("stele/dataplane: segment %s: no name left for the next segment", old.path)
	}
	s.syncs.Add(1)
	if err := durable.Sync(old.f); err != nil {
		return nil, s.failLocked(fmt.Errorf("stele/dataplane: fsync %s: %w", old.path, err))
	}
	seg, err := openStoreSegment(s.dir, old.id+old.records, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return nil, err
	}
	if err := storage.SyncDir(s.dir); err != nil {
		seg.unref()
		return nil, s.failLocked(err)
	}
	s.mu.Lock()
	s.mu.segs = append(s.mu.segs, seg)
	s.mu.Unlock()
	return seg, nil
}

// failLocked fails the store with err and returns it. The caller holds wmu.
func (s *Store) failLocked(err error) error {
	if s.failed == nil {
		s.failed = err
		s.log.Error("batch store failed; it accepts no more batches", "dir", s.dir, "err", err)
	}
	return s.failed
}

// waitDurable returns once the record with ticket is durable, becoming the
// leader that fsyncs for everyone waiting if no other is.
func (s *Store) waitDurable(ticket uint64) error {
	s.gc.mu.Lock()
	defer s.gc.mu.Unlock()
	for {
		switch {
		case s.gc.done >= ticket:
			return nil
		case s.gc.err != nil:
			return s.gc.err
		case s.gc.closed:
			return ErrStoreClosed
		case s.gc.running || s.gc.closing:
			s.gc.cond.Wait()
		default:
			s.gc.running = true
			s.gc.mu.Unlock()
			upTo, err := s.syncAndPublish()
			s.gc.mu.Lock()
			s.gc.running = false
			if err != nil {
				s.gc.err = err
			} else if upTo > s.gc.done {
				s.gc.done = upTo
			}
			s.gc.cond.Broadcast()
		}
	}
}

// syncAndPublish fsyncs the active segment and indexes every record
// appended before it started, returning the last ticket it covered.
// Records in earlier segments were fsynced when their segment rolled.
func (s *Store) syncAndPublish() (uint64, error) {
	s.wmu.Lock()
	if s.failed != nil {
		s.wmu.Unlock()
		return 0, s.failed
	}
	upTo := s.lastTicket
	seg := s.mu.segs[len(s.mu.segs)-1]
	seg.ref()
	s.wmu.Unlock()

	if s.syncHook != nil {
		s.syncHook()
	}
	s.syncs.Add(1)
	err := durable.Sync(seg.f)
	seg.unref()

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err != nil {
		return 0, s.failLocked(fmt.Errorf("stele/dataplane: fsync %s: %w", seg.path, err))
	}
	s.mu.Lock()
	for d, p := range s.pending {
		if p.ticket > upTo {
			continue
		}
		delete(s.pending, d)
		if !p.loc.seg.removed && !s.mu.closed {
			s.mu.index[d] = p.loc
		}
	}
	s.mu.Unlock()
	return upTo, nil
}

// load indexes the records of seg, opened at OpenStore, cutting the file
// after its last good record if it is the last segment. Only the last
// segment's records are read whole (their payloads checked against their
// digests): only it can end in a torn record. A sealed segment was fsynced
// before the next one was made, so its records are whole unless the disk
// rotted them, which Get finds when it reads one (and the store forgets the
// batch, so the data plane fetches a good copy); of them load reads the
// headers and checks their CRCs, so that opening a store costs about one
// segment's reading and hashing however large the store.
func (s *Store) load(seg *storeSegment, last bool) error {
	fi, err := seg.f.Stat()
	if err != nil {
		return fmt.Errorf("stele/dataplane: %w", err)
	}
	scan := scanStoreHeaders
	if last {
		scan = scanStoreSegment
	}
	end, why, err := scan(seg.f, fi.Size(), func(pos int64, n uint32, height int64, d [32]byte) {
		s.mu.index[d] = storeLoc{seg: seg, off: pos, n: n, height: height}
		seg.records++
		seg.maxHeight = max(seg.maxHeight, height)
		seg.digests = append(seg.digests, d)
	})
	if err != nil {
		return err
	}
	seg.size = end
	switch {
	case end == fi.Size():
	case last:
		if err := seg.f.Truncate(end); err != nil {
			return fmt.Errorf("stele/dataplane: cutting the torn tail of %s: %w", seg.path, err)
		}
		s.log.Warn("batch store: cut a torn tail", "file", seg.path, "position", end, "bytes", fi.Size()-end, "reason", why)
	default:
		s.log.Error("batch store: corrupt segment; the records from this position on are not served",
			"file", seg.path, "position", end, "bytes", fi.Size()-end, "reason", why)
	}
	if last && end != alignUp(end) {
		// The next record must start on a boundary: zeros (padding) up
		// to it.
		if err := seg.f.Truncate(alignUp(end)); err != nil {
			return fmt.Errorf("stele/dataplane: padding %s: %w", seg.path, err)
		}
		seg.size = alignUp(end)
	}
	s.bytes.Add(seg.size)
	return nil
}

// scanStoreSegment reads the records of f, size bytes long, in order and
// calls fn for each good one. It stops at the first record that is not
// whole or fails its CRC or digest, and returns the position where it
// stopped (size if every record was good) and why. err is an I/O error.
func scanStoreSegment(f *os.File, size int64, fn func(pos int64, n uint32, height int64, d [32]byte)) (end int64, why string, err error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 1<<20)
	var hdr [storeHeaderSize]byte
	var buf []byte
	pos := int64(0)
	for pos < size {
		if size-pos < storeOverhead {
			return pos, "a partial record", nil
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return pos, "", fmt.Errorf("stele/dataplane: reading %s at %d: %w", f.Name(), pos, err)
		}
		n, why := checkStoreHeader(hdr[:], pos, size)
		if why != "" {
			return pos, why, nil
		}
		if cap(buf) < int(n)+storeTrailerSize {
			buf = make([]byte, int(n)+storeTrailerSize)
		}
		body := buf[:int(n)+storeTrailerSize]
		if _, err := io.ReadFull(r, body); err != nil {
			return pos, "", fmt.Errorf("stele/dataplane: reading %s at %d: %w", f.Name(), pos, err)
		}
		payload := body[:n]
		if recordCRC(hdr[:], payload) != binary.BigEndian.Uint32(body[n:]) {
			return pos, "a CRC mismatch", nil
		}
		d := [32]byte(hdr[16:48])
		if sha256.Sum256(payload) != d {
			return pos, "a payload that does not match its digest", nil
		}
		fn(pos, n, int64(binary.BigEndian.Uint64(hdr[8:])), d)
		pos += storeOverhead + int64(n)
		// Zero bytes up to the next storeAlign boundary are padding; a
		// record right here is the older, unpadded layout.
		if pad := min(alignUp(pos), size) - pos; pad > 0 {
			b, err := r.Peek(int(pad))
			if err != nil {
				return pos, "", fmt.Errorf("stele/dataplane: reading %s at %d: %w", f.Name(), pos, err)
			}
			if allZero(b) {
				_, _ = r.Discard(int(pad))
				pos += pad
			}
		}
	}
	return pos, "", nil
}

// checkStoreHeader checks the header hdr of a record at pos in a segment
// of size bytes: its magic, and a payload length that fits. It returns the
// length, or why the record is bad.
func checkStoreHeader(hdr []byte, pos, size int64) (n uint32, why string) {
	if m := string(hdr[:4]); m != storeMagic && m != storeMagicV1 {
		return 0, "no record magic"
	}
	n = binary.BigEndian.Uint32(hdr[4:])
	if n == 0 || n > MaxStoredBatchBytes {
		return 0, fmt.Sprintf("a payload length of %d", n)
	}
	if pos+storeOverhead+int64(n) > size {
		return 0, fmt.Sprintf("a partial record: its %d-byte payload runs past the end", n)
	}
	return n, ""
}

// scanStoreHeaders is scanStoreSegment for a sealed segment: it reads each
// record's header and CRC, not its payload (for an SBT2 record, whose CRC
// covers the header only; an SBT1 record's CRC covers its payload, which it
// reads), and so does not check payloads against their digests.
func scanStoreHeaders(f *os.File, size int64, fn func(pos int64, n uint32, height int64, d [32]byte)) (end int64, why string, err error) {
	var hdr [storeHeaderSize]byte
	// The trailer and the padding after it: up to the next boundary.
	tail := make([]byte, storeTrailerSize+storeAlign)
	var body []byte
	read := func(b []byte, at int64) error {
		if _, err := f.ReadAt(b, at); err != nil {
			return fmt.Errorf("stele/dataplane: reading %s at %d: %w", f.Name(), at, err)
		}
		return nil
	}
	pos := int64(0)
	for pos < size {
		if size-pos < storeOverhead {
			return pos, "a partial record", nil
		}
		if err := read(hdr[:], pos); err != nil {
			return pos, "", err
		}
		n, why := checkStoreHeader(hdr[:], pos, size)
		if why != "" {
			return pos, why, nil
		}
		d := [32]byte(hdr[16:48])
		next := pos + storeOverhead + int64(n)
		pad := min(alignUp(next), size) - next
		t := tail[:storeTrailerSize+pad]
		if err := read(t, next-storeTrailerSize); err != nil {
			return pos, "", err
		}
		if string(hdr[:4]) == storeMagicV1 {
			if cap(body) < int(n) {
				body = make([]byte, n)
			}
			payload := body[:n]
			if err := read(payload, pos+storeHeaderSize); err != nil {
				return pos, "", err
			}
			if recordCRC(hdr[:], payload) != binary.BigEndian.Uint32(t) {
				return pos, "a CRC mismatch", nil
			}
			if sha256.Sum256(payload) != d {
				return pos, "a payload that does not match its digest", nil
			}
		} else if recordCRC(hdr[:], nil) != binary.BigEndian.Uint32(t) {
			return pos, "a CRC mismatch", nil
		}
		fn(pos, n, int64(binary.BigEndian.Uint64(hdr[8:])), d)
		pos = next
		// Zero bytes up to the next storeAlign boundary are padding; a
		// record right here is the older, unpadded layout.
		if pad > 0 && allZero(t[storeTrailerSize:]) {
			pos += pad
		}
	}
	return pos, "", nil
}

// forget stops serving d from loc, whose record failed its checks when Get
// read it, as if OpenStore's scan had found it bad: Has then reports the
// batch missing, so the data plane fetches it from a peer, and a Put of it
// writes a good copy. It returns the error Get reports.
func (s *Store) forget(d [32]byte, loc storeLoc, why string) error {
	err := fmt.Errorf("%w: %s at position %d: %s", ErrCorrupt, loc.seg.path, loc.off, why)
	s.wmu.Lock()
	s.mu.Lock()
	cur, ok := s.mu.index[d]
	forgot := ok && cur.seg == loc.seg && cur.off == loc.off
	if forgot {
		delete(s.mu.index, d)
	}
	s.mu.Unlock()
	s.wmu.Unlock()
	if forgot {
		s.log.Error("batch store: a stored batch is corrupt; it is no longer served", "batch", fmt.Sprintf("%x", d[:8]), "err", err)
	}
	return err
}

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkStoreRecord checks a whole record read back for digest d, and
// returns what is wrong with it, or "".
func checkStoreRecord(rec []byte, d [32]byte) string {
	n := len(rec) - storeOverhead
	switch {
	case string(rec[:4]) != storeMagic && string(rec[:4]) != storeMagicV1:
		return "no record magic"
	case binary.BigEndian.Uint32(rec[4:]) != uint32(n):
		return "a payload length that differs from the index"
	case [32]byte(rec[16:48]) != d:
		return "a digest that differs from the one asked for"
	case recordCRC(rec[:storeHeaderSize], rec[storeHeaderSize:storeHeaderSize+n]) != binary.BigEndian.Uint32(rec[storeHeaderSize+n:]):
		return "a CRC mismatch"
	case sha256.Sum256(rec[storeHeaderSize:storeHeaderSize+n]) != d:
		// Records of either magic: a CRC is no digest.
		return "a payload that does not match its digest"
	}
	return ""
}

// recordCRC is the CRC a record with header hdr (its magic read) and
// payload must end with.
func recordCRC(hdr, payload []byte) uint32 {
	crc := crc32.Checksum(hdr, storeCRC)
	if string(hdr[:4]) == storeMagicV1 {
		crc = crc32.Update(crc, storeCRC, payload)
	}
	return crc
}

// listStoreSegments returns the ids of the segment files in dir, in order.
func listStoreSegments(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("stele/dataplane: %w", err)
	}
	var ids []int64
	for _, e := range entries {
		digits, ok := strings.CutSuffix(e.Name(), storeSuffix)
		if !ok || len(digits) != 20 || !e.Type().IsRegular() || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		if id, err := strconv.ParseInt(digits, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// openStoreSegment opens (with flag) the segment file of id in dir.
func openStoreSegment(dir string, id int64, flag int) (*storeSegment, error) {
	path := filepath.Join(dir, fmt.Sprintf("%020d%s", id, storeSuffix))
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("stele/dataplane: %w", err)
	}
	if flag&os.O_TRUNC != 0 {
		durable.Created(f)
	}
	w := f
	if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		// Where the file system cannot write around the page cache
		// (tmpfs, other systems), f writes.
		if d, err := openDirect(path); err == nil {
			w = d
		}
	}
	seg := &storeSegment{id: id, path: path, f: f, w: w, maxHeight: math.MinInt64}
	seg.refs.Store(1)
	return seg, nil
}

// ref adds a reader's reference. The caller holds mu (or wmu), so seg is
// still in the store and its count is not zero.
func (seg *storeSegment) ref() { seg.refs.Add(1) }

// unref drops a reference; the last one closes the file.
func (seg *storeSegment) unref() {
	if seg.refs.Add(-1) == 0 {
		if seg.w != seg.f {
			_ = seg.w.Close()
		}
		_ = seg.f.Close()
	}
}
