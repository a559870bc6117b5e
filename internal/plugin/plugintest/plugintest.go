// Package plugintest builds plugins for tests: a package of this module
// compiled with the SDK for GOOS=wasip1 GOARCH=wasm -buildmode=c-shared,
// as docs/plugins.md says to build one. Each package is built once per
// test binary.
package plugintest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]result{}
)

type result struct {
	wasm []byte
	err  error
}

// Build builds the package pkg, an import path of this module
// (github.com/stele-io/stele/examples/plugins/redact), and returns the
// module's bytes; a failure fails t.
func Build(t testing.TB, pkg string) []byte {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	r, ok := built[pkg]
	if !ok {
		r = build(pkg)
		built[pkg] = r
	}
	if r.err != nil {
		t.Fatalf("building the plugin %s: %v", pkg, r.err)
	}
	return r.wasm
}

// Example builds examples/plugins/name.
func Example(t testing.TB, name string) []byte {
	return Build(t, "github.com/stele-io/stele/examples/plugins/"+name)
}

// Guest builds internal/plugin/testdata/guest, the runtime tests' plugin
// (its package comment says what its config makes it do).
func Guest(t testing.TB) []byte {
	return Build(t, "github.com/stele-io/stele/internal/plugin/testdata/guest")
}

// File builds examples/plugins/name into dir and returns its path.
func File(t testing.TB, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name+".wasm")
	if err := os.WriteFile(out, Example(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func build(pkg string) result {
	dir, err := os.MkdirTemp("", "stele-plugintest-")
	if err != nil {
		return result{err: err}
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "plugin.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return result{err: errors.New(err.Error() + ": " + strings.TrimSpace(string(msg)))}
	}
	wasm, err := os.ReadFile(out)
	return result{wasm: wasm, err: err}
}
