package meter

import (
	"fmt"
	"unicode/utf8"
)

// meterCode meters every function body of a code section, fuel being the
// fuel global's index.
func meterCode(sec []byte, fuel uint32) ([]byte, error) {
	r := reader{b: sec}
	n := r.count()
	out := appendU32(nil, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		fb := r.take(int(size))
		if r.err != nil {
			break
		}
		body, err := meterBody(fb, fuel)
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the function bodies", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// point is where fuel is charged: at offset at of the body, the cost of
// the region owner; always: charged even when the region is one
// instruction (a function's entry, a loop's top).
type point struct {
	at     int
	owner  int
	always bool
}

// maxDepth bounds the nesting of blocks a body may have.
const maxDepth = 1 << 16

// maxLocals bounds a function's locals, as browsers' engines do: a body
// of a few bytes may declare billions, which a runtime would allocate.
const maxLocals = 50000

// meterBody meters one function body: its locals, then its instructions.
func meterBody(fb []byte, fuel uint32) ([]byte, error) {
	r := reader{b: fb}
	locals := uint64(0)
	for n, i := r.count(), uint32(0); i < n && r.err == nil; i++ {
		locals += uint64(r.u32())
		r.valtype()
		if locals > maxLocals {
			r.fail("more than %d locals in a function", maxLocals)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	pos := func() int { return len(fb) - len(r.b) }
	// Regions of straight-line code, each charged at its start: the
	// function's entry, and the code after each instruction where control
	// may go elsewhere or arrive from elsewhere.
	points := []point{{at: pos(), owner: 0, always: true}}
	costs := []int64{0}
	region := 0
	open := func(always bool) {
		costs = append(costs, 0)
		region = len(costs) - 1
		points = append(points, point{at: pos(), owner: region, always: always})
	}
	depth := 1 // the function's own frame and the blocks open in it
	for depth > 0 && r.err == nil {
		if len(r.b) == 0 {
			r.fail("the body ends inside a block")
			break
		}
		costs[region]++
		op := r.byte()
		switch op {
		case 0x02: // block: entered in line
			r.blocktype()
			depth++
		case 0x03: // loop: the top of each iteration, always charged
			r.blocktype()
			depth++
			open(true)
		case 0x04: // if: its first arm
			r.blocktype()
			depth++
			open(false)
		case 0x05: // else: the second arm
			open(false)
		case 0x0B: // end: where branches to the block arrive
			if depth--; depth > 0 {
				open(false)
			}
		case 0x00, 0x0C, 0x0D, 0x0E, 0x0F, 0x12, 0x13:
			// unreachable, br, br_if (its fall-through), br_table,
			// return, return_call, return_call_indirect
			r.immediates(op)
			open(false)
		default:
			r.immediates(op)
		}
		if depth > maxDepth {
			r.fail("blocks nested deeper than %d", maxDepth)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the function's end", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	out := make([]byte, 0, len(fb)+len(points)*24)
	prev := 0
	for _, p := range points {
		// A region of one instruction (an end after an end, say) is not
		// worth its charge; the entry and loop tops are always charged,
		// so every call and every iteration costs fuel.
		if costs[p.owner] <= 1 && !p.always {
			continue
		}
		out = append(out, fb[prev:p.at]...)
		out = appendCharge(out, fuel, max(costs[p.owner], 1))
		prev = p.at
	}
	return append(out, fb[prev:]...), nil
}

// appendCharge appends the code that takes cost from the fuel global and
// traps when it goes below zero.
func appendCharge(b []byte, fuel uint32, cost int64) []byte {
	b = append(b, 0x23) // global.get
	b = appendU32(b, fuel)
	b = append(b, 0x42) // i64.const
	b = appendS64(b, cost)
	b = append(b, 0x7D, 0x24) // i64.sub, global.set
	b = appendU32(b, fuel)
	b = append(b, 0x23) // global.get
	b = appendU32(b, fuel)
	return append(b, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0B) // i64.const 0, i64.lt_s, if, unreachable, end
}

// immediates reads the immediates of the instruction op (not a block,
// loop, if or end), refusing what it does not know.
func (r *reader) immediates(op byte) {
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0F || op == 0x1A || op == 0x1B || op == 0xD1:
		// unreachable, nop, else, return, drop, select, ref.is_null
	case op == 0x0C || op == 0x0D || op == 0x10 || op == 0x12 || op == 0xD2:
		r.u32() // br, br_if, call, return_call, ref.func
	case op == 0x0E: // br_table
		for n, i := r.count(), uint32(0); i < n && r.err == nil; i++ {
			r.u32()
		}
		r.u32()
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1C: // select with types
		for n, i := r.count(), uint32(0); i < n && r.err == nil; i++ {
			r.valtype()
		}
	case op >= 0x20 && op <= 0x25: // locals, globals, table.get
		r.u32()
	case op == 0x26:
		r.fail("table.set is not allowed: an instance's state is its memory and globals")
	case op >= 0x28 && op <= 0x3E: // loads and stores
		r.memarg()
	case op == 0x3F || op == 0x40: // memory.size, memory.grow
		r.u32()
	case op == 0x41:
		r.sleb(5)
	case op == 0x42:
		r.sleb(10)
	case op == 0x43:
		r.take(4)
	case op == 0x44:
		r.take(8)
	case op >= 0x45 && op <= 0xC4: // numeric, sign extension
	case op == 0xD0: // ref.null
		r.valtype()
	case op == 0xFC:
		switch sub := r.u32(); {
		case sub <= 7: // saturating truncations
		case sub == 11 || sub == 16:
			r.u32() // memory.fill, table.size
		case sub == 10:
			r.u32() // memory.copy
			r.u32()
		case sub == 8 || sub == 9 || (sub >= 12 && sub <= 15) || sub == 17:
			// memory.init, data.drop, table.init, elem.drop, table.copy,
			// table.grow, table.fill: a segment dropped or a table
			// changed would be state beyond the memory and the globals.
			r.fail("instruction 0xFC %d is not allowed: an instance's state is its memory and globals", sub)
		default:
			r.fail("instruction 0xFC %d", sub)
		}
	case op == 0xFD:
		r.fail("SIMD instructions are not allowed")
	case op == 0xFE:
		r.fail("threads' atomic instructions are not allowed")
	default:
		r.fail("instruction 0x%02X", op)
	}
}

// reader decodes the binary format; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = bad(format, args...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("truncated: %d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() uint32 {
	var v uint32
	for i := 0; i < 5; i++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if i == 4 && c > 0x0F {
			r.fail("an integer past 32 bits")
			return 0
		}
		v |= uint32(c&0x7F) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("an integer past 32 bits")
	return 0
}

// sleb skips a signed LEB128 of at most max bytes.
func (r *reader) sleb(max int) {
	for i := 0; i < max; i++ {
		if c := r.byte(); r.err != nil || c&0x80 == 0 {
			return
		}
	}
	r.fail("a signed integer too long")
}

func (r *reader) name() string {
	b := r.take(int(r.u32()))
	if r.err == nil && !utf8.Valid(b) {
		r.fail("a name that is not UTF-8")
	}
	return string(b)
}

func (r *reader) valtype() {
	switch t := r.byte(); t {
	case 0x7F, 0x7E, 0x7D, 0x7C, 0x70, 0x6F: // i32, i64, f32, f64, funcref, externref
	case 0x7B:
		r.fail("SIMD values are not allowed")
	default:
		r.fail("value type 0x%02X", t)
	}
}

// blocktype reads a block's type: empty (0x40), a value type, or a type
// index (a signed 33-bit LEB128 whose one-byte negative values are the
// others).
func (r *reader) blocktype() {
	switch {
	case len(r.b) > 0 && r.b[0] == 0x40:
		r.byte()
	case len(r.b) > 0 && r.b[0]&0xC0 == 0x40:
		r.valtype()
	default:
		r.sleb(5)
	}
}

func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 {
		r.fail("multiple memories are not allowed")
	}
	r.u32()
}

func (r *reader) limits() {
	switch flags := r.byte(); flags {
	case 0x00:
		r.u32()
	case 0x01:
		r.u32()
		r.u32()
	default:
		r.fail("limits of kind 0x%02X (shared or 64-bit) are not allowed", flags)
	}
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
