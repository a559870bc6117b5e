package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/server"
)

// TestHTTPAPIOverTLS: a node with a SASL_SSL listener and --http-tls
// serves its HTTP API over TLS only; stele reaches it with --http
// https://... and --command-config: the admin's SASL password goes as
// Basic credentials (a super user may read anything), a client
// certificate is its principal (bob reads what his ACL names), a client
// with neither is anonymous and refused, one without the CA cannot
// connect, and plain http gets nothing.
func TestHTTPAPIOverTLS(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := listener.NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, p listener.PEMPair) (string, string) {
		c, k := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err := listener.WritePair(p, c, k); err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	caCrt, _ := write("ca", ca)
	srv, err := listener.Issue(ca, "broker", nil, []net.IP{net.ParseIP("127.0.0.1")}, now)
	if err != nil {
		t.Fatal(err)
	}
	srvCrt, srvKey := write("broker", srv)
	bob, _ := listener.Issue(ca, "bob", nil, nil, now)
	bobCrt, bobKey := write("bob", bob)
	pw := filepath.Join(dir, "admin.password")
	if err := os.WriteFile(pw, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ := startStele(t, func(c *server.Config) {
		c.Listeners = "SASL_SSL://" + c.KafkaAddr
		c.TLS = listener.TLSFiles{Cert: srvCrt, Key: srvKey, CA: caCrt, ClientAuth: listener.ClientAuthRequested}
		c.HTTPTLS = true
		c.AdminPasswordFile = pw
	})
	props := func(name string, lines ...string) string {
		f := filepath.Join(dir, name+".properties")
		if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	admin := props("admin", "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512", "sasl.username=admin", "sasl.password=admin-secret", "ssl.ca.location="+caCrt)
	bobProps := props("bob", "security.protocol=SSL", "ssl.ca.location="+caCrt, "ssl.certificate.location="+bobCrt, "ssl.key.location="+bobKey)
	anon := props("anon", "security.protocol=SSL", "ssl.ca.location="+caCrt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(p string, args ...string) result {
		t.Helper()
		all := []string{"--brokers", cfg.KafkaAddr, "--timeout", "20s"}
		if p != "" {
			all = append(all, "--command-config", p)
		}
		return runCLI(ctx, "", append(all, args...)...)
	}
	https := "https://" + cfg.HTTPAddr
	// The admin exists once its creation is committed.
	eventually(t, 30*time.Second, func() error {
		if r := run(admin, "topic", "create", "orders"); r.code != ExitOK {
			return errors.New(r.stderr)
		}
		return nil
	})
	if r := run(admin, "key", "list", "orders", "--http", https); r.code != ExitOK {
		t.Fatalf("admin over https: %d %s", r.code, r.stderr)
	}
	if r := run(anon, "key", "list", "orders", "--http", https); r.code == ExitOK || !strings.Contains(r.stderr, "not authorized") {
		t.Fatalf("anonymous over https: %d %s", r.code, r.stderr)
	}
	if r := run(bobProps, "key", "list", "orders", "--http", https); r.code == ExitOK || !strings.Contains(r.stderr, "User:CN=bob is not authorized") {
		t.Fatalf("bob before his ACL: %d %s", r.code, r.stderr)
	}
	if r := run(admin, "acl", "add", "--allow-principal", "User:CN=bob", "--operation", "Read", "--topic", "orders"); r.code != ExitOK {
		t.Fatalf("acl: %s", r.stderr)
	}
	eventually(t, 10*time.Second, func() error {
		if r := run(bobProps, "key", "list", "orders", "--http", https); r.code != ExitOK {
			return errors.New(r.stderr)
		}
		return nil
	})
	// Proofs over https: stele verify and audit take the same client.
	genesis := filepath.Join(cfg.DataDir, "cometbft", "config", "genesis.json")
	if r := run(admin, "verify", "--end", "orders", "0", "--http", https, "--genesis", genesis); r.code != ExitOK {
		t.Fatalf("verify over https: %d %s", r.code, r.stderr)
	}
	if r := run(admin, "audit", "--http", https, "--genesis", genesis); r.code != ExitOK {
		t.Fatalf("audit over https: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run("", "key", "list", "orders", "--http", https); r.code == ExitOK || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("without the CA: %d %s", r.code, r.stderr)
	}
	if r := run(admin, "key", "list", "orders", "--http", cfg.HTTPAddr); r.code == ExitOK {
		t.Fatalf("plain http to the TLS port answered: %s", r.stdout)
	}
}

// TestNamedListeners: listeners named through
// --listener-security-protocol-map, one advertised elsewhere with
// --advertised-listeners: Metadata through each listener names the
// broker at that listener's advertised address, as Kafka answers.
func TestNamedListeners(t *testing.T) {
	internal, external := freeAddr(t), freeAddr(t)
	_, extPort, _ := net.SplitHostPort(external)
	startStele(t, func(c *server.Config) {
		c.Listeners = "INTERNAL://" + internal + ",EXTERNAL://" + external
		c.ListenerProtocolMap = "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"
		c.AdvertisedListeners = "EXTERNAL://localhost:" + extPort
	})
	for _, c := range []struct{ dial, want string }{{internal, internal}, {external, "localhost:" + extPort}} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.dial))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl)
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Brokers) != 1 || net.JoinHostPort(resp.Brokers[0].Host, strconv.Itoa(int(resp.Brokers[0].Port))) != c.want {
			t.Errorf("Metadata through %s: brokers %+v, want one at %s", c.dial, resp.Brokers, c.want)
		}
	}
}

// TestCertRevoke: stele cert revoke adds a client certificate to the CA's
// ca.crl; a broker started with --ssl-crl refuses it from its next check
// of the file on, without a restart, and serves the others.
func TestCertRevoke(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must := func(args ...string) {
		t.Helper()
		if r := runCLI(ctx, "", args...); r.code != ExitOK {
			t.Fatalf("stele %s: %d %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	must("cert", "ca", "--out", dir)
	must("cert", "issue", "--ca", dir, "--name", "broker", "--ip", "127.0.0.1", "--out", dir)
	must("cert", "issue", "--ca", dir, "--name", "alice", "--out", dir)
	must("cert", "issue", "--ca", dir, "--name", "bob", "--out", dir)
	must("cert", "revoke", "--ca", dir, filepath.Join(dir, "bob.crt"))
	cfg, _ := startStele(t, func(c *server.Config) {
		c.Listeners = "SSL://" + c.KafkaAddr
		c.TLS = listener.TLSFiles{Cert: filepath.Join(dir, "broker.crt"), Key: filepath.Join(dir, "broker.key"), CA: filepath.Join(dir, "ca.crt"),
			CRL: filepath.Join(dir, "ca.crl"), ClientAuth: listener.ClientAuthRequired}
	})
	props := func(name string) string {
		f := filepath.Join(dir, name+".properties")
		os.WriteFile(f, []byte("security.protocol=SSL\nssl.ca.location="+filepath.Join(dir, "ca.crt")+
			"\nssl.certificate.location="+filepath.Join(dir, name+".crt")+"\nssl.key.location="+filepath.Join(dir, name+".key")+"\n"), 0o600)
		return f
	}
	list := func(who string) result {
		return runCLI(ctx, "", "--brokers", cfg.KafkaAddr, "--timeout", "5s", "--command-config", props(who), "topic", "list")
	}
	if r := list("alice"); r.code != ExitOK {
		t.Fatalf("alice: %d %s", r.code, r.stderr)
	}
	if r := list("bob"); r.code == ExitOK {
		t.Fatal("bob's revoked certificate was served")
	}
	must("cert", "revoke", "--ca", dir, filepath.Join(dir, "alice.crt"))
	eventually(t, 10*time.Second, func() error {
		if r := list("alice"); r.code == ExitOK {
			return errors.New("alice is still served")
		}
		return nil
	})
}
