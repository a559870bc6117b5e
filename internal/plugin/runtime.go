// Package plugin is the broker's runtime of plugins (issue 24): it runs a
// plugin's WebAssembly module (built with the Go SDK, pkg/plugin) on
// wazero, so that every broker computes the same answer from the same
// module and records:
//
//   - the module is metered (internal/plugin/meter): a call has a budget of
//     fuel counted in instructions, and one that runs out traps (ErrFuel);
//   - its memory is bounded (Limits.MemoryPages);
//   - it may import WASI preview 1 only, and gets no files, no
//     environment, no arguments, a clock that starts at the same time and
//     advances by a millisecond at each reading, and randomness from a
//     fixed seed: what it reads of time and chance is the same everywhere;
//   - every call runs on a fresh instance, so nothing a call leaves in the
//     module's memory reaches the next: a broker that restarted computes
//     what the others compute.
//
// Deploying plugins (stele plugin deploy) and the hooks in the produce
// path are not built yet; this is the runtime they will use.
package plugin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/stele-io/stele/internal/plugin/meter"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// Limits bound what one call of a module may use.
type Limits struct {
	// Fuel is a call's budget, in the instructions the meter counts.
	Fuel int64
	// MemoryPages bounds the module's memory, in 64 KiB pages.
	MemoryPages uint32
}

// DefaultLimits: two billion instructions and 64 MiB. A Go plugin's
// call takes some 16 million instructions, most of them its runtime's
// start (TestProduceHook).
var DefaultLimits = Limits{Fuel: 2_000_000_000, MemoryPages: 1024}

// Errors a call gives, wrapped with what happened.
var (
	// ErrModule: the module cannot be a plugin (refused when compiled).
	ErrModule = errors.New("stele/plugin: not a plugin module")
	// ErrFuel: the call ran out of fuel.
	ErrFuel = errors.New("stele/plugin: out of fuel")
	// ErrTrap: the module trapped, ran out of memory, or answered what
	// cannot be decoded.
	ErrTrap = errors.New("stele/plugin: the module failed")
)

// The functions a plugin module exports (pkg/plugin).
const (
	exportInit    = "_initialize"
	exportAlloc   = "stele_alloc"
	exportProduce = "stele_produce"
)

// Module is a compiled plugin.
type Module struct {
	// Digest is the SHA-256 of the module as given.
	Digest [32]byte
	rt     wazero.Runtime
	cm     wazero.CompiledModule
	lim    Limits
}

// Compile meters and compiles wasm, refusing (ErrModule) what is not a
// plugin: not a module the meter takes, imports from anywhere but WASI
// preview 1, or the SDK's exports missing.
func Compile(ctx context.Context, wasm []byte, lim Limits) (m *Module, err error) {
	metered, err := meter.Instrument(wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrModule, err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithMemoryLimitPages(lim.MemoryPages))
	defer func() {
		if err != nil {
			rt.Close(ctx)
		}
	}()
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, err
	}
	cm, err := compile(ctx, rt, metered)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrModule, err)
	}
	for _, f := range cm.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != wasi_snapshot_preview1.ModuleName {
			return nil, fmt.Errorf("%w: it imports %s.%s; a plugin may import WASI preview 1 only", ErrModule, mod, name)
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return nil, fmt.Errorf("%w: it imports a memory", ErrModule)
	}
	exports := cm.ExportedFunctions()
	for _, name := range []string{exportInit, exportAlloc, exportProduce} {
		if _, ok := exports[name]; !ok {
			return nil, fmt.Errorf("%w: it does not export %s (build it with the Go SDK, pkg/plugin, and -buildmode=c-shared)", ErrModule, name)
		}
	}
	return &Module{Digest: sha256.Sum256(wasm), rt: rt, cm: cm, lim: lim}, nil
}

// compile compiles metered, turning a panic of the runtime into an error.
func compile(ctx context.Context, rt wazero.Runtime, metered []byte) (cm wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the runtime could not compile it: %v", p)
		}
	}()
	return rt.CompileModule(ctx, metered)
}

// Close releases the module.
func (m *Module) Close(ctx context.Context) error { return m.rt.Close(ctx) }

// Stats is what a call used.
type Stats struct {
	Fuel int64 // instructions, as the meter counts them
}

// Produce runs the module's produce hook on in, on a fresh instance.
func (m *Module) Produce(ctx context.Context, in wire.Input) (out wire.Output, st Stats, err error) {
	input := wire.AppendInput(nil, in)
	clock := int64(0)
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithRandSource(rand.New(rand.NewSource(1))).
		WithWalltime(func() (int64, int32) { clock += 1e6; return clock / 1e9, int32(clock % 1e9) }, sys.ClockResolution(1e6)).
		WithNanotime(func() int64 { clock += 1e6; return clock }, sys.ClockResolution(1e6)).
		WithNanosleep(func(ns int64) { clock += ns })
	mod, err := m.rt.InstantiateModule(ctx, m.cm, cfg)
	if err != nil {
		return out, st, fmt.Errorf("%w: instantiating: %w", ErrTrap, err)
	}
	defer mod.Close(ctx)
	fuel := mod.ExportedGlobal(meter.FuelExport).(api.MutableGlobal)
	fuel.Set(uint64(m.lim.Fuel))
	defer func() {
		st.Fuel = m.lim.Fuel - int64(fuel.Get())
		if err != nil && int64(fuel.Get()) < 0 {
			err = fmt.Errorf("%w: more than %d instructions", ErrFuel, m.lim.Fuel)
		}
	}()
	call := func(name string, args ...uint64) (uint64, error) {
		res, err := mod.ExportedFunction(name).Call(ctx, args...)
		if err != nil {
			var exit *sys.ExitError
			if errors.As(err, &exit) {
				return 0, fmt.Errorf("%w: %s exited with status %d", ErrTrap, name, exit.ExitCode())
			}
			return 0, fmt.Errorf("%w: %s: %s", ErrTrap, name, firstLine(err))
		}
		if len(res) == 0 {
			return 0, nil
		}
		return res[0], nil
	}
	if _, err := call(exportInit); err != nil {
		return out, st, err
	}
	ptr, err := call(exportAlloc, uint64(len(input)))
	if err != nil {
		return out, st, err
	}
	if !mod.Memory().Write(uint32(ptr), input) {
		return out, st, fmt.Errorf("%w: stele_alloc gave %d bytes at %d, outside its memory", ErrTrap, len(input), ptr)
	}
	packed, err := call(exportProduce, ptr, uint64(len(input)))
	if err != nil {
		return out, st, err
	}
	b, ok := mod.Memory().Read(uint32(packed>>32), uint32(packed))
	if !ok {
		return out, st, fmt.Errorf("%w: its answer of %d bytes at %d is outside its memory", ErrTrap, uint32(packed), packed>>32)
	}
	out, err = wire.DecodeOutput(b) // copies out of the memory
	if err != nil {
		return out, st, fmt.Errorf("%w: its answer: %w", ErrTrap, err)
	}
	return out, st, nil
}

// firstLine is the first line of a runtime error (its stack follows).
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
