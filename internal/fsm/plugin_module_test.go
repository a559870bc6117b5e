package fsm

import (
	"encoding/binary"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/plugins"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// constPlugin is a plugin module, written here byte by byte, whose produce
// hook answers out whatever it is given: a module of a few hundred bytes,
// the same whatever Go toolchain builds the tests, for the golden
// scenario and the tests that need a plugin but not the SDK's.
func constPlugin(out wire.Output) []byte {
	answer := wire.AppendOutput(nil, out)
	const at = 256 // where the answer is, in the module's memory
	return wasmPlugin(nil, append(sleb([]byte{0x42}, at<<32|int64(len(answer))), 0x0b), at, answer)
}

// Function bodies of hostile plugins (wasmPlugin's produce).
var (
	// loopForever: loop br 0 end unreachable.
	loopForever = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x00, 0x0b}
	// growForever: grows the memory a page at a time until it cannot,
	// then traps.
	growForever = []byte{0x03, 0x40, 0x41, 0x01, 0x40, 0x00, 0x41, 0x7f, 0x47, 0x0d, 0x00, 0x0b, 0x00, 0x0b}
)

func sleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// constFetchPlugin is a module whose fetch hook (and no produce hook)
// answers out, whatever its input.
func constFetchPlugin(out wire.FetchOutput) []byte {
	answer := wire.AppendFetchOutput(nil, out)
	const at = 256
	return wasmHook("stele_fetch", nil, append(sleb([]byte{0x42}, at<<32|int64(len(answer))), 0x0b), at, answer)
}

// wasmPlugin is a module with the SDK's exports: _initialize runs init
// (nil: nothing; an expression without locals, ending in 0x0b),
// stele_alloc answers 1024, stele_produce runs produce (an expression
// leaving an i64), and data is in memory at at.
func wasmPlugin(init, produce []byte, at int64, data []byte) []byte {
	return wasmHook("stele_produce", init, produce, at, data)
}

// wasmHook is wasmPlugin with its hook exported as hook.
func wasmHook(hook string, init, produce []byte, at int64, data []byte) []byte {
	if init == nil {
		init = []byte{0x0b}
	}
	uleb := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	section := func(m []byte, id byte, body []byte) []byte {
		return append(uleb(append(m, id), uint64(len(body))), body...)
	}
	name := func(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	// Types: () -> (), (i32) -> i32, (i32, i32) -> i64.
	m = section(m, 1, []byte{3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7e})
	m = section(m, 3, []byte{3, 0, 1, 2}) // functions of those types
	m = section(m, 5, []byte{1, 0, 1})    // one memory of one page
	exports := []byte{4}
	exports = append(name(exports, "memory"), 2, 0)
	exports = append(name(exports, "_initialize"), 0, 0)
	exports = append(name(exports, "stele_alloc"), 0, 1)
	exports = append(name(exports, hook), 0, 2)
	m = section(m, 7, exports)
	bodies := [][]byte{
		append([]byte{0}, init...),
		append(sleb([]byte{0, 0x41}, 1024), 0x0b), // the input goes at 1024
		append([]byte{0}, produce...),
	}
	code := uleb(nil, uint64(len(bodies)))
	for _, b := range bodies {
		code = append(uleb(code, uint64(len(b))), b...)
	}
	m = section(m, 10, code)
	dataSec := append(sleb([]byte{1, 0, 0x41}, at), 0x0b)
	dataSec = append(uleb(dataSec, uint64(len(data))), data...)
	return section(m, 11, dataSec)
}

// deployPlugin is the commands that deploy wasm as name on topic's
// produce hook.
func deployPlugin(name, topic string, wasm []byte, config ...PluginConfig) []core.Command {
	d, chunks := plugins.DeployCommands(name, topic, plugins.HookProduce, config, wasm)
	cmds := []core.Command{d}
	for _, c := range chunks {
		cmds = append(cmds, c)
	}
	return cmds
}

// statePlugin is a module whose produce hook sets key to value in its
// state (importing stele.state_set) and answers out.
func statePlugin(out wire.Output, key, value string) []byte {
	answer := wire.AppendOutput(nil, out)
	const at, keyAt, valueAt = 256, 512, 600
	uleb := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	section := func(m []byte, id byte, body []byte) []byte {
		return append(uleb(append(m, id), uint64(len(body))), body...)
	}
	name := func(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	// Types: () -> (), (i32) -> i32, (i32, i32) -> i64, (i32, i32, i32, i32) -> ().
	m = section(m, 1, []byte{4, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7e, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 0})
	m = section(m, 2, append(name(name([]byte{1}, "stele"), "state_set"), 0, 3)) // function 0
	m = section(m, 3, []byte{3, 0, 1, 2})                                        // functions 1, 2, 3
	m = section(m, 5, []byte{1, 0, 1})
	exports := append(name([]byte{4}, "memory"), 2, 0)
	exports = append(name(exports, "_initialize"), 0, 1)
	exports = append(name(exports, "stele_alloc"), 0, 2)
	exports = append(name(exports, "stele_produce"), 0, 3)
	m = section(m, 7, exports)
	produce := sleb([]byte{0, 0x41}, keyAt)
	produce = sleb(append(produce, 0x41), int64(len(key)))
	produce = sleb(append(produce, 0x41), valueAt)
	produce = sleb(append(produce, 0x41), int64(len(value)))
	produce = append(produce, 0x10, 0) // call state_set
	produce = append(sleb(append(produce, 0x42), at<<32|int64(len(answer))), 0x0b)
	bodies := [][]byte{{0, 0x0b}, append(sleb([]byte{0, 0x41}, 1024), 0x0b), produce}
	code := uleb(nil, uint64(len(bodies)))
	for _, b := range bodies {
		code = append(uleb(code, uint64(len(b))), b...)
	}
	m = section(m, 10, code)
	data := []byte{3}
	for _, seg := range []struct {
		at int64
		b  []byte
	}{{at, answer}, {keyAt, []byte(key)}, {valueAt, []byte(value)}} {
		data = append(sleb(append(data, 0, 0x41), seg.at), 0x0b)
		data = append(uleb(data, uint64(len(seg.b))), seg.b...)
	}
	return section(m, 11, data)
}
