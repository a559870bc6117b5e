// Package plugin is the broker's runtime of plugins (issue 24): it runs a
// plugin's WebAssembly module (built with the Go SDK, pkg/plugin) on
// wazero, so that every broker computes the same answer from the same
// module and records:
//
//   - the module is metered (internal/plugin/meter): a call has a budget of
//     fuel counted in instructions, and one that runs out traps (ErrFuel);
//   - its memory is bounded (Limits.MemoryPages);
//   - it may import WASI preview 1 and, where Limits.HostImports allows,
//     the host functions (host.go: the block's time and its plugin's own
//     state, both the same on every broker); it gets no files, no
//     environment, no arguments, a clock that starts at the same time and
//     advances by a millisecond at each reading, and randomness from a
//     fixed seed: what it reads of time and chance is the same everywhere;
//   - every call starts from the same state: an instance is started once
//     (its _initialize run) and its whole state saved (its memory, its
//     mutable globals, which the meter exports, its clock and its source
//     of chance); each call restores that state first, and an instance
//     whose memory a call grew is replaced by a new one. So nothing a call
//     leaves in the instance reaches the next (only what it writes to its
//     state through the host does), and a broker that restarted computes
//     what the others compute, at the same fuel.
//
// The state machine's plugins module (internal/fsm/plugins) runs the
// produce hooks of deployed plugins with it, inside the deterministic
// apply; the Kafka layer runs fetch hooks with it on the records a
// consumer is sent (internal/kafka/fetch_plugins.go).
package plugin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/stele-io/stele/internal/plugin/meter"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// Limits bound what one call of a module may use.
type Limits struct {
	// Fuel is a call's budget, in the instructions the meter counts,
	// and FuelPerRecord what it gains for each record of its input.
	// StartFuel is the start's (0: Fuel).
	Fuel          int64
	FuelPerRecord int64
	StartFuel     int64
	// MemoryPages bounds the module's memory, in 64 KiB pages.
	MemoryPages uint32
	// HostImports lets the module import the host functions (host.go):
	// the block's time and its own state. Without it a module may import
	// WASI preview 1 only.
	HostImports bool
}

// DefaultLimits: two billion instructions and 64 MiB. A Go plugin's
// start (its runtime's) takes some 14 million instructions and leaves 3
// MiB of memory; a call of a hook on two records some 2 million
// (TestProduceHook). The start has a budget of its own, of the same
// size.
var DefaultLimits = Limits{Fuel: 2_000_000_000, MemoryPages: 1024, HostImports: true}

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
	exportFetch   = "stele_fetch"
)

// Module is a compiled plugin.
type Module struct {
	// Digest is the SHA-256 of the module as given.
	Digest [32]byte
	rt     wazero.Runtime
	cm     wazero.CompiledModule
	lim    Limits
	// globals are the names of the module's mutable globals (meter.Meter).
	globals []string
	// fresh: start an instance for every call (the tests' reference).
	fresh bool
	// produce, fetch: whether the module has the hook.
	produce, fetch bool

	mu   sync.Mutex
	warm *instance // started and saved, or nil
	// saved is the last instance used, whose saved state (the start's)
	// revives a new one (its own may be closed).
	saved *instance
}

// instance is a started instance of the module and its state as it was
// after the start.
type instance struct {
	mod     api.Module
	fuel    api.MutableGlobal
	globals []api.MutableGlobal
	clock   int64
	chance  chance

	savedMem     []byte
	savedGlobals []uint64
	savedClock   int64
	savedChance  chance
	// startFuel is what the start used.
	startFuel int64
}

// chance is an instance's source of random bytes: splitmix64 of a
// counter, so its state is one number, saved and restored with the rest.
type chance struct{ n uint64 }

func (c *chance) Read(p []byte) (int, error) {
	for i := 0; i < len(p); i += 8 {
		c.n += 0x9E3779B97F4A7C15
		z := c.n
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		for j := 0; j < 8 && i+j < len(p); j++ {
			p[i+j] = byte(z >> (8 * j))
		}
	}
	return len(p), nil
}

// Compile meters and compiles wasm, refusing (ErrModule) what is not a
// plugin: not a module the meter takes, imports from anywhere but WASI
// preview 1, or the SDK's exports missing (its start, its allocator, and
// a hook: stele_produce, stele_fetch or both; HasProduce and HasFetch say
// which).
func Compile(ctx context.Context, wasm []byte, lim Limits) (m *Module, err error) {
	metered, err := meter.Meter(wasm)
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
	if lim.HostImports {
		if err := instantiateHost(ctx, rt); err != nil {
			return nil, err
		}
	}
	cm, err := compile(ctx, rt, metered.Module)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrModule, err)
	}
	for _, f := range cm.ImportedFunctions() {
		switch mod, name, _ := f.Import(); {
		case mod == wasi_snapshot_preview1.ModuleName:
		case mod == HostModule && lim.HostImports && hostNames[name]:
		case mod == HostModule && !lim.HostImports:
			return nil, fmt.Errorf("%w: it imports %s.%s; a plugin may import WASI preview 1 only (the host functions need app version 18)", ErrModule, mod, name)
		default:
			return nil, fmt.Errorf("%w: it imports %s.%s; a plugin may import WASI preview 1 and the host functions only", ErrModule, mod, name)
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return nil, fmt.Errorf("%w: it imports a memory", ErrModule)
	}
	exports := cm.ExportedFunctions()
	for _, name := range []string{exportInit, exportAlloc} {
		if _, ok := exports[name]; !ok {
			return nil, fmt.Errorf("%w: it does not export %s (build it with the Go SDK, pkg/plugin, and -buildmode=c-shared)", ErrModule, name)
		}
	}
	_, produce := exports[exportProduce]
	_, fetch := exports[exportFetch]
	if !produce && !fetch {
		return nil, fmt.Errorf("%w: it exports no hook, neither %s nor %s (build it with the Go SDK, pkg/plugin, and -buildmode=c-shared)", ErrModule, exportProduce, exportFetch)
	}
	return &Module{Digest: sha256.Sum256(wasm), rt: rt, cm: cm, lim: lim, globals: metered.Globals, produce: produce, fetch: fetch}, nil
}

// HasProduce reports whether the module has a produce hook (exports
// stele_produce; a module built with the SDK has both).
func (m *Module) HasProduce() bool { return m.produce }

// HasFetch reports whether the module has a fetch hook (stele_fetch).
func (m *Module) HasFetch() bool { return m.fetch }

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
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.warm, m.saved = nil, nil
	return m.rt.Close(ctx)
}

// Start starts the module's instance now, as its first call would, and
// keeps it for the calls: a module whose start fails (traps, runs out of
// fuel or memory) fails here, before any record reaches it.
func (m *Module) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.warm != nil {
		return nil
	}
	inst, err := m.start(ctx)
	if err != nil {
		return err
	}
	if m.fresh {
		inst.mod.Close(ctx)
	} else {
		m.warm, m.saved = inst, inst
	}
	return nil
}

// Stats is what a call used.
type Stats struct {
	Fuel int64 // instructions, as the meter counts them
}

// start instantiates the module, runs its _initialize on a budget of its
// own and saves the state it leaves.
func (m *Module) start(ctx context.Context) (*instance, error) {
	in, err := m.instantiate(ctx)
	if err != nil {
		return nil, err
	}
	budget := m.lim.StartFuel
	if budget == 0 {
		budget = m.lim.Fuel
	}
	in.fuel.Set(uint64(budget))
	if _, err := in.call(ctx, exportInit); err != nil {
		err = in.fuelError(err, budget)
		in.mod.Close(ctx)
		return nil, fmt.Errorf("starting: %w", err)
	}
	in.startFuel = budget - int64(in.fuel.Get())
	mem, _ := in.mod.Memory().Read(0, in.mod.Memory().Size())
	in.savedMem = slices.Clone(mem)
	for _, g := range in.globals {
		in.savedGlobals = append(in.savedGlobals, g.Get())
	}
	in.savedClock, in.savedChance = in.clock, in.chance
	return in, nil
}

// instantiate makes an instance of the module, not started.
func (m *Module) instantiate(ctx context.Context) (*instance, error) {
	in := &instance{}
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithRandSource(&in.chance).
		WithWalltime(func() (int64, int32) { in.clock += 1e6; return in.clock / 1e9, int32(in.clock % 1e9) }, sys.ClockResolution(1e6)).
		WithNanotime(func() int64 { in.clock += 1e6; return in.clock }, sys.ClockResolution(1e6)).
		WithNanosleep(func(ns int64) { in.clock += ns })
	mod, err := m.rt.InstantiateModule(ctx, m.cm, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: instantiating: %w", ErrTrap, err)
	}
	in.mod = mod
	in.fuel = mod.ExportedGlobal(meter.FuelExport).(api.MutableGlobal)
	for _, name := range m.globals {
		g, ok := mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			mod.Close(ctx)
			return nil, fmt.Errorf("%w: global %s is not exported mutable", ErrTrap, name)
		}
		in.globals = append(in.globals, g)
	}
	return in, nil
}

// revive makes a new instance in the state old's start left, without
// running the start again: its memory grown to the saved size and
// overwritten with the saved bytes, its globals, clock and chance set to
// the saved values. An instance's state is its memory and globals (the
// meter refuses what would change its tables or segments), so the new one
// is the one a start would give, for a fraction of the cost. Used when a
// call grew old's memory, which cannot shrink.
func (m *Module) revive(ctx context.Context, old *instance) (*instance, error) {
	in, err := m.instantiate(ctx)
	if err != nil {
		return nil, err
	}
	mem := in.mod.Memory()
	want := uint32(len(old.savedMem))
	if mem.Size() > want {
		in.mod.Close(ctx)
		return nil, fmt.Errorf("%w: a new instance's memory of %d bytes exceeds the %d its start left", ErrTrap, mem.Size(), want)
	}
	if _, ok := mem.Grow((want - mem.Size()) / 65536); !ok || mem.Size() != want {
		in.mod.Close(ctx)
		return nil, fmt.Errorf("%w: growing a new instance's memory to %d bytes", ErrTrap, want)
	}
	in.savedMem, in.savedGlobals, in.savedClock, in.savedChance, in.startFuel = old.savedMem, old.savedGlobals, old.savedClock, old.savedChance, old.startFuel
	if !in.restore() {
		in.mod.Close(ctx)
		return nil, fmt.Errorf("%w: restoring a new instance", ErrTrap)
	}
	return in, nil
}

// restore puts in back as it was after its start; false when it cannot
// (a call grew its memory, which cannot shrink).
func (in *instance) restore() bool {
	mem := in.mod.Memory()
	if mem.Size() != uint32(len(in.savedMem)) {
		return false
	}
	view, _ := mem.Read(0, mem.Size())
	copy(view, in.savedMem)
	for i, g := range in.globals {
		g.Set(in.savedGlobals[i])
	}
	in.clock, in.chance = in.savedClock, in.savedChance
	return true
}

// call calls an export of the instance.
func (in *instance) call(ctx context.Context, name string, args ...uint64) (uint64, error) {
	res, err := in.mod.ExportedFunction(name).Call(ctx, args...)
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

// fuelError is err, or ErrFuel when the fuel is gone.
func (in *instance) fuelError(err error, budget int64) error {
	if err != nil && int64(in.fuel.Get()) < 0 {
		return fmt.Errorf("%w: more than %d instructions", ErrFuel, budget)
	}
	return err
}

// Produce runs the module's produce hook on in, from the state the
// module's start left (see the package comment). Stats.Fuel counts the
// call, not the start.
func (m *Module) Produce(ctx context.Context, in wire.Input) (out wire.Output, st Stats, err error) {
	return m.ProduceWith(ctx, in, &Env{})
}

// ProduceWith is Produce with env for the host functions (nil: none, a
// call of one traps; Produce gives block time 0 and no state, whose
// calls trap).
func (m *Module) ProduceWith(ctx context.Context, in wire.Input, env *Env) (out wire.Output, st Stats, err error) {
	if env != nil {
		ctx = context.WithValue(ctx, envKey{}, env)
	}
	if !m.produce {
		return out, st, fmt.Errorf("%w: it has no produce hook (%s)", ErrModule, exportProduce)
	}
	err = m.run(ctx, exportProduce, wire.AppendInput(nil, in), len(in.Records), &st, func(b []byte) (err error) {
		out, err = wire.DecodeOutput(b) // copies out of the memory
		return err
	})
	return out, st, err
}

// Fetch runs the module's fetch hook on in, as Produce runs its produce
// hook, on the same budget.
func (m *Module) Fetch(ctx context.Context, in wire.FetchInput) (out wire.FetchOutput, st Stats, err error) {
	if !m.fetch {
		return out, st, fmt.Errorf("%w: it has no fetch hook (%s)", ErrModule, exportFetch)
	}
	err = m.run(ctx, exportFetch, wire.AppendFetchInput(nil, in), len(in.Records), &st, func(b []byte) (err error) {
		out, err = wire.DecodeFetchOutput(b)
		return err
	})
	return out, st, err
}

// run calls the hook export on input, of records records, and decodes its
// answer with decode, which must copy what it keeps.
func (m *Module) run(ctx context.Context, export string, input []byte, records int, st *Stats, decode func([]byte) error) (err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inst := m.warm
	m.warm = nil
	if inst != nil && !inst.restore() {
		// The call before grew the memory: a new instance, revived in the
		// state the start left.
		inst.mod.Close(ctx)
		if inst, err = m.revive(ctx, inst); err != nil {
			return err
		}
	}
	if inst == nil && m.saved != nil && !m.fresh {
		// The call before failed, and its instance was let go.
		if inst, err = m.revive(ctx, m.saved); err != nil {
			return err
		}
	}
	if inst == nil {
		if inst, err = m.start(ctx); err != nil {
			return err
		}
	}
	m.saved = inst
	defer func() {
		if err == nil && !m.fresh {
			m.warm = inst // kept for the next call
		} else {
			inst.mod.Close(ctx) // after a failure nothing of it is trusted
		}
	}()
	budget := m.lim.Fuel + m.lim.FuelPerRecord*int64(records)
	inst.fuel.Set(uint64(budget))
	defer func() {
		st.Fuel = budget - int64(inst.fuel.Get())
		err = inst.fuelError(err, budget)
	}()
	ptr, err := inst.call(ctx, exportAlloc, uint64(len(input)))
	if err != nil {
		return err
	}
	if !inst.mod.Memory().Write(uint32(ptr), input) {
		return fmt.Errorf("%w: stele_alloc gave %d bytes at %d, outside its memory", ErrTrap, len(input), ptr)
	}
	packed, err := inst.call(ctx, export, ptr, uint64(len(input)))
	if err != nil {
		return err
	}
	b, ok := inst.mod.Memory().Read(uint32(packed>>32), uint32(packed))
	if !ok {
		return fmt.Errorf("%w: its answer of %d bytes at %d is outside its memory", ErrTrap, uint32(packed), packed>>32)
	}
	if err := decode(b); err != nil {
		return fmt.Errorf("%w: its answer: %w", ErrTrap, err)
	}
	return nil
}

// firstLine is the first line of a runtime error (its stack follows).
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
