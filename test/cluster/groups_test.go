package cluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupCoordinatorKilled: three franz-go group consumers (seeded with
// every broker, committing every 200 ms) read a 6-partition topic while a
// producer keeps writing; the broker most of them use as their group
// coordinator (the one their heartbeats go to) is killed with SIGKILL. The
// group must carry on through the other brokers: every produced record is
// consumed, the members that lost their coordinator heartbeat to a
// survivor, committed offsets never go backwards (sampled from a surviving
// broker before and after the kill), and at the end every broker, the
// restarted one included, returns the same committed offsets, equal to the
// high watermarks. (Issue 5; docs/consumer-groups.md.)
func TestGroupCoordinatorKilled(t *testing.T) {
	const topic, group, parts = "grouped", "survivors", 6
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	seeds := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, seeds, topic, parts, nil)

	var (
		mu       sync.Mutex
		consumed = map[string]int{}
	)
	var consumers []*kgo.Client
	coordinators := make([]*heartbeatTarget, 3)
	// franz-go's own account of the group (joins, syncs, assignments,
	// commit errors), printed if the test fails (its last 400 lines) or
	// when STELE_GROUP_LOG is set (all of it; "debug" for franz-go's debug
	// level, which shows every commit): why a group took long to recover
	// is in it.
	logs := make([]*syncBuffer, 3)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("STELE_GROUP_LOG") != "" {
			for i, l := range logs {
				t.Logf("----- consumer%d's franz-go log -----\n%s----- end of consumer%d -----", i, l.String(), i)
			}
		}
	})
	for i := range 3 {
		logs[i], coordinators[i] = &syncBuffer{}, &heartbeatTarget{}
		cl, err := kgo.NewClient(kgo.WithHooks(coordinators[i]), kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(30*time.Second), kgo.HeartbeatInterval(time.Second),
			kgo.AutoCommitInterval(200*time.Millisecond), kgo.FetchMaxWait(300*time.Millisecond),
			kgo.DialTimeout(2*time.Second), kgo.RetryTimeout(2*time.Minute), kgo.ClientID(fmt.Sprintf("consumer%d", i)),
			kgo.WithLogger(kgo.BasicLogger(logs[i], groupLogLevel(), func() string { return time.Now().Format("15:04:05.000 ") })))
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
	// Each member's coordinator is the broker that answered its
	// FindCoordinator (the broker asked names itself); the one most members
	// heartbeat to is killed.
	var coord int
	c.Eventually(30*time.Second, "every member heartbeats", func() error {
		uses := map[int]int{}
		for i, h := range coordinators {
			node := c.nodeIndex(h.last())
			if node < 0 {
				return fmt.Errorf("consumer%d has not heartbeated yet", i)
			}
			uses[node]++
		}
		coord = -1
		for _, i := range c.All() {
			if coord < 0 || uses[i] > uses[coord] {
				coord = i
			}
		}
		t.Logf("members' coordinators: %v (node: members); node%d will be killed", uses, coord)
		return nil
	})
	others := without(c.All(), coord)
	var lost []int // the members whose coordinator is killed
	for i, h := range coordinators {
		if c.nodeIndex(h.last()) == coord {
			lost = append(lost, i)
		}
	}
	var before map[int32]int64
	c.Eventually(30*time.Second, "every partition has a committed offset", func() error {
		before = c.committedOffsets(others[0], group, topic, parts)
		if len(before) < parts {
			return fmt.Errorf("committed: %v", before)
		}
		return nil
	})
	t.Logf("committed before the kill (read from node%d): %v", others[0], before)

	killed := time.Now()
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
	c.Eventually(30*time.Second, fmt.Sprintf("consumers %v, whose coordinator was node%d, heartbeat to a survivor", lost, coord), func() error {
		for _, i := range lost {
			if node := c.nodeIndex(coordinators[i].last()); node == coord {
				return fmt.Errorf("consumer%d's last heartbeat went to node%d", i, node)
			}
		}
		return nil
	})
	for _, i := range lost { // a figure for the log, not a timing check
		if hb, ok := coordinators[i].firstAfter(killed, c.Nodes[coord].NodeID); ok {
			t.Logf("consumer%d heartbeated to node%d %.1fs after the kill", i, c.nodeIndex(hb.node), hb.at.Sub(killed).Seconds())
		}
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

// nodeIndex returns the index of the broker with Kafka node id id, or -1.
func (c *cluster) nodeIndex(id int32) int {
	for _, n := range c.Nodes {
		if n.NodeID == id {
			return n.Idx
		}
	}
	return -1
}

// heartbeatTarget is a kgo hook that remembers the brokers a client sent
// Heartbeats to, and when: its group coordinator over time.
type heartbeatTarget struct {
	mu   sync.Mutex
	sent []heartbeatSent
}

type heartbeatSent struct {
	node int32
	at   time.Time
}

func (h *heartbeatTarget) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.Heartbeat.Int16() && err == nil {
		h.mu.Lock()
		h.sent = append(h.sent, heartbeatSent{meta.NodeID, time.Now()})
		h.mu.Unlock()
	}
}

// last returns the node id the last Heartbeat went to (-1: none yet).
func (h *heartbeatTarget) last() int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sent) == 0 {
		return -1
	}
	return h.sent[len(h.sent)-1].node
}

// firstAfter returns the first Heartbeat sent after t to a broker other
// than node id not.
func (h *heartbeatTarget) firstAfter(t time.Time, not int32) (heartbeatSent, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.sent {
		if s.at.After(t) && s.node != not {
			return s, true
		}
	}
	return heartbeatSent{}, false
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

// String returns the last 400 lines written (all of them when
// STELE_GROUP_LOG is set).
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.SplitAfter(string(b.b), "\n")
	if os.Getenv("STELE_GROUP_LOG") != "" {
		return strings.Join(lines, "")
	}
	return strings.Join(lines[max(0, len(lines)-400):], "")
}

func groupLogLevel() kgo.LogLevel {
	if os.Getenv("STELE_GROUP_LOG") == "debug" {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelInfo
}
