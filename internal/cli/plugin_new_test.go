package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// TestPluginNew: `stele plugin new` writes a project that builds, with
// the commands its Makefile runs, into a module the brokers take as a
// plugin (compiled and started as a deployment would be); a development
// build without --sdk, a bad name and an existing directory are refused.
func TestPluginNew(t *testing.T) {
	dir := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(context.Background(), "", "plugin", "new", "stamp", "--dir", dir, "--sdk", repo)
	if r.code != ExitOK || !strings.Contains(r.stdout, "Wrote "+filepath.Join(dir, "stamp")) {
		t.Fatalf("stele plugin new: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	root := filepath.Join(dir, "stamp")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"go mod tidy", "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o stamp.wasm ."} {
		if !strings.Contains(string(mk), "\t"+line+"\n") {
			t.Fatalf("the Makefile does not run %q:\n%s", line, mk)
		}
		f := strings.Fields(line)
		cmd := exec.Command(f[0], f[1:]...)
		if strings.HasPrefix(line, "GOOS") {
			cmd = exec.Command("go", f[3:]...)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		}
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	wasm, err := os.ReadFile(filepath.Join(root, "stamp.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := httpapi.CheckPluginModule(context.Background(), wasm, fsm.PluginHookProduce); err != nil {
		t.Fatalf("the template's module is not a plugin: %v", err)
	}

	wantFailure(t, runCLI(context.Background(), "", "plugin", "new", "stamp", "--dir", dir, "--sdk", repo), ExitFailure, "exists")
	wantFailure(t, runCLI(context.Background(), "", "plugin", "new", "Bad!", "--dir", dir, "--sdk", repo), ExitUsage, "plugin name")
	wantFailure(t, runCLI(context.Background(), "", "plugin", "new", "other", "--dir", dir), ExitUsage, "--sdk PATH")
}
