package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestAdminPasswordFile: a node with a SASL_PLAINTEXT listener and
// --admin-password-file creates the admin user, who logs in with SCRAM
// and PLAIN; after a restart with another password in the file the admin
// keeps the first (the file creates the user, never changes it).
func TestAdminPasswordFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	pw := filepath.Join(t.TempDir(), "admin.password")
	if err := os.WriteFile(pw, []byte("first-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dir)
	cfg.Listeners = "SASL_PLAINTEXT://" + cfg.KafkaAddr
	cfg.AdminPasswordFile = pw
	login := func(n *Node, m kgo.Opt) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), m, kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return cl.Ping(ctx)
	}
	scramAdmin := func(p string) kgo.Opt { return kgo.SASL(scram.Auth{User: "admin", Pass: p}.AsSha512Mechanism()) }
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !n.broker.Users().Exists("admin") {
		if time.Now().After(deadline) {
			t.Fatal("no admin user 20 s after the start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := login(n, scramAdmin("first-password")); err != nil {
		t.Fatalf("SCRAM: %v", err)
	}
	if err := login(n, kgo.SASL(plain.Auth{User: "admin", Pass: "first-password"}.AsMechanism())); err != nil {
		t.Fatalf("PLAIN: %v", err)
	}
	n.Close()

	if err := os.WriteFile(pw, []byte("second-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err = Start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// bootstrapAdmin ends once it has found the admin (or made it): wait
	// for it, so a replaced password would be in the state by now.
	ended := make(chan struct{})
	go func() { n.bg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("bootstrapAdmin still running 20 s after the restart")
	}
	if err := login(n, scramAdmin("first-password")); err != nil {
		t.Fatalf("the first password after a restart: %v", err)
	}
	if err := login(n, scramAdmin("second-password")); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("the second password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}
