package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/httpapi"
)

// TestSubjectCLI: against a real node, records produced with a subject
// (the stele-subject header, or a JSON Pointer into the value) are read
// back by pattern with `stele consume --subject` (the broker filters), in
// every output form, from the beginning or a partition's offset;
// `stele subject list` lists them with counts, by prefix; an invalid
// subject is refused at produce and nothing is written; bad patterns are
// usage errors.
func TestSubjectCLI(t *testing.T) {
	cfg, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	c.ok("", "topic", "create", "orders", "--partitions", "2")
	for _, s := range []string{"orders.eu.fr.created", "orders.eu.de.created", "orders.us.ny.paid", "orders.eu.fr.paid"} {
		c.ok("k1:"+s+"\nk2:"+s+"\n", "produce", "orders", "--key-separator", ":", "--header", "stele-subject="+s)
	}
	c.ok("k3:plain\n", "produce", "orders", "--key-separator", ":")
	if r := c.run("k4:bad\n", "produce", "orders", "--key-separator", ":", "--header", "stele-subject=orders..bad"); r.code == ExitOK || !strings.Contains(r.stderr, "INVALID_RECORD") {
		t.Fatalf("an invalid subject: exit %d: %s", r.code, r.stderr)
	}
	consumeFrom := func(topic string, args ...string) result {
		t.Helper()
		return c.ok("", append([]string{"consume", topic, "--http", cfg.HTTPAddr, "--timeout-idle", "2s"}, args...)...)
	}
	consume := func(args ...string) result { t.Helper(); return consumeFrom("orders", args...) }
	lines := func(s string) []string {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		return strings.Split(strings.TrimSpace(s), "\n")
	}
	r := consume("--subject", "orders.*.fr.>", "--from-beginning", "--format", "%k=%v %h\n")
	got := lines(r.stdout)
	if len(got) != 4 || !strings.Contains(r.stderr, "Processed a total of 4 messages") {
		t.Fatalf("orders.*.fr.>: %q\n%s", got, r.stderr)
	}
	for _, l := range got {
		if !strings.Contains(l, "orders.eu.fr.") || !strings.Contains(l, "stele-subject=orders.eu.fr.") {
			t.Fatalf("orders.*.fr.> printed %q", l)
		}
	}
	if got := lines(consume("--subject", "orders.>", "--from-beginning", "--max-messages", "3").stdout); len(got) != 3 {
		t.Fatalf("--max-messages 3: %q", got)
	}
	r = consume("--subject", "orders.us.>", "--from-beginning", "--output", "json")
	var rec struct {
		Topic string `json:"topic"`
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	if got := lines(r.stdout); len(got) != 2 || json.Unmarshal([]byte(got[0]), &rec) != nil || rec.Topic != "orders" || rec.Value != "orders.us.ny.paid" {
		t.Fatalf("--output json: %q", got)
	}
	p0 := lines(consume("--subject", ">", "--partition", "0", "--offset", "0", "--format", "%p\n").stdout)
	p1 := lines(consume("--subject", ">", "--partition", "1", "--offset", "earliest", "--format", "%p\n").stdout)
	if len(p0)+len(p1) != 8 || (len(p0) > 0 && p0[0] != "0") || (len(p1) > 0 && p1[0] != "1") {
		t.Fatalf("partitions 0 and 1 from their start: %q %q", p0, p1)
	}
	if got := lines(consume("--subject", "orders.>").stdout); len(got) != 0 {
		t.Fatalf("from the end, with nothing new: %q", got)
	}

	// A topic whose subjects come from its JSON values.
	c.ok("", "topic", "create", "events", "--config", "stele.subject.from=json:/type")
	c.ok(`{"type": "user.signup", "id": 1}`+"\n"+`{"type": "user.login", "id": 2}`+"\n"+`{"id": 3}`+"\n", "produce", "events")
	if got := lines(consumeFrom("events", "--subject", "user.signup", "--from-beginning").stdout); len(got) != 1 || !strings.Contains(got[0], `"id": 1`) {
		t.Fatalf("events user.signup: %q", got)
	}
	if r := c.run(`{"type": 7}`+"\n", "produce", "events"); r.code == ExitOK || !strings.Contains(r.stderr, "INVALID_RECORD") {
		t.Fatalf("a JSON subject that is a number: exit %d: %s", r.code, r.stderr)
	}

	// subject list.
	list := func(args ...string) result {
		t.Helper()
		return c.ok("", append([]string{"subject", "list", "--http", cfg.HTTPAddr}, args...)...)
	}
	want := "SUBJECT\tRECORDS\norders.eu.de.created\t2\norders.eu.fr.created\t2\norders.eu.fr.paid\t2\norders.us.ny.paid\t2\n"
	if r := list("orders"); r.stdout != want {
		t.Fatalf("subject list:\n%s\nwant\n%s", r.stdout, want)
	}
	if r := list("orders", "--prefix", "orders.eu.fr", "--limit", "1"); r.stdout != "SUBJECT\tRECORDS\norders.eu.fr.created\t2\norders.eu.fr.paid\t2\n" {
		t.Fatalf("subject list --prefix orders.eu.fr, a page at a time:\n%s", r.stdout)
	}
	var sc httpapi.SubjectCount
	if r := list("events", "--output", "json"); json.Unmarshal([]byte(lines(r.stdout)[0]), &sc) != nil || sc.Subject != "user.login" || sc.Records != 1 {
		t.Fatalf("subject list --output json: %s", r.stdout)
	}

	// Bad input.
	for _, args := range [][]string{
		{"consume", "orders", "--subject", "orders..x"},
		{"consume", "orders", "--subject", "ord*"},
		{"consume", "orders", "--subject", "a", "--group", "g"},
		{"consume", "orders", "--subject", "a", "--isolation", "read_uncommitted"},
		{"subject", "list", "orders", "--prefix", "a.>"},
		{"subject", "list", "orders", "--limit", "0"},
	} {
		if r := c.run("", args...); r.code != ExitUsage {
			t.Errorf("stele %s: exit %d, want %d: %s", strings.Join(args, " "), r.code, ExitUsage, r.stderr)
		}
	}
	if r := c.run("", "subject", "list", "nope", "--http", cfg.HTTPAddr); r.code != ExitFailure || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("subject list of a missing topic: exit %d: %s", r.code, r.stderr)
	}
}
