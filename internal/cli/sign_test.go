package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/server"
)

// TestSignedAdministration: against a real node, stele.admin.signed is
// turned on only by a signed alteration; then every gated change a Kafka
// client (stele without --sign, over Kafka) asks for is refused with a
// clear error, the same change signed by a principal without ACLs is
// refused by the ACLs, and signed by the administrator it is applied:
// topic deletion, ACLs added and removed, a user created and deleted,
// quotas set and removed, a tenant created, given quotas and deleted, a
// group's offsets reset and deleted, the group deleted; turned off again by a signed alteration, unsigned changes apply.
func TestSignedAdministration(t *testing.T) {
	cfg, _ := startStele(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run := func(args ...string) result {
		t.Helper()
		return runCLI(ctx, "", append([]string{"--brokers", cfg.KafkaAddr, "--timeout", "20s"}, args...)...)
	}
	ok := func(args ...string) result {
		t.Helper()
		r := run(args...)
		if r.code != ExitOK {
			t.Fatalf("stele %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	fails := func(want string, args ...string) {
		t.Helper()
		r := run(args...)
		if r.code == ExitOK || !strings.Contains(r.stderr, want) {
			t.Fatalf("stele %s: exit %d, want a failure mentioning %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
		}
	}
	httpFlag := []string{"--http", cfg.HTTPAddr}
	key := func(name string) []string {
		f := filepath.Join(dir, name+".key")
		ok("producer-key", "generate", "--out", f)
		ok(append([]string{"producer-key", "register", name, "--key", f}, httpFlag...)...)
		return append([]string{"--sign", f, "--principal", name}, httpFlag...)
	}
	admin, alice := key("admin"), key("alice")
	signed := func(by []string, args ...string) []string { return append(args, by...) }

	ok("topic", "create", "orders")
	ok("topic", "create", "keep")
	if r := runCLI(ctx, "v\n", "--brokers", cfg.KafkaAddr, "produce", "keep"); r.code != ExitOK {
		t.Fatalf("produce: %d %s", r.code, r.stderr)
	}
	// admin may do anything; clients over the PLAINTEXT listener
	// (User:ANONYMOUS) too, so that only the signature decides below.
	for _, p := range []string{"User:ANONYMOUS", "User:admin"} {
		ok("acl", "add", "--allow-principal", p, "--operation", "All", "--cluster")
		ok("acl", "add", "--allow-principal", p, "--operation", "All", "--topic", "*")
		ok("acl", "add", "--allow-principal", p, "--operation", "All", "--group", "*")
	}

	fails("stele.admin.signed changes only by a command signed", "config", "alter", "--broker-default", "--set", "stele.admin.signed=true")
	fails("CLUSTER_AUTHORIZATION_FAILED", signed(alice, "config", "alter", "--broker-default", "--set", "stele.admin.signed=true")...)
	ok(signed(admin, "config", "alter", "--broker-default", "--set", "stele.admin.signed=true")...)
	if r := ok("config", "describe", "--broker-default"); !strings.Contains(r.stdout, "stele.admin.signed") {
		t.Fatalf("config describe --broker-default does not show the setting:\n%s", r.stdout)
	}

	// Topics.
	fails("must be signed", "topic", "delete", "orders")
	fails("TOPIC_AUTHORIZATION_FAILED", signed(alice, "topic", "delete", "orders")...)
	ok(signed(admin, "topic", "delete", "orders")...)
	if r := ok("topic", "list"); strings.Contains(r.stdout, "orders") {
		t.Fatalf("orders still listed:\n%s", r.stdout)
	}
	fails("must be signed", "config", "alter", "--topic", "keep", "--set", "retention.ms=60000")
	ok(signed(admin, "config", "alter", "--topic", "keep", "--set", "retention.ms=60000")...)

	// ACLs.
	fails("must be signed", "acl", "add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "keep")
	ok(signed(admin, "acl", "add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "keep")...)
	fails("must be signed", "acl", "remove", "--allow-principal", "User:bob", "--topic", "keep")
	if r := ok(signed(admin, "acl", "remove", "--allow-principal", "User:bob", "--topic", "keep", "--output", "json")...); !strings.Contains(r.stdout, "User:bob") {
		t.Fatalf("acl remove printed:\n%s", r.stdout)
	}
	if r := ok("acl", "list", "--principal", "User:bob"); strings.Contains(r.stdout, "User:bob") {
		t.Fatalf("bob's ACL is still there:\n%s", r.stdout)
	}

	// Users and quotas.
	pw := filepath.Join(dir, "bob.password")
	if err := os.WriteFile(pw, []byte("bob-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails("must be signed", "user", "create", "bob", "--password-file", pw)
	ok(signed(admin, "user", "create", "bob", "--password-file", pw)...)
	if r := ok("user", "list"); !strings.Contains(r.stdout, "bob") {
		t.Fatalf("bob is not listed:\n%s", r.stdout)
	}
	fails("must be signed", "quota", "set", "--user", "bob", "producer_byte_rate=1000")
	ok(signed(admin, "quota", "set", "--user", "bob", "producer_byte_rate=1000")...)
	ok(signed(admin, "quota", "remove", "--user", "bob", "producer_byte_rate")...)
	fails("must be signed", "quota", "set", "--ip", "10.0.0.7", "connection_creation_rate=5")
	ok(signed(admin, "quota", "set", "--ip", "::ffff:10.0.0.7", "connection_creation_rate=5")...)
	if r := ok("quota", "list", "--ip", "10.0.0.7"); !strings.Contains(r.stdout, "10.0.0.7") || !strings.Contains(r.stdout, "connection_creation_rate") {
		t.Fatalf("quota list --ip:\n%s", r.stdout)
	}
	fails("must be signed", "user", "delete", "bob")
	ok(signed(admin, "user", "delete", "bob")...)

	// Tenants: created, given quotas and deleted only signed, by the
	// cluster's administrator.
	fails("must be signed", append([]string{"tenant", "create", "acme"}, httpFlag...)...)
	fails("CLUSTER_AUTHORIZATION_FAILED", signed(alice, "tenant", "create", "acme")...)
	ok(signed(admin, "tenant", "create", "acme", "--quota", "topics=3")...)
	fails("must be signed", append([]string{"tenant", "quota", "set", "acme", "--quota", "groups=2"}, httpFlag...)...)
	ok(signed(admin, "tenant", "quota", "set", "acme", "--quota", "groups=2")...)
	if r := ok(append([]string{"tenant", "describe", "acme", "--output", "json"}, httpFlag...)...); !strings.Contains(r.stdout, `"limit": 2`) {
		t.Fatalf("tenant describe acme:\n%s", r.stdout)
	}
	fails("must be signed", append([]string{"tenant", "delete", "acme"}, httpFlag...)...)
	if r := ok(signed(admin, "tenant", "delete", "acme")...); !strings.Contains(r.stdout, "Deleted tenant acme; removed 0 acls") {
		t.Fatalf("tenant delete printed:\n%s", r.stdout)
	}

	// Groups: a reset is a commit from outside the group's generation.
	fails("must be signed: add --sign", "group", "reset-offsets", "g", "--topic", "keep", "--to-earliest", "--execute")
	ok(signed(admin, "group", "reset-offsets", "g", "--topic", "keep", "--to-latest", "--execute")...)
	if r := ok("group", "describe", "g"); !strings.Contains(r.stdout, "keep") {
		t.Fatalf("the reset offset is not there:\n%s", r.stdout)
	}
	fails("must be signed: add --sign", "group", "delete-offsets", "g", "--topic", "keep")
	ok(signed(admin, "group", "delete-offsets", "g", "--topic", "keep")...)
	ok(signed(admin, "group", "reset-offsets", "g", "--topic", "keep", "--to-earliest", "--execute")...)
	fails("must be signed: add --sign", "group", "delete", "g")
	ok(signed(admin, "group", "delete", "g")...)

	// Off again: only signed, and then unsigned changes apply.
	fails("stele.admin.signed changes only by a command signed", "config", "alter", "--broker-default", "--delete", "stele.admin.signed")
	ok(signed(admin, "config", "alter", "--broker-default", "--delete", "stele.admin.signed")...)
	ok("topic", "delete", "keep")
	fails("--sign and --principal go together", "topic", "delete", "x", "--sign", "k")
}

// TestTenantAdministratorSigns: under stele.admin.signed a tenant's
// administrator (root@acme, logged in over SASL) signs its tenant's
// administration with the names its clients use: a user created and
// deleted, an ACL added and removed, a user's quota set, a topic deleted;
// what is not its tenant's (another tenant's user, the cluster's configs,
// the default user's quota, its tenant's own quotas) is refused.
func TestTenantAdministratorSigns(t *testing.T) {
	dir := t.TempDir()
	secret := func(name, pw string) string {
		f := filepath.Join(dir, name+".password")
		if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	adminPw, pw := secret("admin", "admin-secret"), secret("user", "user-secret")
	cfg, _ := startStele(t, func(c *server.Config) {
		c.Listeners, c.AdminPasswordFile = "SASL_PLAINTEXT://"+c.KafkaAddr, adminPw
	})
	login := func(user, password string) string {
		f := filepath.Join(dir, user+".properties")
		props := "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=" + user + "\nsasl.password=" + password + "\n"
		if err := os.WriteFile(f, []byte(props), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(as string, args ...string) result {
		t.Helper()
		return runCLI(ctx, "", append([]string{"--brokers", cfg.KafkaAddr, "--command-config", as, "--timeout", "20s"}, args...)...)
	}
	ok := func(as string, args ...string) result {
		t.Helper()
		r := run(as, args...)
		if r.code != ExitOK {
			t.Fatalf("stele %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	fails := func(want, as string, args ...string) {
		t.Helper()
		r := run(as, args...)
		if r.code == ExitOK || !strings.Contains(r.stderr, want) {
			t.Fatalf("stele %s: exit %d, want a failure mentioning %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
		}
	}
	httpFlag := []string{"--http", cfg.HTTPAddr}
	admin := login("admin", "admin-secret")
	key := func(name string) []string {
		f := filepath.Join(dir, name+".key")
		ok(admin, "producer-key", "generate", "--out", f)
		ok(admin, append([]string{"producer-key", "register", name, "--key", f}, httpFlag...)...)
		return append([]string{"--sign", f, "--principal", name}, httpFlag...)
	}
	signed := func(by []string, args ...string) []string { return append(args, by...) }
	eventually(t, time.Minute, func() error { // the node creates admin once it runs
		if r := run(admin, "user", "list"); r.code != ExitOK {
			return fmt.Errorf("admin cannot log in: %s", r.stderr)
		}
		return nil
	})
	byAdmin := key("admin")
	ok(admin, "acl", "add", "--allow-principal", "User:admin", "--operation", "All", "--cluster", "--topic", "*", "--group", "*")
	ok(admin, signed(byAdmin, "config", "alter", "--broker-default", "--set", "stele.admin.signed=true")...)
	ok(admin, signed(byAdmin, "tenant", "create", "acme")...)
	ok(admin, signed(byAdmin, "tenant", "create", "globex")...)
	ok(admin, signed(byAdmin, "user", "create", "root", "--tenant", "acme", "--tenant-admin", "--password-file", pw)...)

	root, byRoot := login("root@acme", "user-secret"), key("root@acme")
	ok(root, "topic", "create", "orders")
	fails("must be signed", root, "user", "create", "carol", "--password-file", pw)
	ok(root, signed(byRoot, "user", "create", "carol", "--password-file", pw)...)
	if r := ok(root, "user", "list"); !strings.Contains(r.stdout, "carol") || strings.Contains(r.stdout, "@acme") {
		t.Fatalf("root@acme lists users:\n%s", r.stdout)
	}
	ok(root, signed(byRoot, "acl", "add", "--allow-principal", "User:carol", "--operation", "Read", "--topic", "orders")...)
	if r := ok(root, "acl", "list", "--principal", "User:carol"); !strings.Contains(r.stdout, "orders") || strings.Contains(r.stdout, "acme") {
		t.Fatalf("root@acme lists carol's ACLs:\n%s", r.stdout)
	}
	ok(root, signed(byRoot, "quota", "set", "--user", "carol", "producer_byte_rate=2000")...)
	if r := ok(root, "quota", "list", "--user", "carol"); !strings.Contains(r.stdout, "producer_byte_rate") {
		t.Fatalf("root@acme lists carol's quotas:\n%s", r.stdout)
	}

	fails("signs for tenant acme only", root, signed(byRoot, "user", "create", "dave", "--tenant", "globex", "--password-file", pw)...)
	fails("CLUSTER_AUTHORIZATION_FAILED", root, signed(byRoot, "config", "alter", "--broker-default", "--set", "stele.admin.signed=false")...)
	fails("CLUSTER_AUTHORIZATION_FAILED", root, signed(byRoot, "quota", "set", "--user-default", "producer_byte_rate=1")...)
	fails("CLUSTER_AUTHORIZATION_FAILED", root, signed(byRoot, "tenant", "quota", "set", "acme", "--quota", "topics=100")...)

	ok(root, signed(byRoot, "acl", "remove", "--allow-principal", "User:carol", "--topic", "orders")...)
	if r := ok(root, "acl", "list", "--principal", "User:carol"); strings.Contains(r.stdout, "orders") {
		t.Fatalf("carol's ACL outlived its removal:\n%s", r.stdout)
	}
	fails("must be signed", root, "topic", "delete", "orders")
	ok(root, signed(byRoot, "topic", "delete", "orders")...)
	ok(root, signed(byRoot, "user", "delete", "carol")...)
	if r := ok(root, "user", "list"); strings.Contains(r.stdout, "carol") {
		t.Fatalf("carol outlived her deletion:\n%s", r.stdout)
	}
	if r := ok(admin, "topic", "list"); strings.Contains(r.stdout, "orders") {
		t.Fatalf("acme's orders outlived its deletion:\n%s", r.stdout)
	}
}
