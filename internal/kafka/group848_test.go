package kafka

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerGroupDeletedTopicRevoked (issue 27): a franz-go KIP-848
// consumer subscribed to two topics owns both; once one is deleted the
// broker's next heartbeat answer revokes its partitions (franz-go reports
// them revoked), and the group settles Stable with the member owning the
// other topic only, as Kafka retargets a group whose subscribed topic left
// the metadata image.
func TestConsumerGroupDeletedTopicRevoked(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	adm := kadm.NewClient(client(t, tb.addr))
	const group = "deletes"
	if _, err := adm.CreateTopics(context.Background(), 2, 1, nil, "kept", "gone"); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		owned   = map[string][]int32{}
		revoked = map[string][]int32{}
	)
	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics("kept", "gone"),
		kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()), kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for t, ps := range m {
				owned[t] = append(owned[t], ps...)
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for t, ps := range m {
				revoked[t] = append(revoked[t], ps...)
				owned[t] = slices.DeleteFunc(owned[t], func(p int32) bool { return slices.Contains(ps, p) })
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for t, ps := range m {
				revoked[t] = append(revoked[t], ps...)
				owned[t] = slices.DeleteFunc(owned[t], func(p int32) bool { return slices.Contains(ps, p) })
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	go func() {
		for !cl.PollFetches(context.Background()).IsClientClosed() {
		}
	}()
	waitFor(t, 20*time.Second, "both topics assigned", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(owned["kept"]) != 2 || len(owned["gone"]) != 2 {
			return fmt.Errorf("owned %v", owned)
		}
		return nil
	})
	if _, err := adm.DeleteTopics(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the deleted topic revoked", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(revoked["gone"]) != 2 || len(owned["gone"]) != 0 || len(owned["kept"]) != 2 {
			return fmt.Errorf("owned %v, revoked %v", owned, revoked)
		}
		return nil
	})
	waitFor(t, 20*time.Second, "a stable group owning the kept topic", func() error {
		ds, err := adm.DescribeConsumerGroups(context.Background(), group)
		if err != nil {
			return err
		}
		d := ds[group]
		if d.State != "Stable" || len(d.Members) != 1 {
			return fmt.Errorf("state %s with %d members", d.State, len(d.Members))
		}
		for _, m := range d.Members {
			if a := m.Assignment.Sorted(); len(a) != 1 || a[0].Topic != "kept" || len(a[0].Partitions) != 2 {
				return fmt.Errorf("assignment %v", a)
			}
		}
		return nil
	})
}

// cgHeartbeat sends one ConsumerGroupHeartbeat (v1) as member "m1" of
// group, owning owned (topic id to partitions).
func cgHeartbeat(t *testing.T, cl *kgo.Client, group string, epoch int32, topics []string, regex *string, owned map[[16]byte][]int32) *kmsg.ConsumerGroupHeartbeatResponse {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, group, "m1", epoch
	req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.SubscribedTopicRegex = 10_000, topics, regex
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for id, ps := range owned {
		rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
		rt.TopicID, rt.Partitions = id, ps
		req.Topics = append(req.Topics, rt)
	}
	resp := rawRequest(t, cl, req).(*kmsg.ConsumerGroupHeartbeatResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("heartbeat at epoch %d: %v", epoch, kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp
}

// assigned is a heartbeat answer's assignment (nil when none was sent).
func assigned(resp *kmsg.ConsumerGroupHeartbeatResponse) map[[16]byte][]int32 {
	if resp.Assignment == nil {
		return nil
	}
	out := map[[16]byte][]int32{}
	for _, at := range resp.Assignment.Topics {
		out[at.TopicID] = at.Partitions
	}
	return out
}

// TestConsumerGroupHeartbeatOrder (issue 27), on the wire: after a
// subscribed topic is deleted the next heartbeat's answer revokes its
// partitions at the member's current epoch and the one after moves the
// epoch; a regex subscription new to the group is answered with the
// literal topics only, its topics coming in a later heartbeat at a higher
// epoch, as Kafka 4's coordinator resolves regexes asynchronously.
func TestConsumerGroupHeartbeatOrder(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	cl := client(t, tb.addr)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(context.Background(), 1, 1, nil, "kept", "gone", "ev-1"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := func(name string) [16]byte { return md.Topics[name].ID }
	kept, gone, ev := id("kept"), id("gone"), id("ev-1")

	r := cgHeartbeat(t, cl, "deletes", 0, []string{"gone", "kept"}, nil, nil)
	both := map[[16]byte][]int32{kept: {0}, gone: {0}}
	if got := assigned(r); !reflect.DeepEqual(got, both) {
		t.Fatalf("join: assignment %v, want %v", got, both)
	}
	epoch := r.MemberEpoch
	if _, err := adm.DeleteTopics(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	r = cgHeartbeat(t, cl, "deletes", epoch, nil, nil, both)
	if got := assigned(r); r.MemberEpoch != epoch || !reflect.DeepEqual(got, map[[16]byte][]int32{kept: {0}}) {
		t.Fatalf("after the delete: epoch %d assignment %v, want epoch %d revoking the deleted topic", r.MemberEpoch, got, epoch)
	}
	r = cgHeartbeat(t, cl, "deletes", epoch, nil, nil, map[[16]byte][]int32{kept: {0}})
	if r.MemberEpoch <= epoch {
		t.Fatalf("after the revocation: epoch %d, want above %d", r.MemberEpoch, epoch)
	}

	regex := "ev-.*"
	r = cgHeartbeat(t, cl, "regex", 0, []string{"kept"}, &regex, nil)
	if got := assigned(r); !reflect.DeepEqual(got, map[[16]byte][]int32{kept: {0}}) {
		t.Fatalf("join with a regex: assignment %v, want the literal topic only", got)
	}
	epoch = r.MemberEpoch
	waitFor(t, 10*time.Second, "the regex's topic assigned", func() error {
		r = cgHeartbeat(t, cl, "regex", r.MemberEpoch, nil, nil, map[[16]byte][]int32{kept: {0}})
		if got := assigned(r); r.MemberEpoch <= epoch || !reflect.DeepEqual(got, map[[16]byte][]int32{kept: {0}, ev: {0}}) {
			return fmt.Errorf("epoch %d assignment %v", r.MemberEpoch, got)
		}
		return nil
	})
}
