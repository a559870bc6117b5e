package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stele-io/stele/internal/storage"
)

// newDumpLogCmd returns `stele dump-log`, the counterpart of
// kafka-dump-log.sh. It reads segment files directly and needs no broker.
func newDumpLogCmd(g *globalOptions) *cobra.Command {
	var opts storage.DumpOptions
	c := &cobra.Command{
		Use:   "dump-log PATH...",
		Short: "Print the batches of log segment and index files (kafka-dump-log.sh)",
		Long: `Print segment files of a partition directory the way kafka-dump-log.sh does:
a .log file batch by batch (with --print-records, record by record), a .index
or .timeindex file entry by entry, each entry checked against the .log beside
it. It reads the files directly; no broker is involved.

Every PATH is dumped even if an earlier one fails; the command exits 1 if any
file could not be read or is corrupt (a bad CRC, bytes that are not a batch,
an index entry that does not match its log).

The kafka-dump-log.sh names --print-data-log and --verify-index-only are
accepted for --print-records and --verify-index.`,
		Example: `  stele dump-log stele-data/orders-0/00000000000000000000.log --print-records
  stele dump-log stele-data/orders-0/*.index --verify-index`,
		Args: minArgs("PATH"),
		RunE: func(cmd *cobra.Command, paths []string) error {
			if g.jsonOutput() {
				return usageErrorf("dump-log prints kafka-dump-log.sh's text format only; --output json is not supported")
			}
			var errs []error
			for _, p := range paths {
				err := storage.DumpSegment(cmd.OutOrStdout(), p, opts)
				if err != nil && !strings.Contains(err.Error(), p) {
					err = fmt.Errorf("dump %s: %w", p, err)
				}
				if err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
	f := c.Flags()
	f.BoolVar(&opts.PrintRecords, "print-records", false, "print every record of a .log file")
	f.BoolVar(&opts.VerifyIndex, "verify-index", false, "check index entries against the log without printing them")
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		switch name {
		case "print-data-log":
			name = "print-records"
		case "verify-index-only":
			name = "verify-index"
		}
		return pflag.NormalizedName(name)
	})
	return c
}
