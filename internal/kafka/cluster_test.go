package kafka

import (
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMetadataCluster: with a broker directory of three, Metadata lists all
// three as replicas (only broker 0 exists: the client talks to it alone), only those whose validator signs blocks as in-sync and
// as leaders, and spreads leadership between them.
func TestMetadataCluster(t *testing.T) {
	a, b, c := []byte("validator-a"), []byte("validator-b"), []byte("validator-c")
	tb := startTestBrokerSigned(t, [][]byte{a, b}, func(o *Options) {
		o.Brokers = []BrokerInfo{
			{NodeID: 0, Host: o.AdvertisedHost, Port: o.AdvertisedPort, Validator: a},
			{NodeID: 1, Host: "127.0.0.1", Port: 2, Validator: b},
			{NodeID: 2, Host: "127.0.0.1", Port: 3, Validator: c},
		}
	})
	cl := client(t, tb.addr)
	// Two blocks: the second carries the signatures of the first.
	for _, name := range []string{"spread", "other"} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 8, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("spread")
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 3 {
		t.Fatalf("%d brokers listed, want 3", len(resp.Brokers))
	}
	leaders := map[int32]int{}
	for _, p := range resp.Topics[0].Partitions {
		leaders[p.Leader]++
		if len(p.Replicas) != 3 || len(p.ISR) != 2 {
			t.Fatalf("partition %d: replicas %v isr %v", p.Partition, p.Replicas, p.ISR)
		}
	}
	if leaders[2] != 0 {
		t.Errorf("broker 2 (its validator never signs) leads %d partitions", leaders[2])
	}
	if leaders[0] == 0 || leaders[1] == 0 {
		t.Errorf("leadership not spread over the live brokers: %v", leaders)
	}
}

// TestCatchingUpRefusesReads: a broker behind the chain refuses Fetch,
// ListOffsets and OffsetForLeaderEpoch with NOT_LEADER_OR_FOLLOWER (so
// clients retry elsewhere) and serves again once caught up.
func TestCatchingUpRefusesReads(t *testing.T) {
	var behind atomic.Bool
	tb := startTestBroker(t, func(o *Options) { o.CatchingUp = behind.Load })
	cl := client(t, tb.addr, kgo.DefaultProduceTopic("cu"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	listEnd := func() int16 {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "cu"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		// Straight to broker 0: the client would retry NOT_LEADER itself.
		kresp, err := cl.Broker(0).Request(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return kresp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode
	}
	behind.Store(true)
	if code := listEnd(); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("ListOffsets while catching up: code %d", code)
	}
	behind.Store(false)
	if code := listEnd(); code != 0 {
		t.Fatalf("ListOffsets once caught up: code %d", code)
	}
}

// TestCatchingUpRefusesGroupReads: a broker behind the chain answers
// OffsetFetch, DescribeGroups and ListGroups with the retriable
// COORDINATOR_LOAD_IN_PROGRESS rather than an old view
// (docs/consumer-groups.md).
func TestCatchingUpRefusesGroupReads(t *testing.T) {
	var behind atomic.Bool
	tb := startTestBroker(t, func(o *Options) { o.CatchingUp = behind.Load })
	cl := client(t, tb.addr)
	codes := func() [3]int16 {
		fetch := kmsg.NewPtrOffsetFetchRequest()
		fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
		desc := kmsg.NewPtrDescribeGroupsRequest()
		desc.Groups = []string{"g"}
		list := kmsg.NewPtrListGroupsRequest()
		var out [3]int16
		for i, req := range []kmsg.Request{fetch, desc, list} {
			kresp, err := cl.Broker(0).Request(ctx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			switch r := kresp.(type) {
			case *kmsg.OffsetFetchResponse:
				out[i] = r.Groups[0].ErrorCode
			case *kmsg.DescribeGroupsResponse:
				out[i] = r.Groups[0].ErrorCode
			case *kmsg.ListGroupsResponse:
				out[i] = r.ErrorCode
			}
		}
		return out
	}
	behind.Store(true)
	load := kerr.CoordinatorLoadInProgress.Code
	if got := codes(); got != [3]int16{load, load, load} {
		t.Fatalf("OffsetFetch, DescribeGroups, ListGroups while catching up: codes %v", got)
	}
	behind.Store(false)
	if got := codes(); got != [3]int16{} {
		t.Fatalf("once caught up: codes %v", got)
	}
}
