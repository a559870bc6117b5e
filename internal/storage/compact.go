package storage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/stele-io/stele/internal/record"
)

// CompactStats reports what one Compact pass did.
type CompactStats struct {
	SegmentsExamined int   // sealed segments below the first unstable offset
	SegmentsCleaned  int   // of those, segments rewritten
	BytesBefore      int64 // size of the rewritten segments before
	BytesAfter       int64 // and after
	Keys             int   // distinct keys in the whole log

	Superseded   int64 // records removed because their key has a later record
	Snapshotted  int64 // records removed because their key has a later snapshot
	Tombstones   int64 // tombstones removed past the delete horizon
	Keyless      int64 // records without a key, removed
	Aborted      int64 // records of aborted transactions, removed
	BatchesEmpty int64 // batches all of whose records went
}

// Compact applies cleanup.policy=compact to the sealed segments, never the
// active one, and returns what it did. It is deterministic: the result is a
// pure function of the log's bytes and deleteHorizon, so every broker
// compacting the same log writes the same bytes, and running it again with
// the same argument changes nothing.
//
// The rules, and where they differ from Kafka's LogCleaner:
//
//   - A record is kept only if it is the latest record of its key in the
//     whole log, the active segment included (Kafka maps only the dirty
//     section up to the active segment). Keys are compared by a 128-bit
//     SHA-256 prefix, as Kafka's cleaner compares MD5 digests.
//   - A latest record with a null value (a tombstone) is removed once its
//     batch's MaxTimestamp is below deleteHorizon (the caller passes block
//     time minus delete.retention.ms). Kafka (KIP-534) instead stamps the
//     horizon into the batch on a first pass. Which tombstones a pass
//     removes is TombstoneRule (tombstones.go), which the state machine
//     calls too, to drop their table leaves.
//   - Records without a key are removed, as Kafka's cleaner does (Kafka
//     refuses to append them to a compacted topic in the first place).
//   - Transactions are read from the log itself: a transactional batch
//     belongs to its producer's open transaction, which the producer's next
//     control batch commits or aborts. Records of aborted transactions are
//     removed and never count as a key's latest record; records of
//     transactions still open count neither, and no segment at or after the
//     first open transaction is cleaned (Kafka's last stable offset bound).
//     Control batches are kept whole (Kafka removes markers eventually).
//   - Offsets never change. A batch that loses some records keeps its base
//     offset, LastOffsetDelta, timestamps, producer fields and attributes;
//     its remaining records are written again, compressed with the same
//     codec. A batch that loses every record disappears, except the last
//     batch of a segment, which stays as an empty batch (header only, no
//     compression, as Kafka writes one) so that every sealed segment ends
//     at its last offset. Keeping MaxTimestamp (Kafka recomputes it) is
//     what makes a second pass change nothing.
//   - Each segment is rewritten on its own; Kafka merges small neighbours,
//     which would make the result depend on how many passes ran.
//
// A rewritten segment goes through NNN.log.cleaned, then NNN.log.swap (the
// commit point), then NNN.log, with its indexes (see the package
// documentation); OpenLog finishes or rolls back a pass a crash interrupted.
// The rewrite holds none of the applier's locks: appends go on, readers keep
// reading the old files until the new segment is swapped in (see
// PrepareCompaction for running it on another goroutine).
func (l *Log) Compact(deleteHorizon int64) (CompactStats, error) {
	return l.CompactWith(CompactOptions{DeleteHorizon: deleteHorizon, Latest: true})
}

// CompactOptions says which records a compaction pass removes.
type CompactOptions struct {
	// Latest: every record but the latest of its key, keyless records and
	// tombstones older than DeleteHorizon (cleanup.policy=compact).
	Latest        bool
	DeleteHorizon int64
	// SnapshotHeader, when not empty: every record older than its key's
	// latest committed snapshot record, a record carrying a header of that
	// name (cleanup.policy=snapshot, docs/keys.md). Keyless records and
	// tombstones stay unless Latest removes them.
	SnapshotHeader string

	// The pass's bounds, fixed when it is decided so that appends after the
	// decision change nothing in what it writes. UpTo: only segments that
	// end at or below it are rewritten (0: the sealed segments when the pass
	// is prepared). End: the key map reads the batches below it (0: the log
	// end when the pass is prepared); it must not exceed the log end.
	UpTo, End int64
	// ID is the caller's name for the decision (the state machine's
	// height), kept in the plan file (see PrepareCompaction).
	ID int64
}

// CompactWith is Compact with the rules of opts; records of aborted
// transactions go in every mode. Compact's documentation holds for each.
// It prepares a pass (PrepareCompaction without a plan file) and runs it.
func (l *Log) CompactWith(opts CompactOptions) (CompactStats, error) {
	p, err := l.prepare(opts, false)
	if err != nil {
		return CompactStats{}, err
	}
	return p.Run()
}

// keyHash identifies a key in the compaction map.
type keyHash [16]byte

func hashKey(k []byte) keyHash {
	sum := sha256.Sum256(k)
	return keyHash(sum[:16])
}

// keyMap is what compaction learns from a pass over the whole log.
type keyMap struct {
	latest        map[keyHash]int64       // key -> offset of its latest committed record
	snapshot      map[keyHash]int64       // key -> offset of its latest committed snapshot record
	snapHeader    string                  // the header that marks a snapshot record ("": none)
	aborted       map[int64][]offsetRange // producer -> aborted transactions, in order
	open          map[int64]*openTxn      // producer -> transaction not yet ended
	firstUnstable int64                   // first offset of the oldest open transaction
}

type offsetRange struct{ first, last int64 }

// openTxn is a transaction whose marker has not been seen yet.
type openTxn struct {
	first int64
	keys  []keyHash
	offs  []int64
	snaps []bool // the record is a snapshot
}

// Control record types (the second int16 of a control record's key).
const (
	controlAbort  = 0
	controlCommit = 1
)

// buildKeyMap reads every batch of the pass's segments below its end
// offset (checking CRCs) and records each key's latest committed offset and
// the aborted transactions.
func (p *CompactionPass) buildKeyMap() (*keyMap, error) {
	km := &keyMap{latest: map[keyHash]int64{}, snapshot: map[keyHash]int64{}, snapHeader: p.opts.SnapshotHeader,
		aborted: map[int64][]offsetRange{}, open: map[int64]*openTxn{}}
	for _, s := range p.segs {
		end, err := scanBatches(s.seg.log, 0, s.size, func(_ int64, h record.Header, b []byte) error {
			if h.BaseOffset >= p.end {
				return errEndOfPass
			}
			if err := p.stopping(); err != nil {
				return err
			}
			return km.add(h, b)
		})
		if errors.Is(err, errEndOfPass) {
			break
		}
		if err != nil {
			return nil, err
		}
		if end != s.size {
			return nil, corruptAt(s.seg.log.Name(), end, "compaction found a batch that does not check out")
		}
	}
	km.firstUnstable = math.MaxInt64
	for _, t := range km.open {
		km.firstUnstable = min(km.firstUnstable, t.first)
	}
	return km, nil
}

// add accounts for one batch.
func (km *keyMap) add(h record.Header, b []byte) error {
	if h.Control() {
		var typ int16 = -1
		if _, err := record.Each(b, func(r *record.Record) error {
			if len(r.Key) >= 4 {
				typ = int16(binary.BigEndian.Uint16(r.Key[2:]))
			}
			return nil
		}); err != nil {
			return fmt.Errorf("stele/storage: compaction: control batch at offset %d: %w", h.BaseOffset, err)
		}
		km.endTxn(h.ProducerID, h.BaseOffset, typ)
		return nil
	}
	var t *openTxn
	if h.Transactional() {
		if t = km.open[h.ProducerID]; t == nil {
			t = &openTxn{first: h.BaseOffset}
			km.open[h.ProducerID] = t
		}
	}
	_, err := record.Each(b, func(r *record.Record) error {
		if r.Key == nil {
			return nil
		}
		k := hashKey(r.Key)
		snap := km.isSnapshot(r)
		if t != nil {
			t.keys, t.offs, t.snaps = append(t.keys, k), append(t.offs, r.Offset), append(t.snaps, snap)
		} else {
			km.latest[k] = r.Offset
			if snap {
				km.snapshot[k] = r.Offset
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stele/storage: compaction: batch at offset %d: %w", h.BaseOffset, err)
	}
	return nil
}

// endTxn applies a producer's transaction marker at offset marker.
func (km *keyMap) endTxn(producer, marker int64, typ int16) {
	t := km.open[producer]
	if t == nil {
		return
	}
	delete(km.open, producer)
	switch typ {
	case controlCommit:
		for i, k := range t.keys {
			if t.offs[i] > km.latest[k] {
				km.latest[k] = t.offs[i]
			}
			if t.snaps[i] && t.offs[i] > km.snapshot[k] {
				km.snapshot[k] = t.offs[i]
			}
		}
	case controlAbort:
		km.aborted[producer] = append(km.aborted[producer], offsetRange{t.first, marker})
	}
}

// isSnapshot reports whether r carries the snapshot header.
func (km *keyMap) isSnapshot(r *record.Record) bool {
	if km.snapHeader == "" {
		return false
	}
	for _, h := range r.Headers {
		if h.Key == km.snapHeader {
			return true
		}
	}
	return false
}

// isAborted reports whether the batch at offset off of producer belongs to
// an aborted transaction.
func (km *keyMap) isAborted(producer, off int64) bool {
	rs := km.aborted[producer]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].last >= off })
	return i < len(rs) && rs[i].first <= off
}

// cleanSegment rewrites one sealed segment if compaction changes it.
func (p *CompactionPass) cleanSegment(s *segment, size int64, km *keyMap, stats *CompactStats) error {
	l, opts := p.log, p.opts
	c := &cleanedWriter{src: s, ix: newIndexer(p.cfg)}
	var (
		pending    []byte // a batch emptied by compaction, kept if it turns out to be the last
		pendingOld bool   // pending is byte-identical to the batch it stands for
		cs         CompactStats
	)
	end, err := scanBatches(s.log, 0, size, func(_ int64, h record.Header, b []byte) error {
		if err := p.stopping(); err != nil {
			return err
		}
		nb, err := cleanBatch(h, b, km, opts, &cs)
		if err != nil {
			return err
		}
		if pending != nil { // not the last batch: it goes after all
			pending = nil
			if err := c.change(); err != nil {
				return err
			}
		}
		if nb == nil {
			cs.BatchesEmpty++
			if pending, err = emptyBatch(h); err != nil {
				return err
			}
			pendingOld = bytes.Equal(pending, b)
			return nil
		}
		if !bytes.Equal(nb, b) {
			if err := c.change(); err != nil {
				return err
			}
		}
		return c.add(nb)
	})
	if err == nil && end != size {
		err = corruptAt(s.log.Name(), end, "compaction found a batch that does not check out")
	}
	if err == nil && pending != nil {
		if !pendingOld {
			err = c.change()
		}
		if err == nil {
			err = c.add(pending)
		}
	}
	if err == nil && c.f != nil {
		err = c.finish()
	}
	if err != nil || c.f == nil {
		c.discard()
		return err
	}
	swapped, err := l.swapIn(s, c.pos, c.ix, p.cfg)
	if err != nil || !swapped {
		return err
	}
	stats.SegmentsCleaned++
	stats.BytesBefore += size
	stats.BytesAfter += c.pos
	stats.Superseded += cs.Superseded
	stats.Snapshotted += cs.Snapshotted
	stats.Tombstones += cs.Tombstones
	stats.Keyless += cs.Keyless
	stats.Aborted += cs.Aborted
	stats.BatchesEmpty += cs.BatchesEmpty
	return nil
}

// cleanedWriter writes NNN.log.cleaned and its indexes. It writes nothing
// until the first batch that differs from the source: until then the copy
// is a prefix of the source, which change copies when it is needed, so a
// segment compaction leaves alone costs no writes.
type cleanedWriter struct {
	src *segment
	f   *os.File // nil until change
	w   *bufio.Writer
	ix  indexer
	pos int64 // size of the copy so far
}

// change starts writing the copy, if it has not started.
func (c *cleanedWriter) change() error {
	if c.f != nil {
		return nil
	}
	f, err := os.OpenFile(c.src.path+logSuffix+cleanedSuffix, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	c.f, c.w = f, bufio.NewWriterSize(f, 1<<20)
	if _, err := io.Copy(c.w, io.NewSectionReader(c.src.log, 0, c.pos)); err != nil {
		return fmt.Errorf("stele/storage: compaction: %w", err)
	}
	return nil
}

// add appends a batch to the copy.
func (c *cleanedWriter) add(b []byte) error {
	h, err := record.ParseHeader(b)
	if err != nil {
		return err
	}
	if c.w != nil {
		if _, err := c.w.Write(b); err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
	}
	c.ix.add(c.src.base, c.pos, h)
	c.pos += int64(len(b))
	return nil
}

// finish writes the indexes and makes the copy durable.
func (c *cleanedWriter) finish() error {
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	c.ix.seal(c.src.base)
	if err := writeCleanedIndexes(c.src.path, c.ix); err != nil {
		return err
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("stele/storage: fsync %s: %w", c.f.Name(), err)
	}
	if err := c.f.Close(); err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	return nil
}

// discard closes and deletes whatever the copy wrote.
func (c *cleanedWriter) discard() {
	if c.f != nil {
		_ = c.f.Close() // may be closed already
	}
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		_ = os.Remove(c.src.path + suffix + cleanedSuffix)
	}
}

// cleanBatch returns b itself if compaction keeps all of it, a rebuilt
// batch holding the records it keeps, or nil if it keeps none.
func cleanBatch(h record.Header, b []byte, km *keyMap, opts CompactOptions, cs *CompactStats) ([]byte, error) {
	if h.Control() {
		return b, nil
	}
	_, recs, err := record.Records(b)
	if err != nil {
		return nil, fmt.Errorf("stele/storage: compaction: batch at offset %d: %w", h.BaseOffset, err)
	}
	if h.Transactional() && km.isAborted(h.ProducerID, h.BaseOffset) {
		cs.Aborted += int64(len(recs))
		return nil, nil
	}
	keep := recs[:0]
	for _, r := range recs {
		switch {
		case opts.Latest && r.Key == nil:
			cs.Keyless++
		case opts.Latest && km.latest[hashKey(r.Key)] > r.Offset:
			cs.Superseded++
		case opts.Latest && r.Value == nil && tombstoneExpired(h.MaxTimestamp, opts.DeleteHorizon):
			cs.Tombstones++
		case r.Key != nil && opts.SnapshotHeader != "" && km.snapshot[hashKey(r.Key)] > r.Offset:
			cs.Snapshotted++
		default:
			keep = append(keep, r)
		}
	}
	switch {
	case len(keep) == int(h.NumRecords):
		return b, nil
	case len(keep) == 0:
		return nil, nil
	}
	nb, err := record.Build(h, keep)
	if err != nil {
		return nil, fmt.Errorf("stele/storage: compaction: rebuilding batch at offset %d: %w", h.BaseOffset, err)
	}
	if !h.LogAppendTime() {
		record.SetMaxTimestamp(nb, h.MaxTimestamp) // Build recomputes it from the records left
	}
	return nb, nil
}

// emptyBatch returns the header-only batch that stands for h once
// compaction removed all its records: same offsets and producer fields, no
// compression, both timestamps set to MaxTimestamp, as Kafka's
// DefaultRecordBatch.writeEmptyHeader.
func emptyBatch(h record.Header) ([]byte, error) {
	h.Attributes &^= int16(0x07)
	h.FirstTimestamp = h.MaxTimestamp
	b, err := record.Build(h, nil)
	if err != nil {
		return nil, fmt.Errorf("stele/storage: compaction: emptying batch at offset %d: %w", h.BaseOffset, err)
	}
	return b, nil
}

// writeCleanedIndexes writes and fsyncs NNN.index.cleaned and
// NNN.timeindex.cleaned.
func writeCleanedIndexes(path string, ix indexer) error {
	for _, x := range []struct {
		suffix  string
		entries []byte
	}{{indexSuffix, ix.offs}, {timeIndexSuffix, ix.times}} {
		name := path + x.suffix + cleanedSuffix
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		_, err = f.Write(x.entries)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("stele/storage: writing %s: %w", name, err)
		}
	}
	return nil
}

// errSimulatedCrash is returned when a test's swapHook stops a swap.
var errSimulatedCrash = errors.New("stele/storage: simulated crash")

// swapIn replaces segment s by its cleaned files, crash-safely:
//
//  1. NNN.index.cleaned and NNN.timeindex.cleaned become .swap, then
//     NNN.log.cleaned becomes NNN.log.swap: the commit point;
//  2. the index .swap files replace NNN.index and NNN.timeindex, then
//     NNN.log.swap replaces NNN.log.
//
// The directory is fsynced between steps, so a crash leaves either no
// .log.swap (OpenLog deletes the .cleaned and .swap files: the old segment
// stands) or a .log.swap with the new indexes either still .swap or already
// in place (OpenLog renames what remains). The new segment is then published
// under the lock; readers of the old one finish on its open files.
//
// swapIn holds swapMu, so no segment deletion runs during the renames; a
// segment deleted (retention, DeleteRecords) or a log closed while the pass
// was writing its copy is not swapped: the copy is discarded and swapIn
// reports false.
func (l *Log) swapIn(s *segment, size int64, ix indexer, cfg LogConfig) (bool, error) {
	l.swapMu.Lock()
	defer l.swapMu.Unlock()
	l.mu.RLock()
	present, closed := false, l.mu.closed
	for _, old := range l.mu.segs {
		present = present || old == s
	}
	l.mu.RUnlock()
	if closed || !present {
		for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
			_ = os.Remove(s.path + suffix + cleanedSuffix)
		}
		if closed {
			return false, ErrClosed
		}
		return false, nil
	}
	steps := []struct{ from, to string }{
		{s.path + indexSuffix + cleanedSuffix, s.path + indexSuffix + swapSuffix},
		{s.path + timeIndexSuffix + cleanedSuffix, s.path + timeIndexSuffix + swapSuffix},
		{"", ""}, // fsync
		{s.path + logSuffix + cleanedSuffix, s.path + logSuffix + swapSuffix},
		{"", ""},
		{s.path + indexSuffix + swapSuffix, s.path + indexSuffix},
		{s.path + timeIndexSuffix + swapSuffix, s.path + timeIndexSuffix},
		{"", ""},
		{s.path + logSuffix + swapSuffix, s.path + logSuffix},
		{"", ""},
	}
	const commitStep = 3
	for i, st := range steps {
		if l.swapHook != nil && l.swapHook(s.base, i) {
			return false, errSimulatedCrash
		}
		var err error
		if st.from == "" {
			err = SyncDir(l.dir)
		} else if err = os.Rename(st.from, st.to); err != nil {
			err = fmt.Errorf("stele/storage: compaction swap: %w", err)
		}
		if err != nil {
			if i <= commitStep { // the commit point was not reached: roll back
				for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
					_ = os.Remove(s.path + suffix + cleanedSuffix)
					_ = os.Remove(s.path + suffix + swapSuffix)
				}
			}
			return false, err
		}
	}
	ns, err := openSegmentFiles(l.dir, s.base, cfg)
	if err != nil {
		return false, err
	}
	ns.size, ns.next, ns.ix = size, s.next, ix
	ns.flushedOffs, ns.flushedTimes = ix.nOffs, ix.nTimes
	ns.dropIndexMemory()
	l.mu.Lock()
	for i, old := range l.mu.segs {
		if old == s {
			l.mu.segs[i] = ns
		}
	}
	l.mu.Unlock()
	s.unref()
	return true, nil
}
