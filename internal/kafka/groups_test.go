package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
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
		kip848   bool
	}{
		{"range", kgo.RangeBalancer(), false},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer(), false},
		// KIP-848: the broker assigns, with the uniform and range assignors.
		{"kip848-uniform", kgo.StickyBalancer(), true},
		{"kip848-range", kgo.RangeBalancer(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := startTestBrokerClocked(t, 20*time.Millisecond)
			adm := kadm.NewClient(client(t, tb.addr))
			const topic, group, n = "orders", "billing", 600
			if _, err := adm.CreateTopic(context.Background(), 6, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			produceValues(t, tb.addr, topic, 0, n)
			var members []*groupConsumer
			for range 3 {
				opts := []kgo.Opt{kgo.Balancers(tc.balancer)}
				if tc.kip848 {
					opts = append(opts, kgo.ServerSideBalancer())
				}
				gc := startGroupConsumer(t, tb.addr, group, topic, opts...)
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
			if tc.kip848 {
				// The group really is a KIP-848 group.
				lg, err := adm.ListGroups(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if typ := lg[group].GroupType; typ != "consumer" {
					t.Fatalf("group type %q, want consumer (KIP-848)", typ)
				}
			}
			// Every record was seen, but a partition that moved may not
			// have been fetched by its new owner yet when the group turns
			// stable, and what its previous owner committed need not be
			// its end: the members commit until the group's offsets reach
			// the end (a CI run saw 218 of 600 from a single commit).
			waitFor(t, 30*time.Second, "committed offsets at the end of every partition", func() error {
				for _, m := range members {
					if err := m.cl.CommitUncommittedOffsets(context.Background()); err != nil {
						return err
					}
				}
				offs, err := adm.FetchOffsets(context.Background(), group)
				if err != nil {
					return err
				}
				var committed int64
				offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
				if committed != n {
					return fmt.Errorf("committed offsets sum to %d, want %d (every record consumed)", committed, n)
				}
				return nil
			})
		})
	}
}

// rawRequest sends req to addr and returns the response.
func rawRequest(t *testing.T, cl *kgo.Client, req kmsg.Request) kmsg.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

func rawJoin(t *testing.T, cl *kgo.Client, group, member string, session int32) *kmsg.JoinGroupResponse {
	t.Helper()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = session, 10_000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte{0, 0, 0, 0, 0, 0}
	req.Protocols = append(req.Protocols, p)
	return rawRequest(t, cl, req).(*kmsg.JoinGroupResponse)
}

// TestGroupErrorCodes: what Kafka answers to bad group requests, answered
// the same way; nothing is corrupted (the group still works after).
func TestGroupErrorCodes(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	cl := client(t, tb.addr, kgo.MaxVersions(kversion.V3_8_0()))
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got int16, want *kerr.Error) {
		t.Helper()
		if got != want.Code {
			t.Errorf("%s: %v, want %v", what, kerr.ErrorForCode(got), want)
		}
	}
	check("session timeout below group.min.session.timeout.ms", rawJoin(t, cl, "g", "", 1000).ErrorCode, kerr.InvalidSessionTimeout)
	check("empty group id", rawJoin(t, cl, "", "", 10_000).ErrorCode, kerr.InvalidGroupID)
	check("unknown member of an unknown group", rawJoin(t, cl, "g", "nobody", 10_000).ErrorCode, kerr.UnknownMemberID)
	first := rawJoin(t, cl, "g", "", 10_000)
	check("join without a member id (v4+)", first.ErrorCode, kerr.MemberIDRequired)
	joined := rawJoin(t, cl, "g", first.MemberID, 10_000)
	check("join with the given id", joined.ErrorCode, nil0)
	if joined.Generation != 1 || joined.LeaderID != first.MemberID || len(joined.Members) != 1 {
		t.Fatalf("join answer: generation %d leader %q members %d", joined.Generation, joined.LeaderID, len(joined.Members))
	}

	other := kmsg.NewPtrJoinGroupRequest()
	other.Group, other.MemberID, other.ProtocolType = "g", "", "connect"
	other.SessionTimeoutMillis, other.RebalanceTimeoutMillis = 10_000, 10_000
	other.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "x"}}
	check("another protocol type", rawRequest(t, cl, other).(*kmsg.JoinGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol)

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", first.MemberID, 7
	check("heartbeat of a stale generation", rawRequest(t, cl, hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.IllegalGeneration)
	hb.MemberID, hb.Generation = "ghost", 1
	check("heartbeat of an unknown member", rawRequest(t, cl, hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID)

	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "g", first.MemberID, 1
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: first.MemberID, MemberAssignment: []byte("mine")}}
	sr := rawRequest(t, cl, sync).(*kmsg.SyncGroupResponse)
	if sr.ErrorCode != 0 || string(sr.MemberAssignment) != "mine" {
		t.Fatalf("leader sync: %v %q", kerr.ErrorForCode(sr.ErrorCode), sr.MemberAssignment)
	}

	commit := func(member string, gen int32, meta string) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = "g", member, gen
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.Metadata = 1, 5, &meta
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawRequest(t, cl, req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	check("commit of a stale generation", commit(first.MemberID, 0, ""), kerr.IllegalGeneration)
	check("commit outside any generation to a group with members", commit("", -1, ""), kerr.UnknownMemberID)
	check("commit with oversized metadata", commit(first.MemberID, 1, strings.Repeat("m", 4097)), kerr.OffsetMetadataTooLarge)
	check("commit", commit(first.MemberID, 1, "ok"), nil0)

	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"g", "nope"}
	dr := rawRequest(t, cl, del).(*kmsg.DeleteGroupsResponse)
	check("delete a group with members", dr.Groups[0].ErrorCode, kerr.NonEmptyGroup)
	check("delete an unknown group", dr.Groups[1].ErrorCode, kerr.GroupIDNotFound)

	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "g"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}}}}
	// The range metadata above subscribes to no topic, so the offset of a
	// topic nobody subscribes to may go even while the group has members.
	odr := rawRequest(t, cl, od).(*kmsg.OffsetDeleteResponse)
	check("offset delete (not subscribed)", odr.ErrorCode, nil0)
	check("offset delete partition (not subscribed)", odr.Topics[0].Partitions[0].ErrorCode, nil0)

	// The member never heartbeats: its 6 s session lapses in block time
	// and the group empties, after which it can be deleted.
	gone := time.Now()
	waitFor(t, 20*time.Second, "the silent member expires", func() error {
		desc := kmsg.NewPtrDescribeGroupsRequest()
		desc.Groups = []string{"g"}
		g := rawRequest(t, cl, desc).(*kmsg.DescribeGroupsResponse).Groups[0]
		if g.State != "Empty" || len(g.Members) != 0 {
			return fmt.Errorf("state %s, %d members", g.State, len(g.Members))
		}
		return nil
	})
	if d := time.Since(gone); d < 4*time.Second {
		t.Errorf("the member expired after %v, before its 6 s session could lapse", d)
	}
	dr = rawRequest(t, cl, del).(*kmsg.DeleteGroupsResponse)
	check("delete the emptied group", dr.Groups[0].ErrorCode, nil0)
}

// nil0 stands for "no error" in check.
var nil0 = &kerr.Error{Message: "NONE", Code: 0}

// TestGroupMembersComeAndGo: one producer keeps writing to six partitions
// while group members come and go: three start, a fourth joins, one leaves
// cleanly, and one static member stops without leaving (as a crashed
// process would: static members do not send LeaveGroup) so that its
// partitions move only when its 6 s session lapses. Every record is
// consumed, and a record read twice is never below the committed offset
// of its partition at the time the silent member stopped: nothing
// committed is re-read.
func TestGroupMembersComeAndGo(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	adm := kadm.NewClient(client(t, tb.addr))
	const topic, group = "events", "workers"
	if _, err := adm.CreateTopic(context.Background(), 6, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	type read struct {
		p   int32
		off int64
	}
	var (
		mu    sync.Mutex
		reads = map[read]int{}
	)
	start := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tb.addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond),
			kgo.AutoCommitInterval(100 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				fs := cl.PollFetches(context.Background())
				if fs.IsClientClosed() {
					return
				}
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					reads[read{r.Partition, r.Offset}]++
					mu.Unlock()
				})
			}
		}()
		return cl
	}
	prod := client(t, tb.addr, kgo.DefaultProduceTopic(topic))
	stop := make(chan struct{})
	produced := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				produced <- n
				return
			default:
			}
			rs := make([]*kgo.Record, 10)
			for i := range rs {
				rs[i] = &kgo.Record{Key: []byte(fmt.Sprint(n % 31)), Value: []byte(fmt.Sprint(n))}
				n++
			}
			if err := prod.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	silent := start(kgo.InstanceID("silent-1"))
	a, b := start(), start()
	defer a.Close()
	time.Sleep(4 * time.Second)
	c := start()
	defer c.Close()
	time.Sleep(2 * time.Second)
	b.Close() // leaves the group
	time.Sleep(2 * time.Second)
	silent.Close() // a static member: no LeaveGroup
	before, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(9 * time.Second) // its session lapses; its partitions move
	close(stop)
	n := <-produced
	waitFor(t, 30*time.Second, "every produced record consumed", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(reads) < n {
			return fmt.Errorf("%d of %d records consumed", len(reads), n)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	again := 0
	for r, k := range reads {
		if k < 2 {
			continue
		}
		again++
		if o, ok := before.Lookup(topic, r.p); ok && r.off < o.At {
			t.Errorf("partition %d offset %d read %d times, below the offset %d committed before the member stopped", r.p, r.off, k, o.At)
		}
	}
	t.Logf("%d records produced and consumed, %d read more than once (after the last commit)", n, again)
	ds, err := adm.DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	if g := ds[group]; len(g.Members) != 2 {
		t.Errorf("the group has %d members at the end, want the 2 still running", len(g.Members))
	}
}
