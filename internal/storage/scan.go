package storage

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/stele-io/stele/internal/record"
)

// scanChunk is how much of a segment recovery and compaction read at once.
const scanChunk = 1 << 20

// walkChunk is how much of a segment a reader reads at once while it walks
// batch headers (a few index intervals).
const walkChunk = 32 << 10

// errStopScan, returned by a scanBatches callback, ends the scan at the
// batch it was called with, as if that batch were corrupt.
var errStopScan = errors.New("stele/storage: stop scan")

// scanBatches reads the batches of f from position start to end in order
// and calls fn with the position, header and bytes of each whole batch
// whose CRC checks out (b is valid only during the call). It stops at the
// first bytes that are not such a batch, or when fn returns errStopScan, and
// returns the position where it stopped: end if every batch was good. err is
// an I/O error or another error from fn.
func scanBatches(f io.ReaderAt, start, end int64, fn func(pos int64, h record.Header, b []byte) error) (int64, error) {
	var buf []byte
	pos := start
	for pos < end {
		n := min(int64(scanChunk), end-pos)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		chunk := buf[:n]
		if err := readFull(f, chunk, pos); err != nil {
			return pos, err
		}
		good, headers := record.ValidPrefix(chunk)
		if good == 0 {
			// The batch at pos may be longer than a chunk.
			h, err := record.ParseHeader(chunk)
			if err != nil || int64(h.Size()) <= n || pos+int64(h.Size()) > end {
				return pos, nil
			}
			big := make([]byte, h.Size())
			if err := readFull(f, big, pos); err != nil {
				return pos, err
			}
			if _, err := record.CheckCRC(big); err != nil {
				return pos, nil
			}
			if err := fn(pos, h, big); err != nil {
				return pos, stopped(err)
			}
			pos += int64(len(big))
			continue
		}
		off := 0
		for _, h := range headers {
			if err := fn(pos+int64(off), h, chunk[off:off+h.Size()]); err != nil {
				return pos + int64(off), stopped(err)
			}
			off += h.Size()
		}
		pos += int64(good)
	}
	return pos, nil
}

// stopped turns errStopScan into a clean stop.
func stopped(err error) error {
	if errors.Is(err, errStopScan) {
		return nil
	}
	return err
}

// readFull reads len(b) bytes of f at off.
func readFull(f io.ReaderAt, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("stele/storage: reading %d bytes at %d of %s: %w", len(b), off, fileName(f), err)
}

// fileName names f in errors.
func fileName(f io.ReaderAt) string {
	if f, ok := f.(*os.File); ok {
		return f.Name()
	}
	return "segment"
}

// walker reads the batch headers of one segment's log in order, a chunk at
// a time, without reading whole batches or checking CRCs: the reading path
// of Fetch and ListOffsets, as Kafka's FileRecords iterates batches.
type walker struct {
	f      *os.File
	end    int64 // size of the segment's whole batches
	pos    int64 // position of the next batch
	buf    []byte
	bufPos int64 // file position of buf[0]
}

func newWalker(f *os.File, pos, end int64) *walker {
	return &walker{f: f, pos: pos, end: end}
}

// next returns the next batch's header and position; ok is false at the
// end. A header that does not parse, or a batch running past the end, is an
// ErrCorrupt error naming the file and position.
func (w *walker) next() (h record.Header, pos int64, ok bool, err error) {
	if w.pos >= w.end {
		return record.Header{}, 0, false, nil
	}
	if w.pos < w.bufPos || w.pos+record.HeaderSize > w.bufPos+int64(len(w.buf)) {
		n := min(int64(walkChunk), w.end-w.pos)
		if n < record.HeaderSize {
			return record.Header{}, 0, false, corruptAt(w.f.Name(), w.pos, "a partial batch header")
		}
		if int64(cap(w.buf)) < n {
			w.buf = make([]byte, walkChunk)
		}
		w.buf = w.buf[:n]
		if err := readFull(w.f, w.buf, w.pos); err != nil {
			return record.Header{}, 0, false, err
		}
		w.bufPos = w.pos
	}
	h, err = record.ParseHeader(w.buf[w.pos-w.bufPos:])
	if err != nil {
		return record.Header{}, 0, false, corruptAt(w.f.Name(), w.pos, err.Error())
	}
	if w.pos+int64(h.Size()) > w.end {
		return record.Header{}, 0, false, corruptAt(w.f.Name(), w.pos, fmt.Sprintf("a batch of %d bytes runs past the end", h.Size()))
	}
	pos = w.pos
	w.pos += int64(h.Size())
	return h, pos, true, nil
}

// corruptAt returns an ErrCorrupt error naming a file and a position.
func corruptAt(file string, pos int64, what string) error {
	return fmt.Errorf("%w: %s at position %d: %s", ErrCorrupt, file, pos, what)
}
