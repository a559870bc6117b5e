package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestViewCLI: against a real node (docs/subjects.md, views), `stele view
// create` makes a view of its sources' records whose subject matches, with
// the sources' partitions (one under global order); `view list` and `view
// describe` show it, its offsets growing as matching records are produced;
// any Kafka consumer reads it, each record with its stele-source header; a
// produce to it is refused; `view delete` refuses a topic that is not a
// view; a source is deleted only with --cascade, which deletes its views
// first in the same request.
func TestViewCLI(t *testing.T) {
	_, n := startStele(t)
	c := &testCluster{t: t, brokers: n.KafkaAddr()}
	c.ok("", "topic", "create", "orders", "--partitions", "2")
	c.ok("", "topic", "create", "audit", "--partitions", "3")

	// create, text and JSON.
	r := c.ok("", "view", "create", "fr", "--from", "orders, audit", "--subject", "orders.*.fr.>")
	if want := "Created view \"fr\" of orders, audit (subject orders.*.fr.>, partition order, 3 partitions).\n"; r.stdout != want {
		t.Fatalf("view create:\n%s\nwant\n%s", r.stdout, want)
	}
	var created viewCreated
	decodeJSON(t, c.ok("", "view", "create", "all", "--from", "orders", "--order", "global", "--output", "json").stdout, &created)
	if created.View != "all" || created.ID == "" || strings.Join(created.From, ",") != "orders" || created.Subject != ">" ||
		created.Order != "global" || created.Partitions != 1 {
		t.Fatalf("view create --output json: %+v", created)
	}
	for _, args := range [][]string{
		{"view", "create", "x"},
		{"view", "create", "x", "--from", " , "},
		{"view", "create", "x", "--from", "orders", "--order", "random"},
		{"view", "create", "x", "--from", "orders", "--subject", "orders..x"},
	} {
		if r := c.run("", args...); r.code != ExitUsage {
			t.Errorf("stele %s: exit %d, want %d: %s", strings.Join(args, " "), r.code, ExitUsage, r.stderr)
		}
	}
	wantFailure(t, c.run("", "view", "create", "x", "--from", "nope"), ExitFailure, "UNKNOWN_TOPIC_OR_PARTITION", "nope")

	// list.
	r = c.ok("", "view", "list")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 ||
		strings.Join(strings.Fields(lines[0]), " ") != "NAME FROM SUBJECT ORDER PARTITIONS" ||
		strings.Join(strings.Fields(lines[1]), " ") != "all orders > global 1" ||
		strings.Join(strings.Fields(lines[2]), " ") != "fr orders,audit orders.*.fr.> partition 3" {
		t.Fatalf("view list:\n%s", r.stdout)
	}
	var listed []viewListed
	decodeJSON(t, c.ok("", "view", "list", "--output", "json").stdout, &listed)
	if len(listed) != 2 || listed[1].View != "fr" || listed[1].Partitions != 3 || listed[1].Order != "partition" {
		t.Fatalf("view list --output json: %+v", listed)
	}

	// Records: 6 of orders and 2 of audit match orders.*.fr.>; all 12 of
	// orders reach the global view.
	for _, s := range []string{"orders.eu.fr.created", "orders.eu.de.created", "orders.us.ny.paid", "orders.eu.fr.paid"} {
		c.ok("k1:"+s+"\nk2:"+s+"\nk3:"+s+"\n", "produce", "orders", "--key-separator", ":", "--header", "stele-subject="+s)
	}
	c.ok("a1:orders.eu.fr.audited\na2:orders.eu.fr.audited\n", "produce", "audit", "--key-separator", ":", "--header", "stele-subject=orders.eu.fr.audited")
	c.ok("a3:unrelated\n", "produce", "audit", "--key-separator", ":", "--header", "stele-subject=billing.eu.fr.x")

	// describe: every partition, offsets summing to the records copied.
	eventually(t, 10*time.Second, func() error {
		var ds []viewDescribed
		decodeJSON(t, c.ok("", "view", "describe", "fr", "all", "--output", "json").stdout, &ds)
		if len(ds) != 2 || ds[0].View != "all" || ds[1].View != "fr" || len(ds[0].Partitions) != 1 || len(ds[1].Partitions) != 3 {
			return fmt.Errorf("view describe fr all: %+v", ds)
		}
		for i, want := range []int64{12, 8} {
			var sum int64
			for _, p := range ds[i].Partitions {
				if p.LogStartOffset != 0 || p.Error != "" {
					return fmt.Errorf("view %s partition %+v", ds[i].View, p)
				}
				sum += p.LogEndOffset
			}
			if sum != want {
				return fmt.Errorf("view %s: %d records, want %d", ds[i].View, sum, want)
			}
		}
		return nil
	})
	r = c.ok("", "view", "describe", "all")
	if !strings.HasPrefix(r.stdout, "View: all\tFrom: orders\tSubject: >\tOrder: global\tPartitions: 1\nPARTITION") ||
		!strings.Contains(r.stdout, "12") {
		t.Fatalf("view describe all:\n%s", r.stdout)
	}
	wantFailure(t, c.run("", "view", "describe", "orders"), ExitFailure, `topic "orders" is not a view`)
	wantFailure(t, c.run("", "view", "describe", "nope"), ExitFailure, `topic "nope" does not exist`)

	// A Kafka consumer reads the view: only the matching records, each
	// with the source record it copies.
	r = c.ok("", "consume", "fr", "--from-beginning", "--timeout-idle", "2s", "--format", "%v %h\n")
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != 8 {
		t.Fatalf("consume fr: %d records, want 8:\n%s", len(got), r.stdout)
	}
	for _, l := range got {
		if !strings.Contains(l, "orders.eu.fr.") || !strings.Contains(l, "stele-source=") ||
			!(strings.Contains(l, "stele-source=orders/") || strings.Contains(l, "stele-source=audit/")) {
			t.Fatalf("consume fr printed %q", l)
		}
	}

	// A view is read-only; a topic that is not a view is not deleted as one.
	wantFailure(t, c.run("x\n", "produce", "fr"), ExitFailure, "INVALID_TOPIC_EXCEPTION")
	wantFailure(t, c.run("", "view", "delete", "orders"), ExitFailure, `topic "orders" is not a view`)
	c.ok("", "view", "delete", "nope", "--if-exists")
	wantFailure(t, c.run("", "view", "delete", "nope"), ExitFailure, `topic "nope" does not exist`)
	c.ok("", "view", "create", "tmp", "--from", "audit")
	if r := c.ok("", "view", "delete", "tmp"); r.stdout != "Deleted view \"tmp\".\n" {
		t.Fatalf("view delete tmp: %q", r.stdout)
	}

	// A source is deleted only after its views.
	wantFailure(t, c.run("", "topic", "delete", "orders"), ExitFailure, "POLICY_VIOLATION", "source of the view(s) all, fr", "--cascade")
	r = c.ok("", "topic", "delete", "orders", "--cascade")
	if want := "Deleted view \"all\" (a view of orders).\nDeleted view \"fr\" (a view of orders, audit).\nDeleted topic \"orders\".\n"; r.stdout != want {
		t.Fatalf("topic delete orders --cascade:\n%s\nwant\n%s", r.stdout, want)
	}
	if r := c.ok("", "view", "list", "--output", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("view list after the cascade: %s", r.stdout)
	}
	if r := c.ok("", "topic", "list"); strings.Contains(r.stdout, "orders") || !strings.Contains(r.stdout, "audit") {
		t.Fatalf("topic list after the cascade:\n%s", r.stdout)
	}
}
