package kafka

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func alterQuota(t *testing.T, cl *kgo.Client, typ string, name *string, key string, value float64) int16 {
	t.Helper()
	req := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	en := kmsg.NewAlterClientQuotasRequestEntryEntity()
	en.Type, en.Name = typ, name
	e.Entity = append(e.Entity, en)
	op := kmsg.NewAlterClientQuotasRequestEntryOp()
	op.Key, op.Value = key, value
	e.Ops = append(e.Ops, op)
	req.Entries = append(req.Entries, e)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Entries[0].ErrorCode
}

// TestClientQuotas: quotas set and described with Kafka's APIs and
// checks, ALTER_CONFIGS on the cluster needed; a producer whose client id
// has a producer_byte_rate of 2 kB/s is answered with throttle_time_ms
// once it goes over, and its connection muted, while another client id
// is not throttled; the default client id's consumer_byte_rate applies to
// a client without its own.
func TestClientQuotas(t *testing.T) {
	tb := startTestBroker(t, nil)
	admin := client(t, tb.addr)
	slow := "slow"
	for _, c := range []struct {
		typ  string
		name *string
		key  string
		val  float64
		want int16
	}{
		{"client-id", &slow, "producer_byte_rate", 2000, 0},
		{"client-id", nil, "consumer_byte_rate", 1 << 30, 0},
		{"client-id", &slow, "producer_byte_rate", -5, kerr.InvalidRequest.Code},
		{"client-id", &slow, "bananas", 1, kerr.InvalidRequest.Code},
		{"ip", &slow, "connection_creation_rate", 1, kerr.InvalidRequest.Code},
		{"tenant", &slow, "producer_byte_rate", 1, kerr.InvalidRequest.Code},
	} {
		if got := alterQuota(t, admin, c.typ, c.name, c.key, c.val); got != c.want {
			t.Errorf("%s %v %s=%v: code %d, want %d", c.typ, c.name, c.key, c.val, got, c.want)
		}
	}
	d := kmsg.NewPtrDescribeClientQuotasRequest()
	comp := kmsg.NewDescribeClientQuotasRequestComponent()
	comp.EntityType, comp.MatchType = "client-id", 2 // ANY
	d.Components = append(d.Components, comp)
	dr, err := d.RequestWith(ctx(t), admin)
	if err != nil || dr.ErrorCode != 0 || len(dr.Entries) != 2 {
		t.Fatalf("describe: %v %+v", err, dr)
	}
	comp.MatchType, comp.Match = 0, &slow // EXACT
	d.Components = []kmsg.DescribeClientQuotasRequestComponent{comp}
	if dr, err = d.RequestWith(ctx(t), admin); err != nil || len(dr.Entries) != 1 || dr.Entries[0].Values[0].Value != 2000 {
		t.Fatalf("describe slow: %v %+v", err, dr)
	}

	// On a broker that authenticates, an anonymous client has no ACL on
	// the cluster: refused.
	secure, _ := startSASLBroker(t, nil)
	if got := alterQuota(t, client(t, secure.addr), "client-id", &slow, "producer_byte_rate", 1000); got != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("an anonymous client alters a quota: code %d", got)
	}

	produce := func(clientID string, n int) (throttled int) {
		if produceUntilThrottled(t, client(t, tb.addr, kgo.ClientID(clientID), kgo.RequestRetries(0)), n) >= 0 {
			return 1
		}
		return 0
	}
	client(t, tb.addr, kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("quota")).ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")})
	if n := produce("fast", 8); n != 0 {
		t.Errorf("a client id without a producer quota was throttled %d times", n)
	}
	// Kafka's rate counts a new sensor over its whole span (11 s): 30 kB
	// is about 2.7 kB/s, over the 2 kB/s.
	if n := produce("slow", 8); n == 0 {
		t.Errorf("80 kB at once from a client id limited to 2 kB/s: never throttled")
	}
	if testutil.ToFloat64(tb.srv.metrics.throttledResponses) == 0 {
		t.Error("no throttled response counted")
	}

	// controller_mutation_rate (KIP-599): 20 partitions at once from a
	// client id allowed 1 a second are taken, and the next creation is
	// refused with THROTTLING_QUOTA_EXCEEDED while the rate is over it.
	tool := "admin-tool"
	if got := alterQuota(t, admin, "client-id", &tool, "controller_mutation_rate", 1); got != 0 {
		t.Fatalf("mutation quota: code %d", got)
	}
	mutator := client(t, tb.addr, kgo.ClientID(tool), kgo.RequestRetries(0))
	create := func(name string) *kmsg.CreateTopicsResponseTopic {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 20, -1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx(t), mutator)
		if err != nil {
			t.Fatal(err)
		}
		return &resp.Topics[0]
	}
	if r := create("m1"); r.ErrorCode != 0 {
		t.Fatalf("the first creation: code %d", r.ErrorCode)
	}
	if r := create("m2"); r.ErrorCode != kerr.ThrottlingQuotaExceeded.Code {
		t.Fatalf("a creation over the mutation rate: code %d, want THROTTLING_QUOTA_EXCEEDED", r.ErrorCode)
	}

	// request_percentage: a client id allowed 0.001 % of a thread (10 µs
	// a second, over Kafka's 11 s) is throttled within a few Metadata
	// requests, each tens of microseconds of work; another is not. A
	// response's throttle mutes the connection: the next request is
	// answered only after it.
	busy, idle := "busy-client", "idle-client"
	if got := alterQuota(t, admin, "client-id", &busy, "request_percentage", 0.001); got != 0 {
		t.Fatalf("request quota: code %d", got)
	}
	metadata := func(cl *kgo.Client) (throttleMs int32, took time.Duration) {
		req := kmsg.NewPtrMetadataRequest()
		t0 := time.Now()
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ThrottleMillis, time.Since(t0)
	}
	throttledAfter := func(clientID string) (int, int32) {
		cl := client(t, tb.addr, kgo.ClientID(clientID), kgo.RequestRetries(0))
		for i := range 200 {
			if ms, _ := metadata(cl); ms > 0 {
				return i + 1, ms
			}
		}
		return 0, 0
	}
	if n, _ := throttledAfter(idle); n != 0 {
		t.Errorf("a client id without a request quota was throttled after %d requests", n)
	}
	n, ms := throttledAfter(busy)
	if n == 0 {
		t.Fatal("200 Metadata requests from a client id allowed 0.001 % of a thread: never throttled")
	}
	t.Logf("throttled after %d requests for %d ms", n, ms)
}

// TestIPQuotas: ip quotas (KIP-612) set and described with Kafka's APIs —
// connection_creation_rate only, an address or the default, never with
// a user or client id, a whole number — and enforced by the acceptor: an
// address allowed 1 connection a second has its connections beyond the
// burst Kafka's sensor admits held, then closed unanswered.
func TestIPQuotas(t *testing.T) {
	tb := startTestBroker(t, nil)
	admin := client(t, tb.addr)
	local, other := "127.0.0.1", "::ffff:10.1.2.3"
	for _, c := range []struct {
		name *string
		key  string
		val  float64
		want int16
	}{
		{&local, "connection_creation_rate", 1, 0},
		{nil, "connection_creation_rate", 1000, 0},
		{&other, "connection_creation_rate", 5, 0}, // stored as 10.1.2.3
		{&local, "connection_creation_rate", 1.5, kerr.InvalidRequest.Code},
		{&local, "producer_byte_rate", 100, kerr.InvalidRequest.Code},
	} {
		if got := alterQuota(t, admin, "ip", c.name, c.key, c.val); got != c.want {
			t.Errorf("ip %v %s=%v: code %d, want %d", c.name, c.key, c.val, got, c.want)
		}
	}
	mixed := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	for _, typ := range []string{"ip", "user"} {
		en := kmsg.NewAlterClientQuotasRequestEntryEntity()
		en.Type, en.Name = typ, &local
		e.Entity = append(e.Entity, en)
	}
	op := kmsg.NewAlterClientQuotasRequestEntryOp()
	op.Key, op.Value = "connection_creation_rate", 1
	e.Ops = append(e.Ops, op)
	mixed.Entries = append(mixed.Entries, e)
	if resp, err := mixed.RequestWith(ctx(t), admin); err != nil || resp.Entries[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("ip with user: %v %+v", err, resp)
	}
	describe := func(typ string, match int8, name *string) int {
		t.Helper()
		d := kmsg.NewPtrDescribeClientQuotasRequest()
		if typ != "" {
			comp := kmsg.NewDescribeClientQuotasRequestComponent()
			comp.EntityType, comp.MatchType, comp.Match = typ, kmsg.QuotasMatchType(match), name
			d.Components = append(d.Components, comp)
		}
		dr, err := d.RequestWith(ctx(t), admin)
		if err != nil || dr.ErrorCode != 0 {
			t.Fatalf("describe: %v %+v", err, dr)
		}
		return len(dr.Entries)
	}
	mapped := "10.1.2.3"
	for _, c := range []struct {
		typ   string
		match int8
		name  *string
		want  int
	}{
		{"ip", 2, nil, 3}, {"ip", 0, &local, 1}, {"ip", 0, &other, 1}, {"ip", 0, &mapped, 1}, {"ip", 1, nil, 1},
		{"user", 2, nil, 0}, {"", 0, nil, 3},
	} {
		if got := describe(c.typ, c.match, c.name); got != c.want {
			t.Errorf("describe %s match %d %v: %d entries, want %d", c.typ, c.match, c.name, got, c.want)
		}
	}

	// 40 connections at once from 127.0.0.1, allowed 1 a second: the
	// sensor admits about ten (a fresh sensor counts 10 whole windows),
	// the others are held, then closed unanswered.
	apiVersions := []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff}
	var answered, closed atomic.Int32
	var wg sync.WaitGroup
	for range 40 {
		nc, err := net.Dial("tcp", tb.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := nc.Write(apiVersions); err != nil {
				closed.Add(1)
				return
			}
			var size [4]byte
			if _, err := io.ReadFull(nc, size[:]); err != nil {
				closed.Add(1)
				return
			}
			answered.Add(1)
		}()
	}
	wg.Wait()
	if answered.Load() == 0 || closed.Load() == 0 {
		t.Fatalf("%d connections answered, %d closed: want some of each", answered.Load(), closed.Load())
	}
	if got := testutil.ToFloat64(tb.srv.metrics.refused.WithLabelValues("connection_creation_rate")); int32(got) != closed.Load() {
		t.Errorf("refused{connection_creation_rate} = %v, want %d", got, closed.Load())
	}
	t.Logf("%d connections answered, %d held then closed", answered.Load(), closed.Load())
}

// produceUntilThrottled sends up to n Produce requests of one 10 kB record
// to topic quota through cl and returns how many were answered before the
// first throttled one (whose connection is muted then), -1 if none was.
func produceUntilThrottled(t *testing.T, cl *kgo.Client, n int) int {
	t.Helper()
	for i := range n {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = 1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "quota"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = rawBatch(t, &kgo.Record{Value: make([]byte, 10000)})
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce: code %d", code)
		}
		if resp.ThrottleMillis > 0 {
			return i
		}
	}
	return -1
}
