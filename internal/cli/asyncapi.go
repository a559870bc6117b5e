package cli

// stele asyncapi (issue 22, docs/schemas.md "AsyncAPI"): the AsyncAPI 3.0
// document a broker serves (GET /v1/asyncapi), written to a file or stdout.

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func newAsyncAPICmd(g *globalOptions) *cobra.Command {
	var httpAddr, out string
	cmd := &cobra.Command{
		Use:   "asyncapi [--out FILE]",
		Short: "Write the AsyncAPI 3.0 document of the cluster (or your tenant): topics, views, schemas, subjects",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			hc, err := g.httpClient(g.timeout)
			if err != nil {
				return err
			}
			resp, err := hc.Get(httpBase(addr) + "/v1/asyncapi")
			if err != nil {
				return fmt.Errorf("asyncapi: %w", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			if err != nil {
				return fmt.Errorf("asyncapi: %w", err)
			}
			if resp.StatusCode != 200 {
				return fmt.Errorf("asyncapi: %s: %s", resp.Status, body)
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(body)
				return err
			}
			if err := os.WriteFile(out, body, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", out, len(body))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the file to write (default: stdout)")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}
