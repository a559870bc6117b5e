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
		{"a log default", set("log.retention.ms", "1000"), nil, "in Stele yet"},
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
