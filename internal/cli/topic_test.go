package cli

import (
	"strings"
	"testing"
)

// The whole kafka-topics.sh lifecycle: create, list, describe, alter, delete.
func TestTopicLifecycle(t *testing.T) {
	c := newTestCluster(t)

	r := c.ok("", "topic", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000")
	if !strings.Contains(r.stdout, `Created topic "orders" (3 partitions`) {
		t.Errorf("create output: %q", r.stdout)
	}

	// Creating it again fails with the Kafka error by name, unless --if-not-exists.
	wantFailure(t, c.run("", "topic", "create", "orders"), ExitFailure, `create topic "orders"`, "TOPIC_ALREADY_EXISTS")
	r = c.ok("", "topic", "create", "orders", "--if-not-exists")
	if !strings.Contains(r.stdout, "already exists") {
		t.Errorf("--if-not-exists output: %q", r.stdout)
	}

	// --validate-only creates nothing.
	c.ok("", "topic", "create", "ghost", "--validate-only", "--partitions", "2")

	var listed []topicListed
	decodeJSON(t, c.ok("", "topic", "list", "--output", "json").stdout, &listed)
	if len(listed) != 1 || listed[0].Topic != "orders" || listed[0].Partitions != 3 || listed[0].ReplicationFactor != 1 {
		t.Fatalf("topic list = %+v, want only orders with 3 partitions", listed)
	}
	if r := c.ok("", "topic", "list"); !strings.Contains(r.stdout, "TOPIC") || !strings.Contains(r.stdout, "orders") {
		t.Errorf("table list: %q", r.stdout)
	}

	var described []topicDescribed
	decodeJSON(t, c.ok("", "topic", "describe", "orders", "--output", "json").stdout, &described)
	if len(described) != 1 {
		t.Fatalf("describe returned %d topics", len(described))
	}
	d := described[0]
	if len(d.Partitions) != 3 || d.ID == "" {
		t.Errorf("describe = %+v, want 3 partitions and an ID", d)
	}
	for i, p := range d.Partitions {
		if p.Partition != int32(i) || p.Leader != 0 || len(p.Replicas) != 1 || len(p.ISR) != 1 ||
			p.LogStartOffset != 0 || p.LogEndOffset != 0 {
			t.Errorf("partition %d = %+v", i, p)
		}
	}
	if v := d.Configs["retention.ms"]; v == nil || *v != "60000" || len(d.Configs) != 1 {
		t.Errorf("describe configs = %v, want only the override retention.ms=60000", d.Configs)
	}
	r = c.ok("", "topic", "describe", "orders")
	for _, want := range []string{"Topic: orders", "Partitions: 3", "retention.ms=60000", "LOG-END"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table describe lacks %q:\n%s", want, r.stdout)
		}
	}

	// Alter: grow partitions, set one override, remove another.
	c.ok("", "topic", "alter", "orders", "--partitions", "5", "--config", "cleanup.policy=compact",
		"--delete-config", "retention.ms")
	described = nil
	decodeJSON(t, c.ok("", "topic", "describe", "orders", "--output", "json").stdout, &described)
	d = described[0]
	if len(d.Partitions) != 5 {
		t.Errorf("after alter: %d partitions, want 5", len(d.Partitions))
	}
	if v := d.Configs["cleanup.policy"]; v == nil || *v != "compact" || d.Configs["retention.ms"] != nil {
		t.Errorf("after alter configs = %v, want cleanup.policy=compact only", d.Configs)
	}
	// Shrinking is refused by the broker.
	wantFailure(t, c.run("", "topic", "alter", "orders", "--partitions", "2"), ExitFailure, "INVALID_PARTITIONS")

	r = c.ok("", "topic", "delete", "orders")
	if !strings.Contains(r.stdout, `Deleted topic "orders"`) {
		t.Errorf("delete output: %q", r.stdout)
	}
	listed = nil
	decodeJSON(t, c.ok("", "topic", "list", "--output", "json").stdout, &listed)
	if len(listed) != 0 {
		t.Errorf("after delete, list = %+v", listed)
	}
	wantFailure(t, c.run("", "topic", "delete", "orders"), ExitFailure, `topic "orders" does not exist`)
	c.ok("", "topic", "delete", "orders", "--if-exists")
}

func TestTopicDescribeUnknown(t *testing.T) {
	c := newTestCluster(t, "known")
	r := c.run("", "topic", "describe", "known", "missing", "--output", "json")
	wantFailure(t, r, ExitFailure, `topic "missing" does not exist`)
	// The topics that exist are still described.
	var described []topicDescribed
	decodeJSON(t, r.stdout, &described)
	if len(described) != 1 || described[0].Topic != "known" {
		t.Errorf("described = %+v, want only known", described)
	}
	wantFailure(t, c.run("", "topic", "alter", "missing", "--config", "retention.ms=1"), ExitFailure,
		`topic "missing" does not exist`)
	wantFailure(t, c.run("", "topic", "alter", "missing", "--partitions", "4"), ExitFailure,
		`topic "missing" does not exist`)
}

func TestTopicUsageErrors(t *testing.T) {
	c := newTestCluster(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "create"}, "missing NAME argument"},
		{[]string{"topic", "create", "x", "--partitions", "0"}, "invalid --partitions 0"},
		{[]string{"topic", "create", "x", "--config", "novalue"}, "want key=value"},
		{[]string{"topic", "create", "x", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"topic", "create", "x", "--partitions", "many"}, `invalid argument "many"`},
		{[]string{"topic", "craete", "x"}, `unknown command "craete" for "stele topic"; did you mean "create"?`},
		{[]string{"topic", "alter", "x"}, "nothing to alter"},
		{[]string{"topic", "alter", "x", "--config", "a=1", "--delete-config", "a"}, "both set"},
		{[]string{"topic", "delete"}, "missing NAME argument (one or more)"},
		{[]string{"topic", "list", "--output", "xml"}, "must be one of table|json"},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for "stele"`},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			wantFailure(t, c.run("", tc.args...), ExitUsage, tc.want, "--help' for usage")
		})
	}
}

// With no subcommand a group prints its help and succeeds.
func TestGroupHelp(t *testing.T) {
	r := runCLI(t.Context(), "", "topic")
	if r.code != ExitOK || !strings.Contains(r.stdout, "create") || !strings.Contains(r.stdout, "describe") {
		t.Errorf("stele topic: exit %d, stdout %q", r.code, r.stdout)
	}
}
