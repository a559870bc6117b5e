package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStaticMembersExpireOnIdleChain (issue 27): three static members of a
// classic group (franz-go, group.instance.id set, session.timeout.ms 6 s)
// close without leaving, so the group keeps them, and DeleteGroups answers
// NON_EMPTY_GROUP, until their sessions lapse. Nothing else runs, so the
// chain is idle and the session timers fire only in a block the brokers'
// tick loops ask for. The group, described every 50 ms, must be empty (and
// DeleteGroups then succeed)
// within the session timeout plus one empty-block interval (2 s, the
// cometbft default the harness runs with) of the last heartbeat, join or
// sync any member sent: the group empties before the next empty block
// would have come. A member's session runs from the block time of its
// last heartbeat, which under BFT time (the median vote time of the
// previous commit) is no later than the wall time the heartbeat was sent,
// so the bound holds however the heartbeats fell. Before the fix the tick
// block carried the previous commit's older time and fired nothing; the
// next tick waited for the chain to be idle again. The measured lateness
// is logged.
func TestStaticMembersExpireOnIdleChain(t *testing.T) {
	const (
		topic, group  = "statics", "static-group"
		session       = 6 * time.Second
		emptyBlockGap = 2 * time.Second // cometbft.DefaultCreateEmptyBlocksInterval
		members       = 3
		pollEach      = 50 * time.Millisecond
	)
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	seeds := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, seeds, topic, 3, nil)

	var clients []*kgo.Client
	sent := &groupWrites{}
	for i := range members {
		cl, err := kgo.NewClient(kgo.WithHooks(sent), kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.InstanceID(fmt.Sprintf("static-%d", i)), kgo.SessionTimeout(session),
			kgo.HeartbeatInterval(time.Second), kgo.ClientID(fmt.Sprintf("static%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cl)
		go func() {
			for !cl.PollFetches(context.Background()).IsClientClosed() {
			}
		}()
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	stable := func() error {
		ds, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			return err
		}
		d := ds[group]
		if d.State != "Stable" || len(d.Members) != members {
			return fmt.Errorf("group %s with %d members", d.State, len(d.Members))
		}
		return nil
	}
	for deadline := time.Now().Add(60 * time.Second); stable() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("group not stable after 60 s: %v", stable())
		}
	}
	// Let the chain go idle: only the members' heartbeats make blocks.
	time.Sleep(3 * time.Second)
	for _, cl := range clients {
		cl.Close() // static members do not leave
	}
	closed := time.Now()
	deleteGroup := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := adm.DeleteGroup(ctx, group)
		if err != nil {
			return err
		}
		return r.Err
	}
	if err := deleteGroup(); !errors.Is(err, kerr.NonEmptyGroup) {
		t.Fatalf("DeleteGroups right after the static members closed: %v, want NON_EMPTY_GROUP", err)
	}
	// DescribeGroups reads the committed view and orders nothing, so
	// polling it leaves the chain idle (polling DeleteGroups would not: each
	// one is a command, a block, and those blocks would fire the timers).
	var emptied time.Time
	for deadline := closed.Add(session + 20*time.Second); time.Now().Before(deadline); time.Sleep(pollEach) {
		ds, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			t.Logf("%s DescribeGroups: %v", harness.Clock(), err)
			continue
		}
		if d := ds[group]; d.Err == nil && len(d.Members) == 0 {
			emptied = time.Now()
			break
		}
	}
	if emptied.IsZero() {
		t.Fatalf("group still not empty %v after the static members closed", session+20*time.Second)
	}
	if err := deleteGroup(); err != nil {
		t.Fatalf("DeleteGroups once the group is empty: %v", err)
	}
	last := sent.last()
	late := emptied.Sub(last) - session
	t.Logf("group empty %v after Close, %v after the last member request: %v after the session timeout",
		emptied.Sub(closed).Round(time.Millisecond), emptied.Sub(last).Round(time.Millisecond), late.Round(time.Millisecond))
	if late > emptyBlockGap {
		t.Errorf("the group emptied %v after the session timeout, later than the next empty block (%v) would have come", late.Round(time.Millisecond), emptyBlockGap)
	}
}

// groupWrites records when a member last wrote a JoinGroup, Heartbeat or
// SyncGroup request (what renews its session).
type groupWrites struct {
	mu sync.Mutex
	at time.Time
}

func (g *groupWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || (key != 11 && key != 12 && key != 14) {
		return
	}
	g.mu.Lock()
	g.at = time.Now()
	g.mu.Unlock()
}

func (g *groupWrites) last() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.at
}
