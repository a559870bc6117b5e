package server

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayers keeps DESIGN.md §2 true: dependencies point down the package
// list, never up. Each package may import only the Stele packages below it.
func TestLayers(t *testing.T) {
	const mod = "github.com/stele-io/stele/internal/"
	// Each package and the Stele packages it must never import.
	forbidden := map[string][]string{
		"record":    {"storage", "fsm", "dataplane", "consensus", "broker", "kafka", "httpapi", "server", "cli"},
		"storage":   {"fsm", "dataplane", "consensus", "broker", "kafka", "httpapi", "server", "cli"},
		"fsm":       {"dataplane", "consensus", "broker", "kafka", "httpapi", "server", "cli"},
		"dataplane": {"consensus", "broker", "kafka", "httpapi", "server", "cli"},
		"consensus": {"dataplane", "broker", "kafka", "httpapi", "server", "cli"},
		"broker":    {"dataplane", "kafka", "httpapi", "server", "cli"},
		"kafka":     {"dataplane", "httpapi", "server", "cli"},
		"httpapi":   {"dataplane", "kafka", "server", "cli"},
		"server":    {"cli"},
		"listener":  {"record", "storage", "fsm", "dataplane", "consensus", "broker", "kafka", "httpapi", "server", "cli"},
	}
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", mod+pkg+"/...").CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if dep == mod+b || strings.HasPrefix(dep, mod+b+"/") {
					t.Errorf("internal/%s depends on internal/%s (DESIGN.md §2: dependencies point down)", pkg, b)
				}
			}
		}
	}
	// The front-ends reach consensus only through the broker, which
	// translates the orderer's errors into its own (broker.ErrMempoolFull,
	// broker.ErrClosed): their code imports no consensus package, and
	// their tests import only consensus/local, the in-memory orderer a
	// test wires a broker to (as this package wires CometBFT).
	for _, fe := range []string{"kafka", "httpapi"} {
		out, err := exec.Command("go", "list", "-f",
			`{{range .Imports}}{{.}} {{end}}|{{range .TestImports}}{{.}} {{end}}{{range .XTestImports}}{{.}} {{end}}`,
			mod+fe+"/...").CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", fe, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			code, tests, _ := strings.Cut(line, "|")
			for _, imp := range strings.Fields(code) {
				if imp == mod+"consensus" || strings.HasPrefix(imp, mod+"consensus/") {
					t.Errorf("internal/%s imports %s: a front-end reaches consensus only through the broker", fe, imp)
				}
			}
			for _, imp := range strings.Fields(tests) {
				if (imp == mod+"consensus" || strings.HasPrefix(imp, mod+"consensus/")) && imp != mod+"consensus/local" {
					t.Errorf("internal/%s's tests import %s: a front-end tests broker errors, and wires only consensus/local", fe, imp)
				}
			}
		}
	}
	// The state machine must not reach the clock or randomness through a
	// package of its own choosing either: it imports nothing that runs
	// goroutines or talks to the network.
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+"fsm").CombinedOutput()
	if err != nil {
		t.Fatalf("go list fsm: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		switch imp {
		case "math/rand", "math/rand/v2", "crypto/rand", "time", "net", "net/http", "os/exec":
			t.Errorf("internal/fsm imports %s: the state machine must be deterministic", imp)
		}
	}
}
