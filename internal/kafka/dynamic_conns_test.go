package kafka

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// alterBrokerOn sends IncrementalAlterConfigs (or, with legacy, the old
// AlterConfigs, SET only) for BROKER resource name over c and returns the
// resource's error code and message.
func alterBrokerOn(t *testing.T, c net.Conn, name string, legacy, validateOnly bool, ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) (int16, string) {
	t.Helper()
	msg := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	if legacy {
		req := kmsg.NewPtrAlterConfigsRequest()
		req.Version, req.ValidateOnly = 1, validateOnly
		rr := kmsg.NewAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, name
		for _, op := range ops {
			rc := kmsg.NewAlterConfigsRequestResourceConfig()
			rc.Name, rc.Value = op.Name, op.Value
			rr.Configs = append(rr.Configs, rc)
		}
		req.Resources = append(req.Resources, rr)
		r := requestOn(t, c, req).(*kmsg.AlterConfigsResponse).Resources[0]
		return r.ErrorCode, msg(r.ErrorMessage)
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Version, req.ValidateOnly = 1, validateOnly
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName, rr.Configs = kmsg.ConfigResourceTypeBroker, name, ops
	req.Resources = append(req.Resources, rr)
	r := requestOn(t, c, req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
	return r.ErrorCode, msg(r.ErrorMessage)
}

func setOp(name, value string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	return loggerOp(kmsg.IncrementalAlterConfigOpSet, name, kmsg.StringPtr(value))
}

func deleteOp(name string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	return loggerOp(kmsg.IncrementalAlterConfigOpDelete, name, nil)
}

// describeBrokerOn describes BROKER resource name over c, with synonyms.
func describeBrokerOn(t *testing.T, c net.Conn, name string) map[string]kmsg.DescribeConfigsResponseResourceConfig {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Version, req.IncludeSynonyms = 4, true
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, name
	req.Resources = append(req.Resources, rr)
	res := requestOn(t, c, req).(*kmsg.DescribeConfigsResponse).Resources[0]
	if res.ErrorCode != 0 {
		t.Fatalf("describing broker %q: %d %v", name, res.ErrorCode, res.ErrorMessage)
	}
	out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, rc := range res.Configs {
		out[rc.Name] = rc
	}
	return out
}

// sources renders a described config as value@SOURCE, then its synonyms.
func sources(rc kmsg.DescribeConfigsResponseResourceConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%s", deref(rc.Value), rc.Source)
	for _, s := range rc.ConfigSynonyms {
		fmt.Fprintf(&b, " %s@%s", deref(s.Value), s.Source)
	}
	return b.String()
}

// TestDynamicConnectionLimits: max.connections.per.ip set for this broker
// at run time refuses the third connection from 127.0.0.1 without closing
// those open, raising it admits it, lowering it closes none (Kafka's
// ConnectionQuotas.updateMaxConnectionsPerIp changes only what inc checks
// next); DescribeConfigs reports each layer (KIP-226: broker, cluster
// default, static, default); bad values get Kafka's errors.
func TestDynamicConnectionLimits(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) { o.MaxConnectionsPerIP = 50 }) // static
	ctl := dialFrom(t, "127.0.0.9", tb.addr)                                  // the admin's own connection
	perIP := func(want int) {
		t.Helper()
		waitFor(t, 5*time.Second, fmt.Sprintf("max.connections.per.ip %d to apply", want), func() error {
			if got := tb.srv.quotas.limits().perIP; got != want {
				return fmt.Errorf("%d applied", got)
			}
			return nil
		})
	}
	if got := sources(describeBrokerOn(t, ctl, "0")["max.connections.per.ip"]); got != "50@STATIC_BROKER_CONFIG 50@STATIC_BROKER_CONFIG 2147483647@DEFAULT_CONFIG" {
		t.Errorf("static: %s", got)
	}

	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections.per.ip", "2")); code != 0 {
		t.Fatalf("setting per-ip 2: %d %s", code, msg)
	}
	perIP(2)
	a, b := dialFrom(t, "127.0.0.1", tb.addr), dialFrom(t, "127.0.0.1", tb.addr)
	for _, c := range []net.Conn{a, b} {
		if err := served(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	closedAtOnce(t, dialFrom(t, "127.0.0.1", tb.addr))

	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections.per.ip", "3")); code != 0 {
		t.Fatalf("raising per-ip to 3: %d %s", code, msg)
	}
	perIP(3)
	third := dialFrom(t, "127.0.0.1", tb.addr)
	if err := served(third, 5*time.Second); err != nil {
		t.Fatalf("a third connection after raising the limit: %v", err)
	}
	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections.per.ip", "1")); code != 0 {
		t.Fatalf("lowering per-ip to 1: %d %s", code, msg)
	}
	perIP(1)
	for _, c := range []net.Conn{a, b, third} {
		if err := served(c, 5*time.Second); err != nil {
			t.Fatalf("an open connection after lowering the limit: %v", err)
		}
	}
	closedAtOnce(t, dialFrom(t, "127.0.0.1", tb.addr))

	// Precedence: the broker's own value over the cluster-wide default over
	// the static option.
	if code, msg := alterBrokerOn(t, ctl, "", false, false, setOp("max.connections.per.ip", "5")); code != 0 {
		t.Fatalf("cluster default: %d %s", code, msg)
	}
	if got := sources(describeBrokerOn(t, ctl, "0")["max.connections.per.ip"]); got !=
		"1@DYNAMIC_BROKER_CONFIG 1@DYNAMIC_BROKER_CONFIG 5@DYNAMIC_DEFAULT_BROKER_CONFIG 50@STATIC_BROKER_CONFIG 2147483647@DEFAULT_CONFIG" {
		t.Errorf("every layer: %s", got)
	}
	if got := sources(describeBrokerOn(t, ctl, "")["max.connections.per.ip"]); got != "5@DYNAMIC_DEFAULT_BROKER_CONFIG 5@DYNAMIC_DEFAULT_BROKER_CONFIG" {
		t.Errorf("the default resource: %s", got)
	}
	perIP(1)
	if code, msg := alterBrokerOn(t, ctl, "0", false, false, deleteOp("max.connections.per.ip")); code != 0 {
		t.Fatalf("deleting the broker's value: %d %s", code, msg)
	}
	perIP(5)
	if rc := describeBrokerOn(t, ctl, "0")["max.connections.per.ip"]; rc.ReadOnly || sources(rc) !=
		"5@DYNAMIC_DEFAULT_BROKER_CONFIG 5@DYNAMIC_DEFAULT_BROKER_CONFIG 50@STATIC_BROKER_CONFIG 2147483647@DEFAULT_CONFIG" {
		t.Errorf("inherited: read-only %v, %s", rc.ReadOnly, sources(rc))
	}
	// The legacy AlterConfigs replaces the default's set whole.
	if code, msg := alterBrokerOn(t, ctl, "", true, false); code != 0 {
		t.Fatalf("legacy replace: %d %s", code, msg)
	}
	perIP(50)

	// Overrides at run time: 127.0.0.2 may have none.
	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections.per.ip.overrides", "127.0.0.2:0")); code != 0 {
		t.Fatalf("overrides: %d %s", code, msg)
	}
	waitFor(t, 5*time.Second, "the overrides to apply", func() error {
		if got := formatOverrides(tb.srv.quotas.limits().overrides); got != "127.0.0.2:0" {
			return fmt.Errorf("%q applied", got)
		}
		return nil
	})
	closedAtOnce(t, dialFrom(t, "127.0.0.2", tb.addr))

	// Kafka's errors; validate_only changes nothing.
	for _, tc := range []struct {
		name   string
		res    string
		op     kmsg.IncrementalAlterConfigsRequestResourceConfig
		code   int16
		substr string
	}{
		{"not a number", "0", setOp("max.connections", "lots"), kerr.InvalidRequest.Code, "not a number of type INT"},
		{"negative", "0", setOp("max.connections.per.ip", "-1"), kerr.InvalidRequest.Code, "value must be at least 0"},
		{"max.connections 0", "", setOp("max.connections", "0"), kerr.InvalidRequest.Code, "Invalid max.connections 0"},
		{"per-ip 0 without dynamic overrides", "", setOp("max.connections.per.ip", "0"), kerr.InvalidRequest.Code,
			"max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."},
		{"bad overrides", "0", setOp("max.connections.per.ip.overrides", "127.0.0.1"), kerr.InvalidRequest.Code, "is not host:count"},
		{"append to an int", "0", loggerOp(kmsg.IncrementalAlterConfigOpAppend, "max.connections", kmsg.StringPtr("1")), kerr.InvalidConfig.Code,
			"Config value append is not allowed for config key: max.connections"},
		{"not a member", "5", setOp("max.connections", "10"), kerr.InvalidRequest.Code, "Unexpected broker id, expected 0 or empty string, but received 5"},
		{"not an id", "x", setOp("max.connections", "10"), kerr.InvalidRequest.Code, "Broker id must be an integer"},
	} {
		if code, msg := alterBrokerOn(t, ctl, tc.res, false, false, tc.op); code != tc.code || !strings.Contains(msg, tc.substr) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, code, msg, tc.code, tc.substr)
		}
	}
	if code, msg := alterBrokerOn(t, ctl, "0", false, true, setOp("max.connections", "7")); code != 0 {
		t.Fatalf("validate only: %d %s", code, msg)
	}
	if got := deref(describeBrokerOn(t, ctl, "0")["max.connections"].Value); got != "2147483647" {
		t.Errorf("validate_only changed max.connections to %s", got)
	}
	// per-ip 0 is taken with overrides in the same set, as in Kafka.
	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections.per.ip", "0")); code != 0 {
		t.Errorf("per-ip 0 with overrides: %d %s", code, msg)
	}
}

// TestDynamicMaxConnections: lowering max.connections below the open
// connections closes none and holds the next one back; raising it lets the
// waiting one in at once (Kafka's updateBrokerMaxConnections notifies the
// acceptor waiting in waitForConnectionSlot).
func TestDynamicMaxConnections(t *testing.T) {
	tb := startTestBroker(t, nil)
	ctl := dialFrom(t, "127.0.0.9", tb.addr)
	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections", "1")); code != 0 {
		t.Fatalf("max.connections 1: %d %s", code, msg)
	}
	waitFor(t, 5*time.Second, "max.connections 1 to apply", func() error {
		if got := tb.srv.quotas.limits().max; got != 1 {
			return fmt.Errorf("%d applied", got)
		}
		return nil
	})
	if err := served(ctl, 5*time.Second); err != nil {
		t.Fatalf("the open connection after lowering max.connections: %v", err)
	}
	waiting := dialFrom(t, "127.0.0.1", tb.addr) // the kernel accepts it; the broker does not yet
	if err := served(waiting, 500*time.Millisecond); err == nil {
		t.Fatal("a connection beyond max.connections was served")
	}
	if code, msg := alterBrokerOn(t, ctl, "0", false, false, setOp("max.connections", "100")); code != 0 {
		t.Fatalf("max.connections 100: %d %s", code, msg)
	}
	waiting.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := readFrame(waiting); err != nil { // the ApiVersions sent above
		t.Fatalf("the waiting connection after raising max.connections: %v", err)
	}
}
