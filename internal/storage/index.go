package storage

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/stele-io/stele/internal/record"
)

// Index entry sizes, as in Kafka's OffsetIndex and TimeIndex.
const (
	offsetEntrySize = 8  // relative offset uint32, position uint32
	timeEntrySize   = 12 // timestamp int64, relative offset uint32
)

// indexer holds a segment's offset and time index entries and the running
// state that decides them, and applies Kafka's rules (LogSegment.append and
// LogSegment.recover) batch by batch:
//
//   - the offset index gets an entry (batch last offset, batch position) for
//     a batch that starts more than IndexIntervalBytes after the last
//     indexed batch;
//   - at the same time the time index gets (largest timestamp so far, last
//     offset of the first batch that reached it) if that timestamp is larger
//     than its last entry's;
//   - when the segment is sealed, the time index gets its final entry the
//     same way, so a sealed segment's largest timestamp is its last time
//     index entry.
//
// Because entries depend only on the batches and the config, a rebuilt index
// equals the one written while appending.
//
// The entries are kept in memory (offs, times) while the segment is active;
// a sealed segment drops them and reads its index files instead.
type indexer struct {
	interval   int64 // index.interval.bytes
	maxOffsets int   // entries an offset index may hold
	maxTimes   int   // entries a time index may hold

	offs, times []byte // entries, when held in memory
	nOffs       int    // entries in the offset index
	nTimes      int    // entries in the time index
	lastIdxPos  int64  // position of the last batch given an offset index entry (0 if none)
	lastTimeTs  int64  // timestamp of the last time index entry (-1 if none)
	lastTimeOff int64  // offset of the last time index entry

	maxTs    int64 // largest batch MaxTimestamp so far (-1 if none)
	maxTsOff int64 // last offset of the first batch that reached maxTs
	rollTs   int64 // MaxTimestamp of the first batch that has one (-1 if none)
}

func newIndexer(cfg LogConfig) indexer {
	return indexer{
		interval:    int64(cfg.IndexIntervalBytes),
		maxOffsets:  int(cfg.MaxIndexBytes) / offsetEntrySize,
		maxTimes:    int(cfg.MaxIndexBytes) / timeEntrySize,
		lastTimeTs:  -1,
		lastTimeOff: -1,
		maxTs:       -1,
		maxTsOff:    -1,
		rollTs:      -1,
	}
}

// add accounts for batch h appended at position pos of a segment based at
// base. The caller ensures the relative offsets fit 32 bits.
func (x *indexer) add(base, pos int64, h record.Header) {
	if h.MaxTimestamp > x.maxTs {
		x.maxTs, x.maxTsOff = h.MaxTimestamp, h.LastOffset()
	}
	if x.rollTs < 0 && h.MaxTimestamp >= 0 {
		x.rollTs = h.MaxTimestamp
	}
	if pos-x.lastIdxPos > x.interval && x.nOffs < x.maxOffsets {
		x.offs = binary.BigEndian.AppendUint32(x.offs, uint32(h.LastOffset()-base))
		x.offs = binary.BigEndian.AppendUint32(x.offs, uint32(pos))
		x.nOffs++
		x.lastIdxPos = pos
		if x.nTimes < x.maxTimes {
			x.maybeAppendTime(base)
		}
	}
}

// seal appends the final time index entry.
func (x *indexer) seal(base int64) { x.maybeAppendTime(base) }

// maybeAppendTime appends (maxTs, maxTsOff) to the time index if maxTs is
// larger than its last entry, as Kafka's TimeIndex.maybeAppend.
func (x *indexer) maybeAppendTime(base int64) {
	if x.maxTs <= x.lastTimeTs {
		return
	}
	x.times = binary.BigEndian.AppendUint64(x.times, uint64(x.maxTs))
	x.times = binary.BigEndian.AppendUint32(x.times, uint32(x.maxTsOff-base))
	x.nTimes++
	x.lastTimeTs, x.lastTimeOff = x.maxTs, x.maxTsOff
}

// full reports whether either index is full: Kafka rolls the segment then.
func (x *indexer) full() bool { return x.nOffs >= x.maxOffsets || x.nTimes >= x.maxTimes }

// indexView is a reader's picture of one index: entries in memory (mem, the
// first n*width bytes of which are never modified once published) or in the
// file f.
type indexView struct {
	f     *os.File
	width int
	mem   []byte
	n     int
}

// entry reads entry i into buf (width bytes) and returns it.
func (v indexView) entry(i int, buf []byte) ([]byte, error) {
	if v.mem != nil {
		return v.mem[i*v.width : (i+1)*v.width], nil
	}
	if _, err := v.f.ReadAt(buf[:v.width], int64(i)*int64(v.width)); err != nil {
		return nil, fmt.Errorf("stele/storage: reading %s: %w", v.f.Name(), err)
	}
	return buf[:v.width], nil
}

// search returns the largest i in [0, n) for which below(entry i) holds,
// assuming below is true for a prefix of the entries, or -1. If the entries
// are not sorted (a damaged index), the entry returned still satisfies
// below.
func (v indexView) search(below func(e []byte) bool) (int, []byte, error) {
	var buf [timeEntrySize]byte
	var err error
	i := sort.Search(v.n, func(i int) bool {
		if err != nil {
			return true
		}
		e, rerr := v.entry(i, buf[:])
		if rerr != nil {
			err = rerr
			return true
		}
		return !below(e)
	})
	if err != nil || i == 0 {
		return -1, nil, err
	}
	e, err := v.entry(i-1, buf[:])
	if err != nil {
		return -1, nil, err
	}
	return i - 1, append([]byte(nil), e...), nil
}

// offsetFloor returns the last offset index entry whose offset is <= target:
// the last offset of a batch and that batch's position.
func offsetFloor(v indexView, base, target int64) (off, pos int64, ok bool, err error) {
	i, e, err := v.search(func(e []byte) bool { return base+int64(binary.BigEndian.Uint32(e)) <= target })
	if i < 0 {
		return 0, 0, false, err
	}
	return base + int64(binary.BigEndian.Uint32(e)), int64(binary.BigEndian.Uint32(e[4:])), true, nil
}

// timeFloor returns the last time index entry whose timestamp is < ts.
func timeFloor(v indexView, base, ts int64) (entryTs, off int64, ok bool, err error) {
	i, e, err := v.search(func(e []byte) bool { return int64(binary.BigEndian.Uint64(e)) < ts })
	if i < 0 {
		return 0, 0, false, err
	}
	return int64(binary.BigEndian.Uint64(e)), base + int64(binary.BigEndian.Uint32(e[8:])), true, nil
}

// timeBefore returns the last time index entry whose offset is < upTo.
func timeBefore(v indexView, base, upTo int64) (entryTs, off int64, ok bool, err error) {
	i, e, err := v.search(func(e []byte) bool { return base+int64(binary.BigEndian.Uint32(e[8:])) < upTo })
	if i < 0 {
		return 0, 0, false, err
	}
	return int64(binary.BigEndian.Uint64(e)), base + int64(binary.BigEndian.Uint32(e[8:])), true, nil
}

// checkOffsetIndex checks the entries of an offset index file of a segment
// [base, next) of size bytes: whole entries, offsets and positions strictly
// increasing and inside the segment. It is the sanity check that decides
// whether an index is rebuilt on open.
func checkOffsetIndex(b []byte, base, next, size int64) error {
	if len(b)%offsetEntrySize != 0 {
		return fmt.Errorf("size %d is not a multiple of %d", len(b), offsetEntrySize)
	}
	prevOff, prevPos := int64(-1), int64(-1)
	for i := 0; i < len(b); i += offsetEntrySize {
		off := base + int64(binary.BigEndian.Uint32(b[i:]))
		pos := int64(binary.BigEndian.Uint32(b[i+4:]))
		if off <= prevOff || pos <= prevPos || off >= next || pos+record.HeaderSize > size {
			return fmt.Errorf("entry %d (offset %d, position %d) is out of order or outside the segment", i/offsetEntrySize, off, pos)
		}
		prevOff, prevPos = off, pos
	}
	return nil
}

// checkTimeIndex checks a time index file the same way: timestamps strictly
// increasing, offsets non-decreasing and inside [base, next).
func checkTimeIndex(b []byte, base, next int64) error {
	if len(b)%timeEntrySize != 0 {
		return fmt.Errorf("size %d is not a multiple of %d", len(b), timeEntrySize)
	}
	prevTs, prevOff := int64(math.MinInt64), int64(-1)
	for i := 0; i < len(b); i += timeEntrySize {
		ts := int64(binary.BigEndian.Uint64(b[i:]))
		off := base + int64(binary.BigEndian.Uint32(b[i+8:]))
		if ts <= prevTs || off < prevOff || off >= next {
			return fmt.Errorf("entry %d (timestamp %d, offset %d) is out of order or outside the segment", i/timeEntrySize, ts, off)
		}
		prevTs, prevOff = ts, off
	}
	return nil
}
