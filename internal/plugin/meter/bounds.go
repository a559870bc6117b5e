package meter

// What a module declares is bounded before a runtime sees it: a count of
// a few bytes may declare billions of types' parameters, locals, table
// elements or vector entries, which a runtime allocates before it finds
// the input too short. checkSections reads every section Instrument does
// not rewrite and refuses a count the bytes after it could not hold, a
// function type of more than maxParams parameters or results, and a
// table of more than maxTable elements, and a function's type index out
// of range (which wazero v1.12 does not survive).

const (
	maxParams = 1000
	maxTable  = 100_000
)

// Section ids checkSections reads.
const (
	secType     = 1
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secStart    = 8
	secElement  = 9
	secData     = 11
)

func checkSections(secs []section) (types uint32, err error) {
	for _, s := range secs {
		r := reader{b: s.body}
		switch s.id {
		case secType:
			types = r.count()
			r.b = s.body
			r.vec(func() {
				if f := r.byte(); f != 0x60 {
					r.fail("type form 0x%02X", f)
				}
				for range 2 { // parameters, results
					n := r.count()
					if n > maxParams {
						r.fail("a function type of %d parameters or results", n)
					}
					for i := uint32(0); i < n && r.err == nil; i++ {
						r.valtype()
					}
				}
			})
		case secFunction:
			// wazero v1.12 panics validating a function whose type
			// index is out of range.
			r.vec(func() {
				if t := r.u32(); r.err == nil && t >= types {
					r.fail("a function of type %d, of %d types", t, types)
				}
			})
		case secTable:
			r.vec(func() { r.valtype(); r.table() })
		case secMemory:
			r.vec(func() { r.limits() })
		case secGlobal:
			r.vec(func() { r.valtype(); r.byte(); r.expr() })
		case secStart:
			r.u32()
		case secElement:
			r.vec(r.element)
		case secDataCnt:
			r.u32()
		case secData:
			r.vec(func() {
				switch flags := r.u32(); flags {
				case 0:
					r.expr()
				case 1:
				case 2:
					r.u32()
					r.expr()
				default:
					r.fail("data segment kind %d", flags)
				}
				r.take(int(r.count()))
			})
		default:
			continue // custom sections, and those Instrument reads itself
		}
		if r.err == nil && len(r.b) != 0 {
			r.fail("%d bytes after section %d", len(r.b), s.id)
		}
		if r.err != nil {
			return 0, r.err
		}
	}
	return types, nil
}

// count reads a vector's length, which the bytes left must be able to
// hold (each entry takes one byte at least).
func (r *reader) count() uint32 {
	n := r.u32()
	if r.err == nil && int64(n) > int64(len(r.b)) {
		r.fail("a count of %d with %d bytes left", n, len(r.b))
		return 0
	}
	return n
}

// vec reads a vector of entries, each with entry.
func (r *reader) vec(entry func()) {
	for n, i := r.count(), uint32(0); i < n && r.err == nil; i++ {
		entry()
	}
}

// expr reads a constant expression: instructions without blocks, up to
// its end.
func (r *reader) expr() {
	for r.err == nil {
		op := r.byte()
		switch op {
		case 0x0B:
			return
		case 0x02, 0x03, 0x04:
			r.fail("a block in a constant expression")
		default:
			r.immediates(op)
		}
	}
}

// table reads a table's limits, at most maxTable elements.
func (r *reader) table() {
	switch flags := r.byte(); flags {
	case 0x00:
		if r.u32() > maxTable {
			r.fail("a table of more than %d elements", maxTable)
		}
	case 0x01:
		if min, max := r.u32(), r.u32(); min > maxTable || max > maxTable {
			r.fail("a table of more than %d elements", maxTable)
		}
	default:
		r.fail("table limits of kind 0x%02X", flags)
	}
}

// element reads an element segment, in any of its eight forms.
func (r *reader) element() {
	flags := r.u32()
	if flags > 7 {
		r.fail("element segment kind %d", flags)
		return
	}
	if flags&1 == 0 { // active: an offset, after a table index when bit 1 says so
		if flags&2 != 0 {
			r.u32()
		}
		r.expr()
	}
	if flags&3 != 0 { // an element kind or a reference type
		if flags&4 != 0 {
			r.valtype()
		} else if k := r.byte(); k != 0x00 {
			r.fail("element kind 0x%02X", k)
		}
	}
	if flags&4 != 0 {
		r.vec(r.expr)
	} else {
		r.vec(func() { r.u32() })
	}
}
