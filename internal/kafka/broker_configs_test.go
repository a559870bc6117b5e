package kafka

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/loglevel"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// alterLoggers sends IncrementalAlterConfigs for BROKER_LOGGER resource
// name, as kafka-configs.sh --entity-type broker-loggers does, straight to
// addr (a client would route another node's resource to that node).
func alterLoggers(t *testing.T, addr string, name string, validateOnly bool, ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) kmsg.IncrementalAlterConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Version = 1
	req.ValidateOnly = validateOnly
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName, rr.Configs = kmsg.ConfigResourceTypeBrokerLogger, name, ops
	req.Resources = append(req.Resources, rr)
	return versioned(t, addr, req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
}

func loggerOp(op kmsg.IncrementalAlterConfigOp, name string, value *string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Op, c.Name, c.Value = op, name, value
	return c
}

// TestBrokerLoggers: BROKER_LOGGER changes a component's log level at run
// time and DescribeConfigs reports it (KIP-412), with Kafka's errors.
func TestBrokerLoggers(t *testing.T) {
	var out syncBuffer
	levels := loglevel.New(slog.LevelInfo)
	log := slog.New(levels.Handler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug - 1000})))
	tb := startTestBroker(t, func(o *Options) { o.Logger, o.LogLevels = log.With("component", "kafka"), levels })
	fsmLog := log.With("component", "fsm")
	cl := client(t, tb.addr)

	describe := func() map[string]kmsg.DescribeConfigsResponseResourceConfig {
		t.Helper()
		req := kmsg.NewPtrDescribeConfigsRequest()
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, "0"
		req.Resources = append(req.Resources, rr)
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("describe loggers: %v %+v", err, resp)
		}
		m := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range resp.Resources[0].Configs {
			m[c.Name] = c
		}
		return m
	}
	ls := describe()
	if ls["root"].Value == nil || *ls["root"].Value != "INFO" || ls["root"].Source != kmsg.ConfigSourceDynamicBrokerLoggerConfig || ls["root"].ReadOnly {
		t.Fatalf("root logger: %+v", ls["root"])
	}
	if ls["fsm"].Value == nil || *ls["fsm"].Value != "INFO" {
		t.Fatalf("fsm logger: %+v", ls["fsm"])
	}

	fsmLog.Debug("hidden")
	if r := alterLoggers(t, tb.addr, "0", true, loggerOp(kmsg.IncrementalAlterConfigOpSet, "fsm", kmsg.StringPtr("DEBUG"))); r.ErrorCode != 0 {
		t.Fatalf("validate: %+v", r)
	}
	fsmLog.Debug("still hidden")
	if r := alterLoggers(t, tb.addr, "0", false, loggerOp(kmsg.IncrementalAlterConfigOpSet, "fsm", kmsg.StringPtr("DEBUG"))); r.ErrorCode != 0 {
		t.Fatalf("set: %+v", r)
	}
	fsmLog.Debug("shown")
	log.With("component", "kafka").Debug("kafka stays at INFO")
	if s := out.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "shown") || strings.Contains(s, "stays") {
		t.Fatalf("log output:\n%s", s)
	}
	if ls := describe(); *ls["fsm"].Value != "DEBUG" || *ls["kafka"].Value != "INFO" {
		t.Fatalf("after set: fsm %v kafka %v", *ls["fsm"].Value, *ls["kafka"].Value)
	}
	if r := alterLoggers(t, tb.addr, "0", false, loggerOp(kmsg.IncrementalAlterConfigOpDelete, "fsm", nil)); r.ErrorCode != 0 {
		t.Fatalf("delete: %+v", r)
	}
	fsmLog.Debug("gone again")
	if strings.Contains(out.String(), "gone again") {
		t.Fatal("a deleted level still applies")
	}

	for _, tc := range []struct {
		name, resource string
		op             kmsg.IncrementalAlterConfigsRequestResourceConfig
		code           int16
		msg            string
	}{
		{"unknown logger", "0", loggerOp(kmsg.IncrementalAlterConfigOpSet, "nope", kmsg.StringPtr("INFO")), kerr.InvalidConfig.Code, "Logger nope does not exist!"},
		{"bad level", "0", loggerOp(kmsg.IncrementalAlterConfigOpSet, "fsm", kmsg.StringPtr("LOUD")), kerr.InvalidConfig.Code, "not a supported log level"},
		{"delete root", "0", loggerOp(kmsg.IncrementalAlterConfigOpDelete, "root", nil), kerr.InvalidRequest.Code, "root logger is not allowed"},
		{"append", "0", loggerOp(kmsg.IncrementalAlterConfigOpAppend, "fsm", kmsg.StringPtr("INFO")), kerr.InvalidRequest.Code, "APPEND operation is not allowed"},
		{"other node", "3", loggerOp(kmsg.IncrementalAlterConfigOpSet, "fsm", kmsg.StringPtr("INFO")), kerr.InvalidRequest.Code, "Unexpected node id"},
		{"not a number", "x", loggerOp(kmsg.IncrementalAlterConfigOpSet, "fsm", kmsg.StringPtr("INFO")), kerr.InvalidRequest.Code, "Node id must be an integer"},
	} {
		if r := alterLoggers(t, tb.addr, tc.resource, false, tc.op); r.ErrorCode != tc.code || !strings.Contains(*r.ErrorMessage, tc.msg) {
			t.Errorf("%s: %d %v, want %d with %q", tc.name, r.ErrorCode, r.ErrorMessage, tc.code, tc.msg)
		}
	}
}

// TestAlterBrokerConfigs: BROKER resources answer as Kafka 3.9 does for
// configs it cannot change at run time, and say which dynamic ones Stele
// cannot change yet; kadm's AlterBrokerConfigs is the client.
func TestAlterBrokerConfigs(t *testing.T) {
	addr := newTestBroker(t)
	adm, _ := admin(t, addr)

	set := func(name, value string) []kadm.AlterConfig {
		return []kadm.AlterConfig{{Op: kadm.SetConfig, Name: name, Value: kadm.StringPtr(value)}}
	}
	for _, tc := range []struct {
		name    string
		configs []kadm.AlterConfig
		brokers []int32 // none: the cluster-wide default
		msg     string
	}{
		{"read-only, per broker", set("log.dirs", "/elsewhere"), []int32{0}, "Cannot update these configs dynamically: Set(log.dirs)"},
		{"read-only, cluster default", set("num.partitions", "3"), nil, "Cannot update these configs dynamically: Set(num.partitions)"},
		{"dynamic in Kafka", set("listener.name.external.ssl.keystore.location", "/k.jks"), []int32{0}, "in Stele yet"},
		{"a listener's connection creation rate", set("listener.name.PLAINTEXT.max.connection.creation.rate", "10"), nil, "in Stele yet"},
		{"a log default for one broker", set("log.retention.ms", "1000"), []int32{0}, "set them as the cluster-wide default"},
		{"a log default Kafka keeps read-only", set("log.retention.hours", "1"), nil, "Cannot update these configs dynamically: Set(log.retention.hours)"},
	} {
		rs, err := adm.AlterBrokerConfigs(ctx(t), tc.configs, tc.brokers...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(rs) != 1 || !errors.Is(rs[0].Err, kerr.InvalidRequest) || !strings.Contains(rs[0].ErrMessage, tc.msg) {
			t.Errorf("%s: %+v, want INVALID_REQUEST with %q", tc.name, rs, tc.msg)
		}
	}
	other := kmsg.NewPtrIncrementalAlterConfigsRequest()
	other.Version = 1
	or := kmsg.NewIncrementalAlterConfigsRequestResource()
	or.ResourceType, or.ResourceName = kmsg.ConfigResourceTypeBroker, "5"
	other.Resources = append(other.Resources, or)
	if r := versioned(t, addr, other).(*kmsg.IncrementalAlterConfigsResponse).Resources[0]; r.ErrorCode != kerr.InvalidRequest.Code ||
		!strings.Contains(*r.ErrorMessage, "Unexpected broker id") {
		t.Errorf("another broker: %+v", r)
	}
	if rs, err := adm.AlterBrokerConfigs(ctx(t), nil, 0); err != nil || rs[0].Err != nil {
		t.Errorf("no change: %v %+v", err, rs)
	}
	// The legacy AlterConfigs does not know BROKER_LOGGER (Kafka: unknown type 8).
	req := kmsg.NewPtrAlterConfigsRequest()
	rr := kmsg.NewAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, "0"
	req.Resources = append(req.Resources, rr)
	resp := versioned(t, addr, req).(*kmsg.AlterConfigsResponse)
	if r := resp.Resources[0]; r.ErrorCode != kerr.InvalidRequest.Code || !strings.Contains(*r.ErrorMessage, "Unknown resource type 8") {
		t.Errorf("legacy BROKER_LOGGER: %+v", r)
	}
}

// describedConfig returns the named config of a described resource.
func describedConfig(t *testing.T, rs kadm.ResourceConfigs, err error, resource, name string) kadm.Config {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Name != resource {
			continue
		}
		if r.Err != nil {
			t.Fatalf("describing %q: %v %s", resource, r.Err, r.ErrMessage)
		}
		for _, c := range r.Configs {
			if c.Key == name {
				return c
			}
		}
	}
	return kadm.Config{}
}

// TestClusterLogDefaults: a log.* default set on the cluster-wide BROKER
// resource (kafka-configs.sh --entity-type brokers --entity-default) is
// described there and on the broker as DYNAMIC_DEFAULT_BROKER_CONFIG, is
// inherited by a topic that does not set the config and not by one that
// does; validate_only changes nothing; a bad value is INVALID_REQUEST;
// APPEND edits a list; the legacy AlterConfigs replaces the whole set.
func TestClusterLogDefaults(t *testing.T) {
	addr := newTestBroker(t)
	adm, _ := admin(t, addr)
	set := func(name, value string) kadm.AlterConfig {
		return kadm.AlterConfig{Op: kadm.SetConfig, Name: name, Value: kadm.StringPtr(value)}
	}
	check := func(what string, rs kadm.AlterConfigsResponses, err error, want error) {
		t.Helper()
		if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, want) && !(want == nil && rs[0].Err == nil) {
			t.Fatalf("%s: %v %+v, want %v", what, err, rs, want)
		}
	}
	if _, err := adm.CreateTopic(ctx(t), 1, -1, nil, "early"); err != nil {
		t.Fatal(err)
	}
	rs, err := adm.ValidateAlterBrokerConfigs(ctx(t), []kadm.AlterConfig{set("log.retention.ms", "5000")})
	check("validate only", rs, err, nil)
	if d, err := adm.DescribeBrokerConfigs(ctx(t)); err != nil || len(d) != 1 || len(d[0].Configs) != 0 {
		t.Fatalf("after validate_only: %+v %v, want no defaults", d, err)
	}
	rs, err = adm.AlterBrokerConfigs(ctx(t), []kadm.AlterConfig{set("log.retention.ms", "soon")})
	check("bad value", rs, err, kerr.InvalidRequest)
	rs, err = adm.AlterBrokerConfigs(ctx(t), []kadm.AlterConfig{set("log.retention.ms", "5000"),
		{Op: kadm.AppendConfig, Name: "log.cleanup.policy", Value: kadm.StringPtr("compact")}})
	check("set", rs, err, nil)

	d, err := adm.DescribeBrokerConfigs(ctx(t))
	if c := describedConfig(t, d, err, "", "log.retention.ms"); c.MaybeValue() != "5000" || c.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Errorf("the default resource's log.retention.ms: %+v", c)
	}
	if c := describedConfig(t, d, err, "", "log.cleanup.policy"); c.MaybeValue() != "delete,compact" {
		t.Errorf("the default resource's log.cleanup.policy: %+v", c)
	}
	d, err = adm.DescribeBrokerConfigs(ctx(t), 0)
	if c := describedConfig(t, d, err, "0", "log.retention.ms"); c.MaybeValue() != "5000" || c.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig ||
		len(c.Synonyms) != 2 || c.Synonyms[1].Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("broker 0's log.retention.ms: %+v", c)
	}

	if _, err := adm.CreateTopic(ctx(t), 1, -1, map[string]*string{"retention.ms": kadm.StringPtr("-1")}, "own"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx(t), 1, -1, nil, "late"); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"early", "late"} {
		tc, err := adm.DescribeTopicConfigs(ctx(t), topic)
		c := describedConfig(t, tc, err, topic, "retention.ms")
		if c.MaybeValue() != "5000" || c.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig ||
			len(c.Synonyms) < 1 || c.Synonyms[0].Key != "log.retention.ms" {
			t.Errorf("%s's retention.ms: %+v, want the cluster-wide default", topic, c)
		}
		if c := describedConfig(t, tc, err, topic, "cleanup.policy"); c.MaybeValue() != "delete,compact" {
			t.Errorf("%s's cleanup.policy: %+v", topic, c)
		}
	}
	tc, err := adm.DescribeTopicConfigs(ctx(t), "own")
	if c := describedConfig(t, tc, err, "own", "retention.ms"); c.MaybeValue() != "-1" || c.Source != kmsg.ConfigSourceDynamicTopicConfig ||
		len(c.Synonyms) != 3 || c.Synonyms[1].Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Errorf("own's retention.ms: %+v, want its own value over the default", c)
	}

	// The legacy AlterConfigs replaces the set whole.
	rs, err = adm.AlterBrokerConfigsState(ctx(t), []kadm.AlterConfig{set("message.max.bytes", "2000000")})
	check("legacy", rs, err, nil)
	d, err = adm.DescribeBrokerConfigs(ctx(t))
	if err != nil || len(d) != 1 || len(d[0].Configs) != 1 || d[0].Configs[0].Key != "message.max.bytes" {
		t.Fatalf("after the legacy AlterConfigs: %+v %v, want message.max.bytes alone", d, err)
	}
	rs, err = adm.AlterBrokerConfigs(ctx(t), []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "message.max.bytes"}})
	check("delete", rs, err, nil)
	if d, err := adm.DescribeBrokerConfigs(ctx(t)); err != nil || len(d) != 1 || len(d[0].Configs) != 0 {
		t.Fatalf("after DELETE: %+v %v, want no defaults", d, err)
	}
}
