package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/fsm"
)

// stele plugin new NAME (issue 24, docs/plugins.md#the-sdk): writes a
// plugin project, a few lines of Go with the SDK (pkg/plugin) whose
// produce hook stores each batch as it came, with a Makefile that builds
// the module and deploys it.

const steleModule = "github.com/stele-io/stele"

// pluginTemplate is the project's main.go; %s is the plugin's name.
const pluginTemplate = `// Command %[1]s is a Stele plugin (docs/plugins.md): its produce hook runs
// on every broker, inside the deterministic apply, on each batch produced to
// the topic it is deployed on, and returns the records to store.
//
// Build and deploy:
//
//	make            # GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o %[1]s.wasm .
//	stele plugin deploy %[1]s --wasm %[1]s.wasm --topic TOPIC [--config KEY=VALUE ...]
package main

import "github.com/stele-io/stele/pkg/plugin"

func init() {
	plugin.HandleProduce(func(b *plugin.Batch) ([]plugin.Record, error) {
		// b.Topic, b.Partition, b.Config (the --config entries) and
		// b.Records (Timestamp, Key, Value, Headers; nil is null).
		// Change, drop or add records and return those to store; return
		// an error to reject the batch: its producer gets INVALID_RECORD
		// with the error's text. No clock, randomness, files or network
		// of the broker's reach a plugin: it must answer the same on
		// every broker.
		return b.Records, nil
	})
}

func main() {}
`

const pluginMakefile = `# Builds the plugin's WebAssembly module with the Go SDK.
%[1]s.wasm: go.mod *.go
	go mod tidy
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o %[1]s.wasm .

deploy: %[1]s.wasm
	stele plugin deploy %[1]s --wasm %[1]s.wasm --topic $(TOPIC)

.PHONY: deploy
`

func newPluginNewCmd(g *globalOptions) *cobra.Command {
	var dir, sdk string
	cmd := &cobra.Command{
		Use:   "new NAME",
		Short: "Write a plugin project: a produce hook in Go with the SDK, and a Makefile that builds and deploys it",
		Long: `Write the directory NAME (under --dir) with main.go (a produce hook that
stores each batch as it came: change it), go.mod (requiring this binary's
version of ` + steleModule + `, or, with --sdk PATH, a Stele checkout at PATH)
and a Makefile: make builds NAME.wasm, make deploy TOPIC=T deploys it.`,
		Example: `  stele plugin new stamp
  stele plugin new stamp --sdk ~/src/stele   # a development build of stele`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := fsm.ValidPluginName(name); err != nil {
				return usageErrorf("%v", err)
			}
			if strings.ContainsAny(name, ".") {
				return usageErrorf("plugin name %q: a project's name may not contain '.'", name)
			}
			version := ""
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path == steleModule && strings.HasPrefix(bi.Main.Version, "v") {
				version = bi.Main.Version
			}
			mod := fmt.Sprintf("module %s\n\ngo 1.24\n\n", name)
			switch {
			case sdk != "":
				abs, err := filepath.Abs(sdk)
				if err != nil {
					return err
				}
				if _, err := os.Stat(filepath.Join(abs, "pkg", "plugin", "plugin.go")); err != nil {
					return usageErrorf("--sdk %s: not a Stele checkout (no pkg/plugin/plugin.go)", sdk)
				}
				mod += fmt.Sprintf("require %s v0.0.0\n\nreplace %s => %s\n", steleModule, steleModule, abs)
			case version != "":
				mod += fmt.Sprintf("require %s %s\n", steleModule, version)
			default:
				return usageErrorf("this stele is a development build (version (devel)): give --sdk PATH, a checkout of Stele, for the project to build against")
			}
			root := filepath.Join(dir, name)
			if _, err := os.Stat(root); err == nil {
				return fmt.Errorf("%s exists: choose another name or --dir", root)
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if err := os.MkdirAll(root, 0o755); err != nil {
				return err
			}
			for file, text := range map[string]string{
				"main.go":  fmt.Sprintf(pluginTemplate, name),
				"go.mod":   mod,
				"Makefile": fmt.Sprintf(pluginMakefile, name),
			} {
				if err := os.WriteFile(filepath.Join(root, file), []byte(text), 0o644); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Wrote %s: main.go, go.mod, Makefile.\nBuild it with: cd %s && make\nDeploy it with: stele plugin deploy %s --wasm %s.wasm --topic TOPIC\n",
				root, root, name, filepath.Join(root, name))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "the directory to write the project in")
	cmd.Flags().StringVar(&sdk, "sdk", "", "a Stele checkout to build against (replace "+steleModule+" => PATH), for a development build of stele")
	return cmd
}
