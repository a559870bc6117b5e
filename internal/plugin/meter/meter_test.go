package meter

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// fn is a function of a test module: its type's index, its locals (each
// one i32), its code (ending with end) and the name it is exported by.
type fn struct {
	typ    byte
	locals byte
	code   []byte
	export string
}

// testModule assembles a module of types and funcs.
func testModule(types [][]byte, funcs []fn) []byte {
	sec := func(id byte, body []byte) []byte {
		return append(append([]byte{id}, appendU32(nil, uint32(len(body)))...), body...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	var b []byte
	b = appendU32(b, uint32(len(types)))
	for _, t := range types {
		b = append(b, t...)
	}
	m = append(m, sec(1, b)...)
	b = appendU32(nil, uint32(len(funcs)))
	for _, f := range funcs {
		b = append(b, f.typ)
	}
	m = append(m, sec(3, b)...)
	b = appendU32(nil, uint32(len(funcs)))
	for i, f := range funcs {
		b = appendName(b, f.export)
		b = append(b, 0x00, byte(i))
	}
	m = append(m, sec(7, b)...)
	b = appendU32(nil, uint32(len(funcs)))
	for _, f := range funcs {
		body := []byte{0}
		if f.locals > 0 {
			body = []byte{1, f.locals, 0x7F}
		}
		body = append(body, f.code...)
		b = appendU32(b, uint32(len(body)))
		b = append(b, body...)
	}
	return append(m, sec(10, b)...)
}

// loops is a module of four functions: spin (a loop that never ends),
// add (a+b), count (n iterations of a loop, returning n) and recurse
// (which calls itself for ever).
var loops = testModule(
	[][]byte{
		{0x60, 0, 0},                   // () -> ()
		{0x60, 2, 0x7F, 0x7F, 1, 0x7F}, // (i32, i32) -> i32
		{0x60, 1, 0x7F, 1, 0x7F},       // (i32) -> i32
	},
	[]fn{
		{typ: 0, code: []byte{0x03, 0x40, 0x0C, 0x00, 0x0B, 0x0B}, export: "spin"},
		{typ: 1, code: []byte{0x20, 0, 0x20, 1, 0x6A, 0x0B}, export: "add"},
		{typ: 2, locals: 1, code: []byte{
			0x02, 0x40, // block
			0x03, 0x40, // loop
			0x20, 0, 0x45, 0x0D, 1, // local.get 0, i32.eqz, br_if 1
			0x20, 1, 0x41, 1, 0x6A, 0x21, 1, // acc++
			0x20, 0, 0x41, 1, 0x6B, 0x21, 0, // n--
			0x0C, 0, // br 0
			0x0B, 0x0B, // end, end
			0x20, 1, 0x0B, // local.get 1, end
		}, export: "count"},
		{typ: 0, code: []byte{0x10, 3, 0x0B}, export: "recurse"},
	})

// instance instruments m and instantiates it with engine (compiler or
// interpreter), without running a start function.
func instance(t testing.TB, m []byte, compiler bool) (api.Module, api.MutableGlobal) {
	t.Helper()
	out, err := Instrument(m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfigInterpreter()
	if compiler {
		cfg = wazero.NewRuntimeConfig()
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { rt.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	g, ok := mod.ExportedGlobal(FuelExport).(api.MutableGlobal)
	if !ok {
		t.Fatalf("no mutable global %s", FuelExport)
	}
	return mod, g
}

// run calls name with budget and returns its results, the fuel it used
// and its error.
func run(mod api.Module, fuel api.MutableGlobal, budget int64, name string, args ...uint64) ([]uint64, int64, error) {
	fuel.Set(uint64(budget))
	res, err := mod.ExportedFunction(name).Call(context.Background(), args...)
	return res, budget - int64(fuel.Get()), err
}

// TestInstrumentStopsWhatRunsForEver: a loop without end and a recursion
// without end trap once their fuel is gone, well before any time limit;
// a function that ends gives its result.
func TestInstrumentStopsWhatRunsForEver(t *testing.T) {
	for _, compiler := range []bool{false, true} {
		mod, fuel := instance(t, loops, compiler)
		if _, used, err := run(mod, fuel, 100_000, "spin"); err == nil || !strings.Contains(err.Error(), "unreachable") || used <= 100_000 {
			t.Fatalf("spin: used %d, %v", used, err)
		}
		if _, used, err := run(mod, fuel, 1000, "recurse"); err == nil || used <= 1000 {
			t.Fatalf("recurse: used %d, %v", used, err)
		}
		if res, used, err := run(mod, fuel, 1000, "add", 2, 3); err != nil || res[0] != 5 || used <= 0 {
			t.Fatalf("add: %v, used %d, %v", res, used, err)
		}
	}
}

// TestFuelIsDeterministic: a call uses the same fuel every time, on the
// compiler and on the interpreter alike, more for more iterations, and a
// budget one short of it traps.
func TestFuelIsDeterministic(t *testing.T) {
	var used [2][2]int64
	for i, compiler := range []bool{false, true} {
		mod, fuel := instance(t, loops, compiler)
		for j, n := range []uint64{100, 200} {
			res, u, err := run(mod, fuel, 1<<40, "count", n)
			if err != nil || res[0] != n {
				t.Fatalf("count(%d): %v %v", n, res, err)
			}
			if _, again, _ := run(mod, fuel, 1<<40, "count", n); again != u {
				t.Fatalf("count(%d) used %d, then %d", n, u, again)
			}
			used[i][j] = u
		}
		if _, _, err := run(mod, fuel, used[i][0], "count", 100); err != nil {
			t.Fatalf("count(100) on its exact budget: %v", err)
		}
		if _, _, err := run(mod, fuel, used[i][0]-1, "count", 100); err == nil {
			t.Fatal("count(100) one short of its budget did not trap")
		}
	}
	if used[0] != used[1] || used[0][1] <= used[0][0] {
		t.Fatalf("fuel used by count(100), count(200): interpreter %v, compiler %v", used[0], used[1])
	}
}

// TestInstrumentRefuses: what is not a module, or one that cannot be
// metered, is refused with ErrModule.
func TestInstrumentRefuses(t *testing.T) {
	simd := testModule([][]byte{{0x60, 0, 0}}, []fn{{typ: 0, code: []byte{0xFD, 0x0C, 0x0B}, export: "v"}})
	taken := testModule([][]byte{{0x60, 0, 0}}, []fn{{typ: 0, code: []byte{0x0B}, export: FuelExport}})
	unended := testModule([][]byte{{0x60, 0, 0}}, []fn{{typ: 0, code: []byte{0x02, 0x40, 0x0B}, export: "f"}})
	for name, m := range map[string][]byte{
		"empty":         nil,
		"not wasm":      []byte("#!/bin/sh\nexit 0\n"),
		"version 2":     []byte("\x00asm\x02\x00\x00\x00"),
		"truncated":     loops[:len(loops)-3],
		"SIMD":          simd,
		"fuel exported": taken,
		"unended body":  unended,
	} {
		if _, err := Instrument(m); !errors.Is(err, ErrModule) {
			t.Errorf("%s: %v, want ErrModule", name, err)
		}
	}
}

// TestInstrumentGoProgram: a Go program built for wasip1 (what the
// plugin SDK builds) runs metered to its end with enough fuel, printing
// what it prints unmetered, and traps with too little.
func TestInstrumentGoProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program for wasip1")
	}
	dir := t.TempDir()
	src := `package main

import "fmt"

func main() {
	sum := 0
	for i := range 100000 {
		sum += i % 7
	}
	fmt.Println("sum", sum)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module p\n\ngo 1.24\n"), 0o644)
	cmd := exec.Command("go", "build", "-o", "p.wasm", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m, err := os.ReadFile(filepath.Join(dir, "p.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	start := func(budget int64) (string, int64, error) {
		out, err := Instrument(m)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		rt := wazero.NewRuntime(ctx)
		defer rt.Close(ctx)
		wasi_snapshot_preview1.MustInstantiate(ctx, rt)
		var stdout bytes.Buffer
		mod, err := rt.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithStartFunctions().WithStdout(&stdout))
		if err != nil {
			t.Fatal(err)
		}
		fuel := mod.ExportedGlobal(FuelExport).(api.MutableGlobal)
		fuel.Set(uint64(budget))
		_, err = mod.ExportedFunction("_start").Call(ctx)
		var exit *sys.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 0 {
			err = nil
		}
		return stdout.String(), budget - int64(fuel.Get()), err
	}
	out, used, err := start(1 << 40)
	if err != nil || out != "sum 299995\n" {
		t.Fatalf("metered: %q, %v", out, err)
	}
	t.Logf("the program used %d fuel", used)
	if _, again, _ := start(1 << 40); again != used {
		t.Fatalf("the program used %d fuel, then %d", used, again)
	}
	if _, _, err := start(used / 2); err == nil {
		t.Fatal("the program ran to its end on half its fuel")
	}
}

// TestGlobalsExported: each mutable global of the module's own is
// exported under GlobalExportPrefix and its index, so a host can read and
// restore it; immutable ones are not.
func TestGlobalsExported(t *testing.T) {
	sec := func(id byte, body ...byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, 1, 0x60, 0, 0)...)
	m = append(m, sec(3, 1, 0)...)
	m = append(m, sec(6, 2, 0x7F, 0x01, 0x41, 5, 0x0B, 0x7E, 0x00, 0x42, 7, 0x0B)...)
	m = append(m, sec(7, 1, 1, 'f', 0x00, 0)...)
	m = append(m, sec(10, 1, 9, 0, 0x23, 0, 0x41, 1, 0x6A, 0x24, 0, 0x0B)...)
	mod, fuel := instance(t, m, true)
	g, ok := mod.ExportedGlobal(GlobalExportPrefix + "0").(api.MutableGlobal)
	if !ok || g.Get() != 5 {
		t.Fatalf("global 0: %v", mod.ExportedGlobal(GlobalExportPrefix+"0"))
	}
	if mod.ExportedGlobal(GlobalExportPrefix+"1") != nil {
		t.Fatal("the immutable global 1 is exported")
	}
	if _, _, err := run(mod, fuel, 100, "f"); err != nil || g.Get() != 6 {
		t.Fatalf("f: %v, global 0 = %d", err, g.Get())
	}
	g.Set(41)
	if _, _, err := run(mod, fuel, 100, "f"); err != nil || g.Get() != 42 {
		t.Fatalf("f after a restore: %v, global 0 = %d", err, g.Get())
	}
}
