package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// testCluster is a one-broker kfake cluster and the CLI pointed at it.
type testCluster struct {
	t       *testing.T
	kc      *kfake.Cluster
	brokers string
}

// newTestCluster starts an in-process kfake broker (node 0), closed when
// the test ends. seeds are topics created with one partition.
func newTestCluster(t *testing.T, seeds ...string) *testCluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if len(seeds) > 0 {
		opts = append(opts, kfake.SeedTopics(1, seeds...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &testCluster{t: t, kc: c, brokers: strings.Join(c.ListenAddrs(), ",")}
}

// result is the outcome of one CLI run.
type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI in-process against the cluster with stdin as input.
func (c *testCluster) run(stdin string, args ...string) result {
	c.t.Helper()
	return c.runCtx(context.Background(), stdin, args...)
}

func (c *testCluster) runCtx(ctx context.Context, stdin string, args ...string) result {
	c.t.Helper()
	all := append([]string{"--brokers", c.brokers, "--timeout", "10s"}, args...)
	if len(args) > 0 && args[0] == "consume" && !slices.Contains(args, "--timeout-idle") {
		// A consume that waits for records that never come fails the
		// test rather than hanging it.
		all = append(all, "--timeout-idle", "5s")
	}
	return runCLI(ctx, stdin, all...)
}

// ok runs the CLI and fails the test unless it exits 0.
func (c *testCluster) ok(stdin string, args ...string) result {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code != ExitOK {
		c.t.Fatalf("stele %s: exit %d, want 0\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// runCLI runs the CLI in-process with its own streams.
func runCLI(ctx context.Context, stdin string, args ...string) result {
	var out, errb bytes.Buffer
	code := Run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// decodeJSON unmarshals s into v or fails the test.
func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("output is not the expected JSON: %v\n%s", err, s)
	}
}

// wantFailure checks an exit code and that stderr mentions every want.
func wantFailure(t *testing.T, r result, code int, wants ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not mention %q:\n%s", w, r.stderr)
		}
	}
}

// eventually retries fn until it succeeds or d passes.
func eventually(t *testing.T, d time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
