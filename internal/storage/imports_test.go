package storage

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Reference: DESIGN.md §2 — dependencies point down: storage may use
// record and durable (two leaves) and nothing else of Stele's.
func TestImportsPointDown(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/stele-io/stele/") &&
				path != "github.com/stele-io/stele/internal/record" && path != "github.com/stele-io/stele/internal/durable" {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
