package core

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is returned when a command or transaction cannot be decoded:
// truncated, oversized, an unknown kind or version, or trailing bytes.
var ErrMalformed = errors.New("stele/fsm: malformed command")

// MaxElems bounds every decoded count so that a hostile length cannot make the
// decoder allocate more than the input could describe.
const MaxElems = 1 << 20

// Writer appends the binary encoding of commands. Integers are big-endian
// fixed width or varints; byte strings and strings are uvarint-length-prefixed.
type Writer struct{ B []byte }

func (w *Writer) U8(v uint8)       { w.B = append(w.B, v) }
func (w *Writer) I16(v int16)      { w.B = binary.BigEndian.AppendUint16(w.B, uint16(v)) }
func (w *Writer) I32(v int32)      { w.B = binary.BigEndian.AppendUint32(w.B, uint32(v)) }
func (w *Writer) I64(v int64)      { w.B = binary.BigEndian.AppendUint64(w.B, uint64(v)) }
func (w *Writer) Uvarint(v uint64) { w.B = binary.AppendUvarint(w.B, v) }
func (w *Writer) Bytes(v []byte)   { w.Uvarint(uint64(len(v))); w.B = append(w.B, v...) }
func (w *Writer) Str(v string)     { w.Uvarint(uint64(len(v))); w.B = append(w.B, v...) }
func (w *Writer) Bool(v bool)      { w.U8(boolByte(v)) }
func (w *Writer) Raw(v []byte)     { w.B = append(w.B, v...) }
func (w *Writer) Count(n int)      { w.Uvarint(uint64(n)) }
func boolByte(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// Reader decodes what writer wrote. The first error sticks: every later read
// returns zero values, and err() reports it, so decoders read straight through
// and check once.
type Reader struct {
	B []byte
	E error
}

func (r *Reader) Fail(format string, args ...any) {
	if r.E == nil {
		r.E = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (r *Reader) Take(n int) []byte {
	if r.E != nil {
		return nil
	}
	if n < 0 || n > len(r.B) {
		r.Fail("need %d bytes, have %d", n, len(r.B))
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

func (r *Reader) U8() uint8 {
	v := r.Take(1)
	if v == nil {
		return 0
	}
	return v[0]
}

func (r *Reader) I16() int16 {
	v := r.Take(2)
	if v == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(v))
}

func (r *Reader) I32() int32 {
	v := r.Take(4)
	if v == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(v))
}

func (r *Reader) I64() int64 {
	v := r.Take(8)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func (r *Reader) uvarint() uint64 {
	if r.E != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Fail("bad uvarint")
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Count reads an element count, refusing one that could not fit in what is
// left (each element takes at least minSize bytes).
func (r *Reader) Count(minSize int) int {
	n := r.uvarint()
	if r.E != nil {
		return 0
	}
	if n > MaxElems || (minSize > 0 && n > uint64(len(r.B)/minSize)) {
		r.Fail("count %d too large for %d remaining bytes", n, len(r.B))
		return 0
	}
	return int(n)
}

func (r *Reader) Bytes() []byte {
	n := r.uvarint()
	if r.E != nil {
		return nil
	}
	if n > uint64(len(r.B)) {
		r.Fail("length %d exceeds %d remaining bytes", n, len(r.B))
		return nil
	}
	return r.Take(int(n))
}

func (r *Reader) Str() string { return string(r.Bytes()) }

// BytesCopy is bytes in memory of its own: for what the state keeps
// beyond the decoded buffer (a store iterator's value, a batch read from
// the data plane), which its owner may reuse.
func (r *Reader) BytesCopy() []byte {
	b := r.Bytes()
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func (r *Reader) Bool() bool {
	switch r.U8() {
	case 0:
		return false
	case 1:
		return true
	default:
		r.Fail("bad bool")
		return false
	}
}

func (r *Reader) Done() error {
	if r.E == nil && len(r.B) != 0 {
		r.Fail("%d trailing bytes", len(r.B))
	}
	return r.E
}
