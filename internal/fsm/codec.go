package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is returned when a command or transaction cannot be decoded:
// truncated, oversized, an unknown kind or version, or trailing bytes.
var ErrMalformed = errors.New("stele/fsm: malformed command")

// maxElems bounds every decoded count so that a hostile length cannot make the
// decoder allocate more than the input could describe.
const maxElems = 1 << 20

// writer appends the binary encoding of commands. Integers are big-endian
// fixed width or varints; byte strings and strings are uvarint-length-prefixed.
type writer struct{ b []byte }

func (w *writer) u8(v uint8)       { w.b = append(w.b, v) }
func (w *writer) i16(v int16)      { w.b = binary.BigEndian.AppendUint16(w.b, uint16(v)) }
func (w *writer) i32(v int32)      { w.b = binary.BigEndian.AppendUint32(w.b, uint32(v)) }
func (w *writer) i64(v int64)      { w.b = binary.BigEndian.AppendUint64(w.b, uint64(v)) }
func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) bytes(v []byte)   { w.uvarint(uint64(len(v))); w.b = append(w.b, v...) }
func (w *writer) str(v string)     { w.uvarint(uint64(len(v))); w.b = append(w.b, v...) }
func (w *writer) bool(v bool)      { w.u8(boolByte(v)) }
func (w *writer) raw(v []byte)     { w.b = append(w.b, v...) }
func (w *writer) count(n int)      { w.uvarint(uint64(n)) }
func boolByte(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// reader decodes what writer wrote. The first error sticks: every later read
// returns zero values, and err() reports it, so decoders read straight through
// and check once.
type reader struct {
	b []byte
	e error
}

func (r *reader) fail(format string, args ...any) {
	if r.e == nil {
		r.e = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (r *reader) take(n int) []byte {
	if r.e != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("need %d bytes, have %d", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return v[0]
}

func (r *reader) i16() int16 {
	v := r.take(2)
	if v == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(v))
}

func (r *reader) i32() int32 {
	v := r.take(4)
	if v == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(v))
}

func (r *reader) i64() int64 {
	v := r.take(8)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func (r *reader) uvarint() uint64 {
	if r.e != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads an element count, refusing one that could not fit in what is
// left (each element takes at least minSize bytes).
func (r *reader) count(minSize int) int {
	n := r.uvarint()
	if r.e != nil {
		return 0
	}
	if n > maxElems || (minSize > 0 && n > uint64(len(r.b)/minSize)) {
		r.fail("count %d too large for %d remaining bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.e != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("length %d exceeds %d remaining bytes", n, len(r.b))
		return nil
	}
	return r.take(int(n))
}

func (r *reader) str() string { return string(r.bytes()) }

// bytesCopy is bytes in memory of its own: for what the state keeps
// beyond the decoded buffer (a store iterator's value, a batch read from
// the data plane), which its owner may reuse.
func (r *reader) bytesCopy() []byte {
	b := r.bytes()
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func (r *reader) bool() bool {
	switch r.u8() {
	case 0:
		return false
	case 1:
		return true
	default:
		r.fail("bad bool")
		return false
	}
}

func (r *reader) done() error {
	if r.e == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.e
}
