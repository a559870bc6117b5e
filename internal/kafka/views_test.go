package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
)

// TestViewTopics: CreateTopics of a view (docs/subjects.md) answers with
// the partitions its sources give it, whatever num_partitions said;
// DescribeConfigs reports every config of a view read-only, and the
// stele.view.* configs of any topic; a produce to a view gets
// INVALID_TOPIC_EXCEPTION, and DeleteTopics of its source POLICY_VIOLATION
// naming it.
func TestViewTopics(t *testing.T) {
	addr := newTestBroker(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordRetries(0), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx(t), 3, -1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	from := "orders"
	r, err := adm.CreateTopic(ctx(t), 7, -1, map[string]*string{"stele.view.from": &from}, "v")
	if err != nil || r.Err != nil || r.NumPartitions != 3 {
		t.Fatalf("create view v: %v %+v, want 3 partitions", err, r)
	}
	// The answer describes the configs the view got.
	req0 := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "v2", -1, -1
	rc := kmsg.NewCreateTopicsRequestTopicConfig()
	rc.Name, rc.Value = "stele.view.from", kmsg.StringPtr("orders")
	rt.Configs = append(rt.Configs, rc)
	req0.Topics = append(req0.Topics, rt)
	cr, err := req0.RequestWith(ctx(t), cl)
	if err != nil || cr.Topics[0].ErrorCode != 0 || cr.Topics[0].NumPartitions != 3 {
		t.Fatalf("create view v2: %v %+v", err, cr)
	}
	for _, c := range cr.Topics[0].Configs {
		if c.Name == "retention.ms" && (c.Value == nil || *c.Value != "-1") {
			t.Errorf("CreateTopics answers view v2's retention.ms as %v, want -1", c.Value)
		}
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, name := range []string{"v", "orders"} {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, name
		req.Resources = append(req.Resources, rr)
	}
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range resp.Resources {
		if rc.ErrorCode != 0 || len(rc.Configs) == 0 {
			t.Fatalf("describe %s: code %d, %d configs", rc.ResourceName, rc.ErrorCode, len(rc.Configs))
		}
		for _, c := range rc.Configs {
			viewConfig := strings.HasPrefix(c.Name, "stele.view.")
			if want := rc.ResourceName == "v" || viewConfig; c.ReadOnly != want {
				t.Errorf("%s: %s read-only %v, want %v", rc.ResourceName, c.Name, c.ReadOnly, want)
			}
			if rc.ResourceName == "v" && c.Name == "stele.view.from" && (c.Value == nil || *c.Value != "orders") {
				t.Errorf("v: stele.view.from %v", c.Value)
			}
			if rc.ResourceName == "v" && c.Name == "retention.ms" && (c.Value == nil || *c.Value != "-1") {
				t.Errorf("v: retention.ms %v, want -1", c.Value)
			}
		}
	}
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "v", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Errorf("produce to a view: %v, want INVALID_TOPIC_EXCEPTION", err)
	}
	dr, _ := adm.DeleteTopic(ctx(t), "orders") // kadm returns dr.Err as its error too
	if !errors.Is(dr.Err, kerr.PolicyViolation) || !strings.Contains(dr.ErrMessage, "view(s) v") {
		t.Errorf("delete a view's source: %+v, want POLICY_VIOLATION naming v", dr)
	}
}

// TestConfigsByAppVersion: DescribeConfigs and CreateTopics describe only
// the topic configs the chain's app version has: none of stele.view.*
// under version 11, nor stele.subject.* under version 10, as the binaries
// before them.
func TestConfigsByAppVersion(t *testing.T) {
	for _, c := range []struct {
		version uint32
		absent  []string
		present []string
	}{{11, []string{"stele.view.from", "stele.view.order", "stele.view.subject"}, []string{"stele.subject.from", "retention.ms"}},
		{10, []string{"stele.view.from", "stele.subject.from", "stele.subject.required"}, []string{"stele.signed.by"}},
		{fsm.MaxAppVersion, nil, []string{"stele.view.from", "stele.subject.from"}}} {
		addr := startTestBrokerVersion(t, c.version, local.Options{}, nil).addr
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		created, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, nil, "t")
		if err != nil {
			t.Fatal(err)
		}
		rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx(t), "t")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, rc := range rcs {
			for _, e := range rc.Configs {
				got[e.Key] = true
			}
		}
		answered := map[string]bool{}
		for k := range created.Configs {
			answered[k] = true
		}
		for _, k := range c.absent {
			if got[k] || answered[k] {
				t.Errorf("version %d: %s described (DescribeConfigs %v, CreateTopics %v)", c.version, k, got[k], answered[k])
			}
		}
		for _, k := range c.present {
			if !got[k] || !answered[k] {
				t.Errorf("version %d: %s not described (DescribeConfigs %v, CreateTopics %v)", c.version, k, got[k], answered[k])
			}
		}
	}
}
