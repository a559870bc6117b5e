package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/httpapi"
)

// TestKeyGet: `stele key get` against a real node prints a key's events in
// order (table and JSON), from a version on, follows new ones, and fails
// clearly for a topic that does not exist or a bad address.
func TestKeyGet(t *testing.T) {
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	c.ok("", "topic", "create", "accounts", "--partitions", "3")
	c.ok("acct-1:opened\nacct-2:opened\nacct-1:credited 10\nacct-1:debited 3\n", "produce", "accounts", "--key-separator", ":")
	get := func(args ...string) result {
		return c.run("", append([]string{"key", "get", "--http", cfg.HTTPAddr}, args...)...)
	}

	r := get("accounts", "acct-1")
	if r.code != ExitOK {
		t.Fatalf("key get: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "PARTITION") || !strings.Contains(lines[1], `"opened"`) ||
		!strings.Contains(lines[2], `"credited 10"`) || !strings.Contains(lines[3], `"debited 3"`) {
		t.Fatalf("key get acct-1:\n%s", r.stdout)
	}
	r = get("accounts", "acct-1", "--from", "2", "--output", "json")
	var evs []httpapi.KeyEvent
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e httpapi.KeyEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("--output json line %q: %v", l, err)
		}
		evs = append(evs, e)
	}
	if len(evs) != 2 || string(*evs[0].Value) != "credited 10" || string(*evs[1].Value) != "debited 3" {
		t.Fatalf("--from 2 --output json: %+v", evs)
	}
	// An append over HTTP, conditional on the latest version, joins the
	// key's events in the partition Kafka's partitioner chose.
	last := evs[len(evs)-1]
	req, _ := http.NewRequest("POST", "http://"+cfg.HTTPAddr+"/v1/topics/accounts/keys/acct-1/events", strings.NewReader("audited"))
	req.Header.Set("If-Match", fmt.Sprintf("%q", fmt.Sprint(last.Offset)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("append over HTTP: %v %v", resp, err)
	}
	resp.Body.Close()
	r = get("accounts", "acct-1", "--output", "json")
	evs = nil
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e httpapi.KeyEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("--output json line %q: %v", l, err)
		}
		evs = append(evs, e)
	}
	if len(evs) != 4 || string(*evs[3].Value) != "audited" || evs[3].Partition != last.Partition || evs[3].Offset != last.Offset+1 {
		t.Fatalf("after the HTTP append: %+v", evs)
	}
	if r := get("accounts", "nobody"); r.code != ExitOK || strings.TrimSpace(r.stdout) != "PARTITION\tOFFSET\tTIMESTAMP\tVALUE\tSNAPSHOT" {
		t.Fatalf("a key without events: exit %d\n%s", r.code, r.stdout)
	}
	r = c.run("", "key", "list", "--http", cfg.HTTPAddr, "accounts", "--limit", "1")
	if r.code != ExitOK || r.stdout != "\"acct-1\"\n\"acct-2\"\n" {
		t.Fatalf("key list (one key per request): exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := c.run("", "key", "list", "--http", cfg.HTTPAddr, "accounts", "--prefix", "acct-2", "--output", "json"); r.code != ExitOK || r.stdout != "{\"utf8\":\"acct-2\"}\n" {
		t.Fatalf("key list --prefix --output json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := get("nope", "acct-1"); r.code != ExitFailure || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("unknown topic: exit %d: %s", r.code, r.stderr)
	}
	if r := c.run("", "key", "get", "--http", "nowhere", "accounts", "acct-1"); r.code != ExitUsage {
		t.Fatalf("bad --http: exit %d: %s", r.code, r.stderr)
	}

	// A snapshot record of acct-2: key get starts there, --from 0 does not.
	req, _ = http.NewRequest("POST", "http://"+cfg.HTTPAddr+"/v1/topics/accounts/keys/acct-2/events", strings.NewReader("balance 0"))
	req.Header.Set("Stele-Snapshot", "true")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("snapshot append: %v %v", resp, err)
	}
	c.ok("acct-2:after the snapshot\n", "produce", "accounts", "--key-separator", ":")
	r = get("accounts", "acct-2")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "\t\"balance 0\"\tyes") || !strings.Contains(lines[2], `"after the snapshot"`) {
		t.Fatalf("key get from the snapshot:\n%s", r.stdout)
	}
	if r := get("accounts", "acct-2", "--from", "0"); strings.Count(r.stdout, "\n") != 4 {
		t.Fatalf("key get --from 0 (every event):\n%s", r.stdout)
	}

	// --follow: the events so far, then one produced while following.
	fctx, fcancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer fcancel()
	go func() {
		time.Sleep(time.Second)
		runCLI(context.Background(), "acct-1:closed\n", "--brokers", c.brokers, "produce", "accounts", "--key-separator", ":")
	}()
	r = runCLI(fctx, "", "key", "get", "--http", cfg.HTTPAddr, "accounts", "acct-1", "--from", "3", "--follow")
	if r.code != ExitOK || !strings.Contains(r.stdout, `"debited 3"`) || !strings.Contains(r.stdout, `"closed"`) || strings.Contains(r.stdout, `"opened"`) {
		t.Fatalf("--follow: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
