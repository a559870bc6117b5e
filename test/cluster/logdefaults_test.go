package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/test/harness"
)

// TestClusterLogDefaultsEverywhere (issue 27, dynamic broker configs): a
// cluster-wide log default set through one broker (kafka-configs.sh
// --entity-type brokers --entity-default) is replicated state, so every
// broker describes it as DYNAMIC_DEFAULT_BROKER_CONFIG, shows it inherited
// by a topic that does not set retention.ms, and honours it: retention
// deletes the topic's old segments on all four brokers alike.
func TestClusterLogDefaultsEverywhere(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	all := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, all, "ld", 1, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	one, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs(0)...))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	set := func(k, v string) kadm.AlterConfig {
		return kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)}
	}
	rs, err := kadm.NewClient(one).AlterBrokerConfigs(ctx, []kadm.AlterConfig{set("log.retention.ms", "2000"), set("log.segment.bytes", "1000")})
	if err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("setting the cluster-wide defaults: %v %+v", err, rs)
	}

	// Records in several segments, then a wait past retention.ms.
	p, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.DefaultProduceTopic("ld"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 20 {
		if err := p.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 300), Key: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	for _, n := range c.Nodes {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.Kafka))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		b := cl.Broker(int(n.NodeID))
		req := kmsg.NewPtrDescribeConfigsRequest()
		for _, name := range []string{"", fmt.Sprint(n.NodeID)} {
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, name
			rr.ConfigNames = []string{"log.retention.ms"}
			req.Resources = append(req.Resources, rr)
		}
		tr := kmsg.NewDescribeConfigsRequestResource()
		tr.ResourceType, tr.ResourceName, tr.ConfigNames = kmsg.ConfigResourceTypeTopic, "ld", []string{"retention.ms"}
		req.Resources = append(req.Resources, tr)
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			t.Fatalf("broker %d: %v", n.NodeID, err)
		}
		for _, res := range resp.Resources {
			if res.ErrorCode != 0 || len(res.Configs) != 1 || res.Configs[0].Value == nil || *res.Configs[0].Value != "2000" ||
				res.Configs[0].Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
				t.Errorf("broker %d describes %v %q: %+v", n.NodeID, res.ResourceType, res.ResourceName, res)
			}
		}
	}

	// Retention by the default, on every broker (housekeeping runs every
	// 30 s of block time).
	deadline := time.Now().Add(2 * time.Minute)
	for _, n := range c.Nodes {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.Kafka))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for {
			req := kmsg.NewPtrListOffsetsRequest()
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = "ld"
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Timestamp = -2
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(n.NodeID)))
			if err == nil && resp.Topics[0].Partitions[0].ErrorCode == 0 && resp.Topics[0].Partitions[0].Offset > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("broker %d: log start still 0 (%v %+v): the default log.retention.ms deleted nothing", n.NodeID, err, resp)
			}
			time.Sleep(time.Second) // polling with a deadline
		}
	}
}
