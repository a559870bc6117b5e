package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupCoordinatorKilled: three franz-go group consumers (seeded with
// every broker, committing every 200 ms) read a 6-partition topic while a
// producer keeps writing; the broker FindCoordinator names for the group is
// killed with SIGKILL. The group must carry on through the other brokers:
// every produced record is consumed, committed offsets never go backwards
// (sampled from a surviving broker before and after the kill), and at the
// end every broker, the restarted one included, returns the same committed
// offsets, equal to the high watermarks. (Issue 5; docs/consumer-groups.md.)
func TestGroupCoordinatorKilled(t *testing.T) {
	const topic, group, parts = "grouped", "survivors", 6
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	seeds := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, seeds, topic, parts, nil)

	coord := c.coordinator(0, group)
	others := without(c.All(), coord)
	t.Logf("node%d coordinates group %s", coord, group)

	var (
		mu       sync.Mutex
		consumed = map[string]int{}
	)
	var consumers []*kgo.Client
	// franz-go's own account of the group (joins, syncs, assignments,
	// commit errors), printed only if the test fails: why a group took
	// long to recover is in it.
	logs := make([]*syncBuffer, 3)
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range logs {
				t.Logf("----- consumer%d's franz-go log -----\n%s----- end of consumer%d -----", i, l.String(), i)
			}
		}
	})
	for i := range 3 {
		logs[i] = &syncBuffer{}
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(30*time.Second), kgo.HeartbeatInterval(time.Second),
			kgo.AutoCommitInterval(200*time.Millisecond), kgo.FetchMaxWait(300*time.Millisecond),
			kgo.DialTimeout(2*time.Second), kgo.RetryTimeout(2*time.Minute), kgo.ClientID(fmt.Sprintf("consumer%d", i)),
			kgo.WithLogger(kgo.BasicLogger(logs[i], kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })))
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, cl)
		go func() {
			for {
				fs := cl.PollFetches(context.Background())
				if fs.IsClientClosed() {
					return
				}
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					consumed[string(r.Value)]++
					mu.Unlock()
				})
			}
		}()
	}
	defer func() {
		for _, cl := range consumers {
			cl.Close()
		}
	}()

	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RecordRetries(100), kgo.DialTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	sent := 0
	produce := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var rs []*kgo.Record
		for range n {
			rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprint(sent % 17)), Value: []byte(fmt.Sprintf("r%06d", sent))})
			sent++
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("producing: %v", err)
		}
	}
	waitConsumed := func(d time.Duration, why string) {
		t.Helper()
		c.Eventually(d, fmt.Sprintf("all %d records consumed (%s)", sent, why), func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(consumed) < sent {
				return fmt.Errorf("%d of %d distinct records consumed", len(consumed), sent)
			}
			return nil
		})
	}

	produce(600)
	waitConsumed(60*time.Second, "before the kill")
	var before map[int32]int64
	c.Eventually(30*time.Second, "every partition has a committed offset", func() error {
		before = c.committedOffsets(others[0], group, topic, parts)
		if len(before) < parts {
			return fmt.Errorf("committed: %v", before)
		}
		return nil
	})
	t.Logf("committed before the kill (read from node%d): %v", others[0], before)

	c.Kill9(coord)
	produce(600)
	waitConsumed(90*time.Second, fmt.Sprintf("after node%d, the coordinator, was killed", coord))
	mu.Lock()
	dups := 0
	for _, k := range consumed {
		dups += k - 1
	}
	mu.Unlock()
	t.Logf("%d records consumed, %d of them more than once (re-read after the last commit)", sent, dups)

	hwm, err := c.HighWatermarks(others[0], topic, parts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	for p, o := range hwm {
		want[int32(p)] = o
	}
	// Not a timing check: a member that misses the rebalance the kill
	// starts is expelled when the rebalance timeout (kgo's 60 s) passes and
	// commits again only after it has rejoined, so the offsets can take two
	// minutes to arrive (franz-go's log shows UNKNOWN_MEMBER_ID then).
	c.Eventually(3*time.Minute, "the survivors return committed offsets at the high watermarks", func() error {
		for _, i := range others {
			got := c.committedOffsets(i, group, topic, parts)
			for p, o := range before {
				if got[p] < o {
					return harness.GiveUp(fmt.Errorf("node%d: committed offset of partition %d went back from %d to %d", i, p, o, got[p]))
				}
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("node%d: committed %v, high watermarks %v", i, got, want)
			}
		}
		return nil
	})
	now := c.coordinator(others[0], group)
	if slices.Contains(others, now) {
		t.Logf("FindCoordinator now names node%d", now)
	} else {
		t.Errorf("FindCoordinator still names node%d, which was killed", now)
	}
	for _, cl := range consumers {
		cl.Close()
	}
	consumers = nil

	c.Restart(coord)
	c.WaitCaughtUp(60*time.Second, coord, others...)
	c.Eventually(30*time.Second, fmt.Sprintf("node%d, restarted, returns the same committed offsets", coord), func() error {
		if got := c.committedOffsets(coord, group, topic, parts); !maps.Equal(got, want) {
			return fmt.Errorf("node%d: committed %v, want %v", coord, got, want)
		}
		return nil
	})
	c.CheckAppHashes(30*time.Second, c.All()...)
}

// coordinator asks node i which broker coordinates group and returns that
// broker's index.
func (c *cluster) coordinator(i int, group string) int {
	c.T.Helper()
	var idx int
	c.Eventually(30*time.Second, fmt.Sprintf("node%d names a coordinator for %s", i, group), func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		kresp, err := c.Request(ctx, i, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.FindCoordinatorResponse)
		node, code := resp.NodeID, resp.ErrorCode
		if len(resp.Coordinators) == 1 {
			node, code = resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
		}
		if err := kerr.ErrorForCode(code); err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if n.NodeID == node {
				idx = n.Idx
				return nil
			}
		}
		return harness.GiveUp(fmt.Errorf("FindCoordinator named node id %d, which is no broker of the cluster", node))
	})
	return idx
}

// committedOffsets asks node i (OffsetFetch) for group's committed offsets
// of partitions 0..parts-1 of topic; partitions without one are left out.
// A failed request returns nil.
func (c *cluster) committedOffsets(i int, group, topic string, parts int32) map[int32]int64 {
	req := kmsg.NewPtrOffsetFetchRequest()
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	rt := kmsg.NewOffsetFetchRequestGroupTopic()
	rt.Topic = topic
	for p := range parts {
		rt.Partitions = append(rt.Partitions, p)
	}
	rg.Topics = append(rg.Topics, rt)
	req.Groups = append(req.Groups, rg)
	req.Group, req.Topics = group, []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: rt.Partitions}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	kresp, err := c.Request(ctx, i, req)
	if err != nil {
		return nil
	}
	resp := kresp.(*kmsg.OffsetFetchResponse)
	out := map[int32]int64{}
	add := func(p int32, o int64, code int16) {
		if code == 0 && o >= 0 {
			out[p] = o
		}
	}
	for _, g := range resp.Groups {
		if g.ErrorCode != 0 {
			return nil
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(p.Partition, p.Offset, p.ErrorCode)
			}
		}
	}
	if resp.ErrorCode != 0 {
		return nil
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(p.Partition, p.Offset, p.ErrorCode)
		}
	}
	return out
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	return len(p), nil
}

// String returns the last 400 lines written.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.SplitAfter(string(b.b), "\n")
	return strings.Join(lines[max(0, len(lines)-400):], "")
}
