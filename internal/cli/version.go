package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionInfo is the JSON form of `stele version`.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// buildVersion reads the version from the binary's build information: the
// module version for `go install`ed binaries, "(devel)" for local builds,
// and the VCS revision when the build recorded one.
func buildVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func newVersionCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this stele binary",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			commit := ""
			if v.Commit != "" {
				commit = " commit " + v.Commit
				if v.Modified {
					commit += " (modified)"
				}
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "stele %s%s %s %s\n", v.Version, commit, v.Go, v.Platform)
			return err
		},
	}
}
