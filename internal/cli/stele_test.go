package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/freeport"
	"github.com/stele-io/stele/internal/server"
)

// TestAgainstStele runs the admin commands against a real Stele node (the
// other tests use kfake): topics, produce, consume, configs, and dump-log on
// the segment the produce wrote.
func TestAgainstStele(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}

	mustOK := func(r result, what string) result {
		t.Helper()
		if r.code != ExitOK {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
		}
		return r
	}
	mustOK(c.run("", "topic", "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000"), "topic create")
	if r := c.run("", "topic", "create", "orders"); r.code != ExitFailure || !strings.Contains(r.stderr, "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("second create: exit %d, %s", r.code, r.stderr)
	}
	r := mustOK(c.run("", "topic", "describe", "orders"), "topic describe")
	if !strings.Contains(r.stdout, "retention.ms=3600000") {
		t.Errorf("describe lacks the topic config:\n%s", r.stdout)
	}
	mustOK(c.run("alice:1\nbob:2\nalice:3\n", "produce", "orders", "--key-separator", ":", "--header", "src=test"), "produce")
	r = mustOK(c.run("", "consume", "orders", "--from-beginning", "--max-messages", "3", "--format", "%k=%v %h\n"), "consume")
	for _, want := range []string{"alice=1 src=test", "bob=2 src=test", "alice=3 src=test"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("consume output lacks %q:\n%s", want, r.stdout)
		}
	}
	if i1, i3 := strings.Index(r.stdout, "alice=1"), strings.Index(r.stdout, "alice=3"); i1 > i3 {
		t.Errorf("alice's records out of order:\n%s", r.stdout)
	}
	mustOK(c.run("", "config", "alter", "--topic", "orders", "--set", "retention.ms=7200000"), "config alter")
	r = mustOK(c.run("", "config", "describe", "--topic", "orders"), "config describe")
	if !strings.Contains(r.stdout, "7200000") {
		t.Errorf("config describe after alter:\n%s", r.stdout)
	}
	if r := c.run("", "config", "alter", "--topic", "orders", "--set", "retention.ms=soon"); r.code != ExitFailure || !strings.Contains(r.stderr, "INVALID_CONFIG") {
		t.Fatalf("invalid config: exit %d, %s", r.code, r.stderr)
	}
	mustOK(c.run("", "topic", "alter", "orders", "--partitions", "4"), "topic alter")

	segs, _ := filepath.Glob(filepath.Join(cfg.DataDir, "logs", "orders-*", "00000000000000000000.log"))
	if len(segs) != 4 {
		t.Fatalf("%d segment files for orders, want 4", len(segs))
	}
	dumped := 0
	for _, s := range segs {
		r := mustOK(runCLI(ctx, "", "dump-log", s, "--verify-index", "--print-records"), "dump-log")
		dumped += strings.Count(r.stdout, "payload:")
	}
	if dumped != 3 {
		t.Errorf("dump-log printed %d records, want 3", dumped)
	}
	mustOK(c.run("", "topic", "delete", "orders"), "topic delete")
	if r := c.run("", "consume", "orders", "--max-messages", "1"); r.code != ExitFailure {
		t.Fatalf("consume of a deleted topic: exit %d", r.code)
	}
}

// freeAddr is a free loopback address (host:port) for a listener.
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startStele starts a single Stele node on free loopback ports, closed
// when the test ends, and returns its config and the node; edits change
// the config first.
func startStele(t *testing.T, edits ...func(*server.Config)) (server.Config, *server.Node) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.KafkaAddr, cfg.HTTPAddr, cfg.P2PAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	for _, e := range edits {
		e(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return cfg, n
}
