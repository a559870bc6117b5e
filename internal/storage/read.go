package storage

import (
	"fmt"

	"github.com/stele-io/stele/internal/record"
)

// maxReadAttempts bounds the retries of a read that raced a TruncateTo.
const maxReadAttempts = 3

// Read returns whole batches starting with the batch that holds offset (or,
// in a gap left by compaction, the first batch after it), continuing into
// later segments, up to maxBytes in total; but always at least one whole
// batch if there is one below upTo, however large (KIP-74). It never
// returns a batch whose base offset is >= upTo, the high watermark the
// reader may see. It returns (nil, nil) when there is nothing to return, and
// ErrOffsetOutOfRange for offset < BaseOffset() or > NextOffset().
//
// The first batch may begin before offset; Kafka clients skip the records
// they did not ask for. Read holds no lock while it reads files.
func (l *Log) Read(offset int64, maxBytes int, upTo int64) (out []byte, err error) {
	return l.read(offset, maxBytes, upTo, true)
}

// ReadWithin is Read without the exception for the first batch: it returns
// only whole batches that fit in maxBytes together, so nothing when the
// batch holding offset is larger than maxBytes. It is how Kafka reads every
// partition of a fetch after the first that returned data (KIP-74).
func (l *Log) ReadWithin(offset int64, maxBytes int, upTo int64) ([]byte, error) {
	return l.read(offset, maxBytes, upTo, false)
}

// read is Read (minOne) or ReadWithin.
func (l *Log) read(offset int64, maxBytes int, upTo int64, minOne bool) (out []byte, err error) {
	err = l.withViews(func() ([]segView, uint64, error) { return l.viewsFrom(offset) }, func(views []segView) error {
		out, err = readViews(views, offset, maxBytes, upTo, minOne)
		return err
	})
	return out, err
}

// withViews calls fn with the views take returns, and releases them after.
// Readers hold no lock while they read, so one may read a file that a
// TruncateTo is cutting (only past the high watermark, which readers do not
// return, but a chunk read may reach there); a read that fails while a
// truncation happened is retried.
func (l *Log) withViews(take func() ([]segView, uint64, error), fn func([]segView) error) error {
	for attempt := 1; ; attempt++ {
		views, gen, err := take()
		if err != nil {
			return err
		}
		err = fn(views)
		release(views)
		if err != nil && attempt < maxReadAttempts && l.truncatedSince(gen) {
			continue
		}
		return err
	}
}

// viewsFrom takes views of (and references to) the segments from the one
// holding offset to the last. It returns no views at the log end.
func (l *Log) viewsFrom(offset int64) ([]segView, uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return nil, 0, ErrClosed
	}
	segs := l.mu.segs
	base, next := segs[0].base, segs[len(segs)-1].next
	if offset < base || offset > next {
		return nil, 0, fmt.Errorf("%w: offset %d is outside [%d, %d]", ErrOffsetOutOfRange, offset, base, next)
	}
	if offset == next {
		return nil, 0, nil
	}
	i := len(segs) - 1
	for i > 0 && segs[i].base > offset {
		i--
	}
	views := make([]segView, 0, len(segs)-i)
	for _, s := range segs[i:] {
		s.ref()
		views = append(views, s.view())
	}
	return views, l.mu.truncations, nil
}

// allViews takes views of (and references to) every segment.
func (l *Log) allViews() ([]segView, uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return nil, 0, ErrClosed
	}
	views := make([]segView, 0, len(l.mu.segs))
	for _, s := range l.mu.segs {
		s.ref()
		views = append(views, s.view())
	}
	return views, l.mu.truncations, nil
}

// truncatedSince reports whether a TruncateTo cut data after a reader took
// its views at generation gen.
func (l *Log) truncatedSince(gen uint64) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.truncations != gen
}

func release(views []segView) {
	for _, v := range views {
		v.seg.unref()
	}
}

// readViews is the body of Read; minOne says whether the first batch goes
// out whole even when larger than maxBytes.
func readViews(views []segView, offset int64, maxBytes int, upTo int64, minOne bool) ([]byte, error) {
	var out []byte // nil at the log end: no views
	for i, v := range views {
		if v.base >= upTo {
			break
		}
		pos := int64(0)
		if i == 0 {
			var err error
			if pos, _, err = v.findBatch(offset); err != nil {
				return nil, err
			}
		}
		for pos < v.size {
			room := int64(maxBytes - len(out))
			if len(out) == 0 && minOne {
				room = max(room, record.HeaderSize)
			}
			n := min(room, v.size-pos)
			if n < record.HeaderSize {
				return out, nil
			}
			buf := make([]byte, n)
			if err := readFull(v.seg.log, buf, pos); err != nil {
				return nil, err
			}
			take, full, err := wholeBatches(buf, upTo, v.seg.log.Name(), pos)
			if err != nil {
				return nil, err
			}
			if take == 0 && len(out) == 0 && !full {
				if !minOne {
					return nil, nil // the first batch does not fit
				}
				// KIP-74: the first batch goes out whole, however large.
				h, _ := record.ParseHeader(buf)
				if pos+int64(h.Size()) > v.size {
					return nil, corruptAt(v.seg.log.Name(), pos, "a batch runs past the end of the segment")
				}
				buf = make([]byte, h.Size())
				if err := readFull(v.seg.log, buf, pos); err != nil {
					return nil, err
				}
				return buf, nil
			}
			if out == nil {
				out = buf[:take]
			} else {
				out = append(out, buf[:take]...)
			}
			if full || take < int(n) {
				return out, nil
			}
			pos += int64(take)
		}
	}
	return out, nil
}

// wholeBatches returns how many leading bytes of buf are whole batches with
// base offsets below upTo. full is true if it stopped at a batch at or above
// upTo. A header that does not parse is an ErrCorrupt error.
func wholeBatches(buf []byte, upTo int64, file string, pos int64) (n int, full bool, err error) {
	for len(buf)-n >= record.HeaderSize {
		h, err := record.ParseHeader(buf[n:])
		if err != nil {
			return 0, false, corruptAt(file, pos+int64(n), err.Error())
		}
		if h.BaseOffset >= upTo {
			return n, true, nil
		}
		if h.Size() > len(buf)-n {
			break
		}
		n += h.Size()
	}
	return n, false, nil
}

// findBatch returns the position of the first batch of v whose last offset
// is >= offset (v.size if none), and that batch's header. It starts from
// the offset index entry at or below offset, checking that the entry points
// at the batch it names; a damaged entry is ignored and the walk starts at
// the beginning of the segment.
func (v segView) findBatch(offset int64) (int64, record.Header, error) {
	start := int64(0)
	if off, pos, ok, err := offsetFloor(v.offs, v.base, offset); err != nil {
		return 0, record.Header{}, err
	} else if ok && v.batchEndsAt(pos, off) {
		start = pos
	}
	w := newWalker(v.seg.log, start, v.size)
	for {
		h, pos, ok, err := w.next()
		if err != nil {
			return 0, record.Header{}, err
		}
		if !ok {
			return v.size, record.Header{}, nil
		}
		if h.LastOffset() >= offset {
			return pos, h, nil
		}
	}
}

// batchEndsAt reports whether a batch whose last offset is off starts at
// pos, as an offset index entry claims.
func (v segView) batchEndsAt(pos, off int64) bool {
	if pos+record.HeaderSize > v.size {
		return false
	}
	var b [record.HeaderSize]byte
	if readFull(v.seg.log, b[:], pos) != nil {
		return false
	}
	h, err := record.ParseHeader(b[:])
	return err == nil && h.LastOffset() == off && pos+int64(h.Size()) <= v.size
}

// readBatch reads the whole batch h at pos.
func (v segView) readBatch(pos int64, h record.Header) ([]byte, error) {
	b := make([]byte, h.Size())
	if err := readFull(v.seg.log, b, pos); err != nil {
		return nil, err
	}
	return b, nil
}

// OffsetForTimestamp returns the first offset (below upTo) whose record
// timestamp is >= ts, and that timestamp: ListOffsets by time, found by
// Kafka's method. The first segment whose largest timestamp reaches ts
// holds it; within it, the time index gives the last entry below ts, the
// offset index the position of that entry's batch, and a walk of batch
// headers the first batch whose MaxTimestamp reaches ts, whose records are
// then read. found is false if no record below upTo has such a timestamp.
func (l *Log) OffsetForTimestamp(ts int64, upTo int64) (offset, timestamp int64, found bool, err error) {
	err = l.withViews(l.allViews, func(views []segView) error {
		offset, timestamp, found, err = offsetForTimestamp(views, ts, upTo)
		return err
	})
	return offset, timestamp, found, err
}

// offsetForTimestamp is the body of OffsetForTimestamp.
func offsetForTimestamp(views []segView, ts, upTo int64) (offset, timestamp int64, found bool, err error) {
	for _, v := range views {
		if v.base >= upTo {
			break
		}
		if v.maxTs < ts {
			continue
		}
		start := int64(0)
		if _, off, ok, err := timeFloor(v.times, v.base, ts); err != nil {
			return 0, 0, false, err
		} else if ok {
			if start, _, err = v.findBatch(off); err != nil {
				return 0, 0, false, err
			}
		}
		w := newWalker(v.seg.log, start, v.size)
		for {
			h, pos, ok, err := w.next()
			if err != nil {
				return 0, 0, false, err
			}
			if !ok || h.BaseOffset >= upTo {
				break
			}
			if h.MaxTimestamp < ts {
				continue
			}
			off, rts, ok, err := v.firstRecord(pos, h, func(r *record.Record) bool { return r.Timestamp >= ts && r.Offset < upTo })
			if err != nil || ok {
				return off, rts, ok, err
			}
		}
	}
	return 0, 0, false, nil
}

// firstRecord returns the offset and timestamp of the first record of batch
// h at pos for which match holds.
func (v segView) firstRecord(pos int64, h record.Header, match func(*record.Record) bool) (offset, ts int64, ok bool, err error) {
	b, err := v.readBatch(pos, h)
	if err != nil {
		return 0, 0, false, err
	}
	_, err = record.Each(b, func(r *record.Record) error {
		if match(r) {
			offset, ts, ok = r.Offset, r.Timestamp, true
			return errStopScan
		}
		return nil
	})
	if ok {
		return offset, ts, true, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("stele/storage: batch at %d of %s: %w", pos, v.seg.log.Name(), err)
	}
	return 0, 0, false, nil
}

// MaxTimestamp returns the offset and timestamp of the record with the
// largest timestamp below upTo, the first such record if several share it
// (ListOffsets with timestamp -3, KIP-734). It returns (-1, -1) if no
// record below upTo has a timestamp.
//
// Segments wholly below upTo answer from their largest timestamp; the
// segment holding upTo is walked from its last time index entry below upTo.
func (l *Log) MaxTimestamp(upTo int64) (offset, timestamp int64, err error) {
	err = l.withViews(l.allViews, func(views []segView) error {
		offset, timestamp, err = maxTimestamp(views, upTo)
		return err
	})
	return offset, timestamp, err
}

// maxTimestamp is the body of MaxTimestamp.
func maxTimestamp(views []segView, upTo int64) (offset, timestamp int64, err error) {
	best, bestOff := int64(-1), int64(-1) // the largest timestamp and the last offset of its batch
	var bestView segView
	for _, v := range views {
		if v.base >= upTo {
			break
		}
		ts, off := v.maxTs, v.maxTsOff
		if v.next > upTo {
			if ts, off, err = v.maxBelow(upTo); err != nil {
				return 0, 0, err
			}
		}
		if ts > best {
			best, bestOff, bestView = ts, off, v
		}
	}
	if best < 0 {
		return -1, -1, nil
	}
	pos, h, err := bestView.findBatch(bestOff)
	if err != nil {
		return 0, 0, err
	}
	if pos < bestView.size && h.LastOffset() == bestOff {
		off, ts, ok, err := bestView.firstRecord(pos, h, func(r *record.Record) bool { return r.Timestamp == best })
		if err != nil || ok {
			return off, ts, err
		}
	}
	// The batch claims a MaxTimestamp none of its records has: answer with
	// its last offset, as Kafka did before KAFKA-16310.
	return bestOff, best, nil
}

// maxBelow returns the largest batch MaxTimestamp among v's batches below
// upTo and the last offset of the first batch that has it.
func (v segView) maxBelow(upTo int64) (ts, off int64, err error) {
	ts, off = -1, -1
	start := int64(0)
	if ets, eoff, ok, err := timeBefore(v.times, v.base, upTo); err != nil {
		return 0, 0, err
	} else if ok {
		ts, off = ets, eoff
		if start, _, err = v.findBatch(eoff + 1); err != nil {
			return 0, 0, err
		}
	}
	w := newWalker(v.seg.log, start, v.size)
	for {
		h, _, ok, err := w.next()
		if err != nil {
			return 0, 0, err
		}
		if !ok || h.BaseOffset >= upTo {
			return ts, off, nil
		}
		if h.MaxTimestamp > ts {
			ts, off = h.MaxTimestamp, h.LastOffset()
		}
	}
}
