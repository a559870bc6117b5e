package record

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The package sits at the bottom of Stele's dependency order and does no
// I/O (DESIGN.md §2): its non-test files import no other Stele package and
// nothing that reaches files, the network or processes.
func TestImports(t *testing.T) {
	forbidden := []string{"github.com/stele-io/stele/", "os", "os/", "net", "net/", "io/fs", "syscall", "unsafe"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasSuffix(bad, "/") && strings.HasPrefix(path, bad) {
					t.Errorf("%s imports %q", name, path)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}
