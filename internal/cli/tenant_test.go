package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/httpapi"
)

// TestTenantCommands: against a real node, `stele tenant` creates a
// tenant with quotas, refuses one that exists, a bad name or a bad quota
// (usage errors before anything is sent), lists and describes tenants with
// their usage (table and JSON), changes quotas, deletes a tenant printing
// what was removed, and fails clearly for one that does not exist.
func TestTenantCommands(t *testing.T) {
	cfg, _ := startStele(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) result {
		t.Helper()
		return runCLI(ctx, "", append(args, "--http", cfg.HTTPAddr)...)
	}
	ok := func(args ...string) result {
		t.Helper()
		r := run(args...)
		if r.code != ExitOK {
			t.Fatalf("stele %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	if r := ok("tenant", "create", "acme", "--quota", "topics=10", "--quota", "partitions=20"); !strings.Contains(r.stdout, "Created tenant acme.") {
		t.Fatalf("create printed %q", r.stdout)
	}
	ok("tenant", "create", "globex")
	wantFailure(t, run("tenant", "create", "acme"), ExitFailure, "tenant acme exists")
	wantFailure(t, run("tenant", "create", "Acme"), ExitUsage, "lowercase")
	wantFailure(t, run("tenant", "create", "initech", "--quota", "storage=1"), ExitUsage, "unknown tenant quota")
	wantFailure(t, run("tenant", "create", "initech", "--quota", "topics"), ExitUsage, "KEY=VALUE")
	wantFailure(t, run("tenant", "quota", "set", "acme"), ExitUsage, "nothing to change")
	wantFailure(t, run("user", "create", "root", "--tenant-admin", "--password-file", "pw"), ExitUsage, "--tenant-admin needs --tenant")

	r := ok("tenant", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TENANT") || !strings.HasPrefix(lines[1], "acme") || !strings.Contains(lines[1], "0/10") || !strings.HasPrefix(lines[2], "globex") {
		t.Fatalf("tenant list:\n%s", r.stdout)
	}
	var all []httpapi.Tenant
	decodeJSON(t, ok("tenant", "list", "--output", "json").stdout, &all)
	if len(all) != 2 || all[0].Quotas["partitions"].Limit == nil || *all[0].Quotas["partitions"].Limit != 20 {
		t.Fatalf("tenant list --output json: %+v", all)
	}
	ok("tenant", "quota", "set", "acme", "--quota", "groups=3", "--remove", "partitions", "--quota", "producer_byte_rate=1048576", "--quota", "connections=5")
	r = ok("tenant", "describe", "acme")
	if !strings.Contains(r.stdout, "Tenant acme, created at height") || !strings.Contains(r.stdout, "groups") || !strings.Contains(r.stdout, "partitions          0     none") ||
		!strings.Contains(r.stdout, "producer_byte_rate  0     1048576") || !strings.Contains(r.stdout, "connections         0     5") || !strings.Contains(r.stdout, "each broker's") {
		t.Fatalf("tenant describe:\n%s", r.stdout)
	}
	wantFailure(t, run("tenant", "describe", "initech"), ExitFailure, `tenant "initech" does not exist`)
	if r := ok("tenant", "delete", "acme"); !strings.Contains(r.stdout, "Deleted tenant acme; removed") || !strings.Contains(r.stdout, "0 topics") {
		t.Fatalf("delete printed %q", r.stdout)
	}
	wantFailure(t, run("tenant", "delete", "acme"), ExitFailure, "tenant acme does not exist")
	var one struct {
		Tenant  string         `json:"tenant"`
		Removed map[string]int `json:"removed"`
	}
	decodeJSON(t, ok("tenant", "delete", "globex", "--output", "json").stdout, &one)
	if one.Tenant != "globex" || len(one.Removed) != 11 || one.Removed["plugins"] != 0 {
		t.Fatalf("delete --output json: %+v", one)
	}
}
