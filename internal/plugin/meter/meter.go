// Package meter adds deterministic fuel metering to a WebAssembly module
// (issue 24, the plugins' instruction budget): Instrument rewrites a
// module so that it counts what it runs in a mutable i64 global it
// exports as FuelExport, and traps (unreachable) once the count goes
// below zero. The host sets the global to the budget before a call and
// reads what is left after it.
//
// Fuel is charged at the start of each region of straight-line code, the
// region's number of instructions: the function's entry, and the code
// after each instruction where control may go elsewhere or arrive from
// elsewhere (loop, if, else, end, br, br_if, br_table, return, the tail
// calls, unreachable). Branches land only at region starts, so a region
// runs whole or not at all (a trap aside), and the fuel a call uses is
// the instructions it runs. Regions of one instruction are not charged, but for a
// function's entry and a loop's top, which are always charged at least
// one: every call and every loop iteration costs fuel, so any run that
// does not end runs out of it, and the fuel a call uses depends on the
// module, its inputs and the budget only: every broker running the same
// module on the same record stops at the same instruction. It is counted
// by instrumentation, never by time. (Charging each loop iteration the
// whole loop body, as this did first, counted Go's code, whose functions
// are one loop around a jump table, some twelve times over.)
//
// Instrument decodes every instruction of every function body, so it also
// refuses what it does not know: SIMD (0xFD), threads (0xFE), exception
// handling and any opcode outside the WebAssembly 2.0 core with tail
// calls; what changes an instance's state beyond its memory and globals
// (table.set, table.grow, table.fill, table.copy, table.init, elem.drop,
// memory.init, data.drop), so that saving those two saves all of it; a function with more than 50,000 locals (a body of a few bytes
// may declare billions, which a runtime would allocate); a module that
// already exports FuelExport or a name starting with GlobalExportPrefix;
// and counts a runtime would allocate before finding the module too
// short, function types of more than 1,000 parameters or results and
// tables of more than 100,000 elements (bounds.go).
//
// Each mutable global of the module's own is exported too (under
// GlobalExportPrefix and its index), so that the host can save an
// instance's whole state, its memory and those globals, and restore it.
package meter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FuelExport is the name the metered module exports its fuel global as.
const FuelExport = "stele_fuel"

// GlobalExportPrefix opens the names under which the metered module also
// exports each mutable global of its own (GlobalExportPrefix and the
// global's index), so that a host can save and restore the whole state of
// an instance: its memory and these.
const GlobalExportPrefix = "stele_global_"

// ErrModule wraps every reason Instrument refuses a module.
var ErrModule = errors.New("stele/plugin/meter: not a module that can be metered")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrModule}, args...)...)
}

// Section ids of the binary format.
const (
	secCustom   = 0
	secImport   = 2
	secGlobal   = 6
	secExport   = 7
	secCode     = 10
	secDataCnt  = 12
	secTag      = 13
	maxSections = 14
)

// rank is a known section's place in the order the binary format
// requires; custom sections go anywhere.
var rank = [maxSections]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

type section struct {
	id   byte
	body []byte
}

// Instrument returns module with fuel metering (see the package comment),
// or an error wrapping ErrModule saying why it cannot.
func Instrument(module []byte) ([]byte, error) {
	m, err := Meter(module)
	return m.Module, err
}

// Metered is a metered module and the names it exports its mutable
// globals under, by index.
type Metered struct {
	Module  []byte
	Globals []string
}

// Meter is Instrument, saying too the names of the globals it exported.
func Meter(module []byte) (Metered, error) {
	m, globals, err := instrument(module)
	return Metered{Module: m, Globals: globals}, err
}

func instrument(module []byte) ([]byte, []string, error) {
	if len(module) < 8 || string(module[:4]) != "\x00asm" || binary.LittleEndian.Uint32(module[4:8]) != 1 {
		return nil, nil, bad("no WebAssembly 1 header")
	}
	var secs []section
	r := reader{b: module[8:]}
	last := 0
	for len(r.b) > 0 {
		id := r.byte()
		n := r.u32()
		body := r.take(int(n))
		if r.err != nil {
			return nil, nil, r.err
		}
		if id >= maxSections || (id != secCustom && rank[id] == 0) {
			return nil, nil, bad("unknown section %d", id)
		}
		if id == secTag {
			return nil, nil, bad("exception handling (a tag section) is not allowed")
		}
		if id != secCustom {
			if rank[id] <= last {
				return nil, nil, bad("section %d out of order", id)
			}
			last = rank[id]
		}
		secs = append(secs, section{id, body})
	}
	types, err := checkSections(secs)
	if err != nil {
		return nil, nil, err
	}
	importedGlobals, err := countImportedGlobals(secs, types)
	if err != nil {
		return nil, nil, err
	}
	// The fuel global: the last of the module's own globals, whose index
	// comes after every existing one, so no index changes.
	fuel := importedGlobals
	var mutable []uint32 // the module's own mutable globals
	var names []string
	gi := find(secs, secGlobal)
	if gi < 0 {
		secs, gi = insert(secs, section{id: secGlobal, body: []byte{0}})
	}
	{
		r := reader{b: secs[gi].body}
		n := r.count()
		if r.err != nil {
			return nil, nil, r.err
		}
		fuel += n
		entries := r.b
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valtype()
			if r.byte() == 0x01 {
				mutable = append(mutable, importedGlobals+i)
			}
			r.expr()
		}
		if r.err != nil {
			return nil, nil, r.err
		}
		body := appendU32(nil, n+1)
		body = append(body, entries...)
		body = append(body, 0x7E, 0x01, 0x42, 0x00, 0x0B) // mut i64 = i64.const 0
		secs[gi].body = body
	}
	ei := find(secs, secExport)
	if ei < 0 {
		secs, ei = insert(secs, section{id: secExport, body: []byte{0}})
	}
	{
		r := reader{b: secs[ei].body}
		n := r.count()
		entries := r.b
		for i := uint32(0); i < n && r.err == nil; i++ {
			if name := r.name(); name == FuelExport || strings.HasPrefix(name, GlobalExportPrefix) {
				return nil, nil, bad("the module exports %s, a name the meter gives", name)
			}
			r.byte()
			r.u32()
		}
		if r.err == nil && len(r.b) != 0 {
			r.fail("%d bytes after the exports", len(r.b))
		}
		if r.err != nil {
			return nil, nil, r.err
		}
		body := appendU32(nil, n+1+uint32(len(mutable)))
		body = append(body, entries...)
		body = appendName(body, FuelExport)
		body = append(body, 0x03) // a global
		body = appendU32(body, fuel)
		for _, g := range mutable {
			names = append(names, GlobalExportPrefix+strconv.FormatUint(uint64(g), 10))
			body = appendName(body, names[len(names)-1])
			body = append(body, 0x03)
			body = appendU32(body, g)
		}
		secs[ei].body = body
	}
	if ci := find(secs, secCode); ci >= 0 {
		code, err := meterCode(secs[ci].body, fuel)
		if err != nil {
			return nil, nil, err
		}
		secs[ci].body = code
	}
	out := append([]byte(nil), module[:8]...)
	for _, s := range secs {
		out = append(out, s.id)
		out = appendU32(out, uint32(len(s.body)))
		out = append(out, s.body...)
	}
	return out, names, nil
}

func find(secs []section, id byte) int {
	for i, s := range secs {
		if s.id == id {
			return i
		}
	}
	return -1
}

// insert puts s where the section order wants it and returns its index.
func insert(secs []section, s section) ([]section, int) {
	at := len(secs)
	for i, o := range secs {
		if o.id != secCustom && rank[o.id] > rank[s.id] {
			at = i
			break
		}
	}
	out := append(secs[:at:at], s)
	return append(out, secs[at:]...), at
}

// countImportedGlobals counts the imports of globals, which come before
// the module's own globals in the index space, and checks that imported
// functions' types are among the module's types.
func countImportedGlobals(secs []section, types uint32) (uint32, error) {
	i := find(secs, secImport)
	if i < 0 {
		return 0, nil
	}
	r := reader{b: secs[i].body}
	var globals uint32
	for n, j := r.count(), uint32(0); j < n && r.err == nil; j++ {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0x00: // a function: its type
			if t := r.u32(); r.err == nil && t >= types {
				r.fail("an imported function of type %d, of %d types", t, types)
			}
		case 0x01: // a table: its reference type and limits
			r.valtype()
			r.table()
		case 0x02: // a memory
			r.limits()
		case 0x03: // a global: its type and mutability
			r.byte()
			r.byte()
			globals++
		default:
			r.fail("import kind %d", kind)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the imports", len(r.b))
	}
	return globals, r.err
}
