package fsm

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// stateMachineImports are the packages of Stele's that the state machine
// (this package, its core and its modules) may import: its own packages,
// the logs and records it applies to, records' subjects, the SCRAM credentials users keep,
// and the proofs' formats it commits to. Never consensus, the broker or a
// front-end (DESIGN.md §2: dependencies point down).
var stateMachineImports = []string{
	"github.com/stele-io/stele/internal/fsm/",
	"github.com/stele-io/stele/internal/storage",
	"github.com/stele-io/stele/internal/record",
	"github.com/stele-io/stele/internal/sasl",
	"github.com/stele-io/stele/internal/subject",
	"github.com/stele-io/stele/internal/schema",
	"github.com/stele-io/stele/pkg/proof",
	// Plugins' runtime (metered, with no clock or randomness of the
	// broker's) and the encoding of what it passes to them.
	"github.com/stele-io/stele/internal/plugin",
	"github.com/stele-io/stele/pkg/plugin/wire",
}

// TestImportsPointDown: no file of the state machine, in this package or
// under it, imports a Stele package other than stateMachineImports.
func TestImportsPointDown(t *testing.T) {
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, "github.com/stele-io/stele/") {
				continue
			}
			ok := false
			for _, a := range stateMachineImports {
				if p == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(p, a)) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s: the state machine imports only %v", path, p, stateMachineImports)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d files of the state machine: the walk missed its packages", files)
	}
}
