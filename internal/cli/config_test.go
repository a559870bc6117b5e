package cli

import (
	"reflect"
	"strings"
	"testing"
)

// kafka-configs.sh --describe / --alter on a topic, with both spellings of
// the alter flags.
func TestConfigTopic(t *testing.T) {
	c := newTestCluster(t, "orders")

	// No overrides yet: without --all nothing is listed.
	var d configsDescribed
	decodeJSON(t, c.ok("", "config", "describe", "--topic", "orders", "--output", "json").stdout, &d)
	if d.Resource != "topic" || d.Name != "orders" || len(d.Configs) != 0 {
		t.Fatalf("describe before alter = %+v", d)
	}

	c.ok("", "config", "alter", "--topic", "orders", "--set", "retention.ms=1000",
		"--add-config", "cleanup.policy=[compact,delete],segment.ms=5000")
	d = configsDescribed{}
	decodeJSON(t, c.ok("", "config", "describe", "--topic", "orders", "--output", "json").stdout, &d)
	got := map[string]string{}
	for _, e := range d.Configs {
		if e.Source != "DYNAMIC_TOPIC_CONFIG" || e.ReadOnly || e.Sensitive || e.Default || e.Value == nil {
			t.Errorf("entry %+v", e)
			continue
		}
		got[e.Name] = *e.Value
	}
	want := map[string]string{"retention.ms": "1000", "cleanup.policy": "compact,delete", "segment.ms": "5000"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("overrides = %v, want %v", got, want)
	}

	// --all adds the defaults; the table shows the source.
	r := c.ok("", "config", "describe", "--topic", "orders", "--all")
	for _, s := range []string{"SOURCE", "retention.ms", "DYNAMIC_TOPIC_CONFIG", "max.message.bytes", "DEFAULT_CONFIG"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("--all table lacks %q:\n%s", s, r.stdout)
		}
	}

	c.ok("", "config", "alter", "--topic", "orders", "--delete", "retention.ms", "--delete-config", "segment.ms,cleanup.policy")
	d = configsDescribed{}
	decodeJSON(t, c.ok("", "config", "describe", "--topic", "orders", "--output", "json").stdout, &d)
	if len(d.Configs) != 0 {
		t.Errorf("after deletes: %+v", d.Configs)
	}
}

// Broker configs: read-only and sensitive flags come from the broker.
func TestConfigBroker(t *testing.T) {
	c := newTestCluster(t)
	var d configsDescribed
	decodeJSON(t, c.ok("", "config", "describe", "--broker", "0", "--all", "--output", "json").stdout, &d)
	byName := map[string]configEntry{}
	for _, e := range d.Configs {
		byName[e.Name] = e
	}
	if e := byName["super.users"]; !e.Sensitive || e.Value != nil || !e.ReadOnly {
		t.Errorf("super.users = %+v, want sensitive, read-only, no value", e)
	}
	if e := byName["log.retention.ms"]; e.ReadOnly || e.Source != "DEFAULT_CONFIG" {
		t.Errorf("log.retention.ms = %+v", e)
	}

	c.ok("", "config", "alter", "--broker", "0", "--set", "log.retention.ms=1000")
	d = configsDescribed{}
	decodeJSON(t, c.ok("", "config", "describe", "--broker", "0", "--output", "json").stdout, &d)
	if len(d.Configs) != 1 || d.Configs[0].Name != "log.retention.ms" || *d.Configs[0].Value != "1000" ||
		d.Configs[0].Source != "DYNAMIC_BROKER_CONFIG" {
		t.Errorf("dynamic broker configs = %+v", d.Configs)
	}
	wantFailure(t, c.run("", "config", "describe", "--broker", "7"), ExitFailure, "broker 7")

	// The cluster-wide defaults (kafka-configs.sh --entity-default): kfake
	// takes the change on the empty broker name and describes every broker
	// config with a source of its own, so only the change and the request
	// are checked here; internal/kafka's TestClusterLogDefaults checks
	// Stele's answers.
	c.ok("", "config", "alter", "--broker-default", "--set", "log.segment.bytes=2000")
	d = configsDescribed{}
	decodeJSON(t, c.ok("", "config", "describe", "--broker-default", "--all", "--output", "json").stdout, &d)
	found := false
	for _, e := range d.Configs {
		found = found || e.Name == "log.segment.bytes" && e.Value != nil && *e.Value == "2000"
	}
	if !found || d.Name != "" || d.Resource != "broker" {
		t.Errorf("cluster-wide defaults = %+v, want log.segment.bytes=2000", d)
	}
}

func TestConfigUsageErrors(t *testing.T) {
	c := newTestCluster(t, "t")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "describe"}, "--topic NAME, --broker ID, --broker-default or --group NAME"},
		{[]string{"config", "describe", "--broker-default", "--broker", "0"}, "one of --topic, --broker and --broker-default"},
		{[]string{"config", "describe", "--topic", "t", "--broker", "0"}, "not both"},
		{[]string{"config", "describe", "--broker", "-3"}, "invalid --broker -3"},
		{[]string{"config", "alter", "--topic", "t"}, "nothing to alter"},
		{[]string{"config", "alter", "--topic", "t", "--set", "a"}, "want key=value"},
		{[]string{"config", "alter", "--topic", "t", "--add-config", "a=1=2"}, "key=val or key=[val1,val2]"},
		{[]string{"config", "alter", "--topic", "t", "--set", "a=1", "--add-config", "a=2"}, "given twice"},
		{[]string{"config", "alter", "--topic", "t", "--delete", ""}, "needs a config name"},
		{[]string{"config", "describe", "extra", "--topic", "t"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			wantFailure(t, c.run("", tc.args...), ExitUsage, tc.want)
		})
	}
}

func TestParseKafkaAddConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "a=1", want: []string{"a=1"}},
		{in: "a=1,b=2", want: []string{"a=1", "b=2"}},
		{in: "cleanup.policy=[compact,delete],x = y", want: []string{"cleanup.policy=compact,delete", "x=y"}},
		{in: "a=", want: []string{"a="}},
		{in: "a", bad: true},
		{in: "=1", bad: true},
		{in: "a=1=2", bad: true},
		{in: "a=1,,b=2", bad: true},
	} {
		got, err := parseKafkaAddConfig(tc.in)
		if tc.bad != (err != nil) || !tc.bad && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseKafkaAddConfig(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func FuzzParseKafkaAddConfig(f *testing.F) {
	for _, s := range []string{"a=1", "a=[1,2],b=3", "[[", "]]=,", "a=1=2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kvs, err := parseKafkaAddConfig(s)
		if err != nil {
			return
		}
		// Everything accepted is a key=value that --set accepts too.
		if _, err := parseConfigs(kvs, "--set"); err != nil && !strings.Contains(err.Error(), "given twice") {
			t.Fatalf("parseKafkaAddConfig(%q) = %q, which --set rejects: %v", s, kvs, err)
		}
	})
}
