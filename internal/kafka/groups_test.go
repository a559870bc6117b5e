package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupConsumer is a franz-go group member that records what it consumed.
type groupConsumer struct {
	cl   *kgo.Client
	mu   sync.Mutex
	seen map[string]int // value -> times consumed
}

func startGroupConsumer(t *testing.T, addr, group, topic string, opts ...kgo.Opt) *groupConsumer {
	t.Helper()
	gc := &groupConsumer{seen: map[string]int{}}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	gc.cl = cl
	go func() {
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				gc.mu.Lock()
				gc.seen[string(r.Value)]++
				gc.mu.Unlock()
			})
		}
	}()
	return gc
}

func (gc *groupConsumer) count() int {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return len(gc.seen)
}

func produceValues(t *testing.T, addr, topic string, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := from; i < from+n; i++ {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGroupConsumersSplitPartitions: three franz-go group members (eager
// range, then cooperative-sticky) split six partitions: together they read
// every record, each partition goes to one member, the group is described
// as Stable with three members, and the offsets they commit are fetched
// back through kadm.
func TestGroupConsumersSplitPartitions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer
	}{
		{"range", kgo.RangeBalancer()},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := startTestBrokerClocked(t, 20*time.Millisecond)
			adm := kadm.NewClient(mustClient(t, tb.addr))
			const topic, group, n = "orders", "billing", 600
			if _, err := adm.CreateTopic(context.Background(), 6, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			produceValues(t, tb.addr, topic, 0, n)
			var members []*groupConsumer
			for range 3 {
				gc := startGroupConsumer(t, tb.addr, group, topic, kgo.Balancers(tc.balancer))
				members = append(members, gc)
				t.Cleanup(gc.cl.Close)
			}
			waitFor(t, 30*time.Second, "every record consumed", func() error {
				total := map[string]int{}
				for _, m := range members {
					m.mu.Lock()
					for v, k := range m.seen {
						total[v] += k
					}
					m.mu.Unlock()
				}
				if len(total) < n {
					return fmt.Errorf("%d of %d distinct records", len(total), n)
				}
				return nil
			})
			var described kadm.DescribedGroup
			waitFor(t, 30*time.Second, "a stable group of 3 owning 6 partitions", func() error {
				ds, err := adm.DescribeGroups(context.Background(), group)
				if err != nil {
					return err
				}
				described = ds[group]
				owned := map[int32]int{}
				for _, m := range described.Members {
					ca, _ := m.Assigned.AsConsumer()
					for _, tp := range ca.Topics {
						for _, p := range tp.Partitions {
							owned[p]++
						}
					}
				}
				if described.State != "Stable" || len(described.Members) != 3 || len(owned) != 6 {
					return fmt.Errorf("state %s, %d members, partitions owned %v", described.State, len(described.Members), owned)
				}
				for p, k := range owned {
					if k != 1 {
						return fmt.Errorf("partition %d owned by %d members", p, k)
					}
				}
				return nil
			})
			for _, m := range members {
				if err := m.cl.CommitUncommittedOffsets(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			offs, err := adm.FetchOffsets(context.Background(), group)
			if err != nil {
				t.Fatal(err)
			}
			var committed int64
			offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
			if committed != n {
				t.Fatalf("committed offsets sum to %d, want %d (every record consumed)", committed, n)
			}
		})
	}
}

func mustClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
