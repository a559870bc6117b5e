package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterBrokerConfigReplicated (issue 27, dynamic broker configs): a
// connection limit set for broker 1 only (kafka-configs.sh --entity-type
// brokers --entity-name 1) is replicated state, as Kafka's dynamic configs
// are records of its metadata log: every broker describes broker 1's
// value alike, as DYNAMIC_BROKER_CONFIG, and broker 1 still has it after a
// restart (SIGTERM, then started again on its data directory).
func TestClusterBrokerConfigReplicated(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
	op := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	op.Op, op.Name, op.Value = kmsg.IncrementalAlterConfigOpSet, "max.connections.per.ip", kmsg.StringPtr("1000")
	rr.Configs = append(rr.Configs, op)
	alter.Resources = append(alter.Resources, rr)
	resp, err := c.Request(ctx, 1, alter)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0]; r.ErrorCode != 0 {
		t.Fatalf("setting broker 1's max.connections.per.ip: %d %v", r.ErrorCode, r.ErrorMessage)
	}

	describedBy := func(i int) error {
		req := kmsg.NewPtrDescribeConfigsRequest()
		d := kmsg.NewDescribeConfigsRequestResource()
		d.ResourceType, d.ResourceName, d.ConfigNames = kmsg.ConfigResourceTypeBroker, "1", []string{"max.connections.per.ip"}
		req.Resources = append(req.Resources, d)
		resp, err := c.Request(ctx, i, req)
		if err != nil {
			return err
		}
		res := resp.(*kmsg.DescribeConfigsResponse).Resources[0]
		if res.ErrorCode != 0 || len(res.Configs) != 1 || res.Configs[0].Value == nil || *res.Configs[0].Value != "1000" ||
			res.Configs[0].Source != kmsg.ConfigSourceDynamicBrokerConfig {
			return fmt.Errorf("broker %d describes broker 1's max.connections.per.ip as %+v", i, res)
		}
		return nil
	}
	everyone := func(when string) {
		t.Helper()
		for _, i := range c.All() {
			c.Eventually(30*time.Second, fmt.Sprintf("%s, broker %d", when, i), func() error { return describedBy(i) })
		}
	}
	everyone("after the change")
	c.Stop(1)
	c.Restart(1)
	everyone("after broker 1's restart")
}
