package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDeprecatedTopicConfigs: every topic config Kafka 3.9's LogConfig
// defines is accepted, validated as Kafka validates it, stored and
// described, the deprecated message.format.version and
// message.downconversion.enable included (issue 27).
func TestDeprecatedTopicConfigs(t *testing.T) {
	addr := newTestBroker(t)
	adm, _ := admin(t, addr)

	set := map[string]*string{
		"message.format.version":                  kadm.StringPtr("2.8"),
		"message.downconversion.enable":           kadm.StringPtr("false"),
		"message.timestamp.before.max.ms":         kadm.StringPtr("3600000"),
		"message.timestamp.after.max.ms":          kadm.StringPtr("60000"),
		"compression.gzip.level":                  kadm.StringPtr("5"),
		"compression.lz4.level":                   kadm.StringPtr("12"),
		"compression.zstd.level":                  kadm.StringPtr("-5"),
		"leader.replication.throttled.replicas":   kadm.StringPtr("0:1,1:2"),
		"follower.replication.throttled.replicas": kadm.StringPtr("*"),
		"local.retention.ms":                      kadm.StringPtr("-2"),
		"local.retention.bytes":                   kadm.StringPtr("1000"),
		"remote.storage.enable":                   kadm.StringPtr("false"),
		"remote.log.copy.disable":                 kadm.StringPtr("false"),
		"remote.log.delete.on.disable":            kadm.StringPtr("false"),
	}
	mustCreate(t, adm, 1, set, "legacy")

	rcs, err := adm.DescribeTopicConfigs(ctx(t), "legacy")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("legacy", nil)
	for name, v := range set {
		c := configOf(t, rc, name)
		if c.MaybeValue() != *v || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("%s: %+v", name, c)
		}
	}
	mustCreate(t, adm, 1, nil, "plain")
	rcs, _ = adm.DescribeTopicConfigs(ctx(t), "plain")
	rc, _ = rcs.On("plain", nil)
	for name, def := range map[string]string{"message.format.version": "3.0-IV1", "compression.gzip.level": "-1",
		"compression.zstd.level": "3", "local.retention.ms": "-2", "message.downconversion.enable": "true"} {
		if c := configOf(t, rc, name); c.MaybeValue() != def || c.Source != kmsg.ConfigSourceDefaultConfig {
			t.Errorf("%s default: %+v", name, c)
		}
	}
	if c := configOf(t, rc, "message.format.version"); len(c.Synonyms) != 1 || c.Synonyms[0].Key != "log.message.format.version" {
		t.Errorf("message.format.version synonyms: %+v", c.Synonyms)
	}

	// IncrementalAlterConfigs sets and deletes them like any other.
	alter := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "message.format.version", Value: kadm.StringPtr("0.10.2.1")}}
	if rs, err := adm.AlterTopicConfigs(ctx(t), alter, "plain"); err != nil || rs[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, rs)
	}

	bad := []struct {
		name, value, msg string
	}{
		{"message.format.version", "4.7", "Version 4.7 is not a valid version"},
		{"message.format.version", "", "is not a valid version"},
		{"compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"},
		{"compression.lz4.level", "18", "no more than 17"},
		{"compression.zstd.level", "-131073", "at least -131072"},
		{"leader.replication.throttled.replicas", "0-1", "[partitionId]:[brokerId]"},
		{"local.retention.bytes", "-3", "at least -2"},
		{"message.timestamp.after.max.ms", "-1", "at least 0"},
		{"remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"},
		{"message.downconversion.enable", "yes", "true or false"},
	}
	for _, tc := range bad {
		rs, err := adm.CreateTopics(ctx(t), 1, -1, map[string]*string{tc.name: kadm.StringPtr(tc.value)}, "refused")
		if err != nil {
			t.Fatal(err)
		}
		r := rs["refused"]
		if !errors.Is(r.Err, kerr.InvalidConfig) || !strings.Contains(r.ErrMessage, tc.msg) {
			t.Errorf("%s=%q: %v %q, want INVALID_CONFIG with %q", tc.name, tc.value, r.Err, r.ErrMessage, tc.msg)
		}
	}
}
