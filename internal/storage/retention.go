package storage

import (
	"errors"
	"fmt"
)

// TruncateTo drops every batch at or after offset next, so that the log
// ends at next: the state machine calls it on start to remove bytes a block
// appended but never committed. next must be a batch boundary: the log end
// offset, the base offset of the first segment, or an offset some batch ends
// just before. Cutting inside a batch, or in a gap compaction left, is an
// ErrNotBatchBoundary error; next above the log end or below its base is
// ErrOffsetOutOfRange.
//
// Later segments are deleted (the last first) and the segment holding next
// is cut and becomes the active segment; its batches are checked again and
// its indexes rebuilt.
func (l *Log) TruncateTo(next int64) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	l.swapMu.Lock()
	defer l.swapMu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	segs := l.mu.segs
	end := l.active().next
	switch {
	case next == end:
		return nil
	case next > end || next < segs[0].base:
		return fmt.Errorf("%w: cannot truncate to %d: the log holds [%d, %d)", ErrOffsetOutOfRange, next, segs[0].base, end)
	}
	k := len(segs) - 1
	for k > 0 && segs[k].base >= next {
		k--
	}
	s := segs[k]
	cut := int64(0)
	if next > s.base {
		pos, h, err := s.view().findBatch(next - 1)
		if err != nil {
			return err
		}
		if pos == s.size || h.LastOffset() != next-1 {
			if pos < s.size && h.BaseOffset < next {
				return fmt.Errorf("%w: offset %d is inside the batch [%d, %d]", ErrNotBatchBoundary, next, h.BaseOffset, h.LastOffset())
			}
			return fmt.Errorf("%w: no batch ends at offset %d", ErrNotBatchBoundary, next-1)
		}
		cut = pos + int64(h.Size())
	}

	// Readers see the cut before the file is cut, and those that read
	// while it happened retry (truncations).
	dropped := segs[k+1:]
	l.mu.Lock()
	l.mu.segs = segs[: k+1 : k+1]
	s.size, s.next = cut, next
	l.mu.truncations++
	l.mu.Unlock()
	var errs []error
	for i := len(dropped) - 1; i >= 0; i-- {
		dropped[i].unref()
		errs = append(errs, removeSegmentFiles(dropped[i].path))
	}
	if len(dropped) > 0 {
		l.dirDirty = true
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := s.log.Truncate(cut); err != nil {
		return fmt.Errorf("stele/storage: truncating %s: %w", s.log.Name(), err)
	}
	s.dirty = true
	st, _, err := s.recoverActive(l.cfg)
	if err != nil {
		return err
	}
	l.mu.Lock()
	s.publish(st)
	l.mu.truncations++
	l.mu.Unlock()
	if st.next != next {
		return corruptAt(s.log.Name(), st.size, fmt.Sprintf("after truncating to offset %d the segment ends at %d: a batch before the cut is damaged", next, st.next))
	}
	return nil
}

// DeleteSegmentsBefore deletes the segments all of whose offsets are below
// offset (retention, DeleteRecords) and returns the new base offset. If that
// takes in the active segment, a new empty one is first started at the log
// end offset, as Kafka does; an empty active segment is never deleted.
//
// It may run while a compaction pass is rewriting segments it deletes: it
// waits only for a swap in progress (swapMu), and the pass then discards its
// copies of deleted segments.
func (l *Log) DeleteSegmentsBefore(offset int64) (int64, error) {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	l.swapMu.Lock()
	defer l.swapMu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	segs := l.mu.segs
	n := 0
	for n < len(segs) && segs[n].next <= offset {
		if n == len(segs)-1 && segs[n].size == 0 {
			break // an empty active segment stays
		}
		n++
	}
	if n == 0 {
		return segs[0].base, nil
	}
	keep := segs[n:]
	if n == len(segs) {
		s, err := createSegment(l.dir, l.active().next, l.cfg)
		if err != nil {
			return segs[0].base, err
		}
		// The new segment must be durable before the old ones go, or a
		// crash could leave an empty directory, which restarts at offset 0.
		if err := s.syncAll(); err != nil {
			s.unref()
			return segs[0].base, err
		}
		if err := SyncDir(l.dir); err != nil {
			s.unref()
			return segs[0].base, err
		}
		keep = []*segment{s}
	}
	l.mu.Lock()
	l.mu.segs = keep
	l.mu.Unlock()
	l.dirDirty = true
	var errs []error
	for _, s := range segs[:n] {
		s.unref()
		errs = append(errs, removeSegmentFiles(s.path))
	}
	return keep[0].base, errors.Join(errs...)
}
