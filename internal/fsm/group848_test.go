package fsm

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
)

func cgJoin(member string, topics ...string) groups.ConsumerGroupHeartbeat {
	return groups.ConsumerGroupHeartbeat{Group: "cg", MemberID: member, ClientID: "c", RebalanceTimeoutMs: 10_000,
		TopicsSet: true, Topics: topics, OwnedSet: true}
}

func cgBeat(member string, epoch int32, owned core.TopicPartitions, ids map[string]core.TopicID) groups.ConsumerGroupHeartbeat {
	c := groups.ConsumerGroupHeartbeat{Group: "cg", MemberID: member, Epoch: epoch, RebalanceTimeoutMs: -1}
	if owned != nil {
		c.OwnedSet = true
		for _, t := range core.SortedKeys(owned) {
			c.Owned = append(c.Owned, groups.OwnedTopic{ID: ids[t], Partitions: owned[t]})
		}
	}
	return c
}

func wantAssignment(t *testing.T, what string, r core.Result, epoch int32, want core.TopicPartitions) {
	t.Helper()
	if r.Code != 0 || r.Group == nil {
		t.Fatalf("%s: code %d (%s)", what, r.Code, r.Message)
	}
	if r.Group.Generation != epoch {
		t.Fatalf("%s: epoch %d, want %d", what, r.Group.Generation, epoch)
	}
	if want == nil {
		if r.Group.SendAssignment {
			t.Fatalf("%s: sent assignment %v, want none (unchanged)", what, r.Group.Assignment)
		}
		return
	}
	if !r.Group.SendAssignment || !r.Group.Assignment.Equal(want) {
		t.Fatalf("%s: assignment %v (sent %v), want %v", what, r.Group.Assignment, r.Group.SendAssignment, want)
	}
}

// TestConsumerGroupProtocol drives KIP-848's protocol through its steps:
// a join takes everything, a second member's join moves the group epoch,
// the first member must revoke half before the second gets it, epochs are
// fenced, commits need the current epoch, a leave and a session lapse in
// block time move partitions back; then the same blocks on another state
// machine give the same hashes and groups.
func TestConsumerGroupProtocol(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "orders", Partitions: 4, ReplicationFactor: -1})
	ids := map[string]core.TopicID{"orders": d.f.View().Topic("orders").ID}
	all := core.TopicPartitions{"orders": {0, 1, 2, 3}}

	wantAssignment(t, "A joins", d.block(100, cgJoin("A", "orders"))[0], 1, all)
	r := d.block(100, cgJoin("B", "orders"))[0]
	wantAssignment(t, "B joins while A holds everything", r, 2, core.TopicPartitions{})
	g := d.f.Groups().Group("cg")
	if g.Type != groups.GroupConsumer || g.Epoch != 2 || g.AssignmentEpoch != 2 || g.Assignor != "uniform" || g.ConsumerState != "Reconciling" {
		t.Fatalf("after B joined: %+v", g)
	}
	targetA := g.ConsumerMember("A").Target
	targetB := g.ConsumerMember("B").Target
	if targetA.Count() != 2 || targetB.Count() != 2 || !targetA.Minus(all).Equal(core.TopicPartitions{}) {
		t.Fatalf("targets A %v B %v", targetA, targetB)
	}
	// A must give up B's half first, keeping its epoch.
	wantAssignment(t, "A told to revoke", d.block(100, cgBeat("A", 1, all, ids))[0], 1, targetA)
	wantAssignment(t, "B waits while A revokes", d.block(100, cgBeat("B", 2, nil, ids))[0], 2, nil)
	wantAssignment(t, "A reports the revocation", d.block(100, cgBeat("A", 1, targetA, ids))[0], 2, nil)
	wantAssignment(t, "B receives its half", d.block(100, cgBeat("B", 2, nil, ids))[0], 2, targetB)
	if s := d.f.Groups().Group("cg").ConsumerState; s != "Stable" {
		t.Fatalf("state %s after reconciliation, want Stable", s)
	}

	r2 := d.block(100,
		cgBeat("B", 9, nil, ids),
		cgBeat("nobody", 2, nil, ids),
		groups.OffsetCommit{Group: "cg", MemberID: "B", Generation: 2, Topic: "orders", Partition: targetB["orders"][0], Offset: 11},
		groups.OffsetCommit{Group: "cg", MemberID: "B", Generation: 1, Topic: "orders", Partition: targetB["orders"][0], Offset: 12},
		groups.OffsetCommit{Group: "cg", Generation: -1, Topic: "orders", Partition: 0, Offset: 1},
		groups.JoinGroup{Group: "cg", ClientID: "old", ProtocolType: "consumer", Protocols: []groups.GroupProtocol{{Name: "range"}},
			SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 10_000},
		groups.DeleteGroup{Group: "cg"},
		groups.OffsetDelete{Group: "cg", Topic: "orders", Partition: 0},
	)
	for i, want := range []int16{kerr.FencedMemberEpoch.Code, kerr.UnknownMemberID.Code, 0, kerr.StaleMemberEpoch.Code,
		kerr.UnknownMemberID.Code, kerr.InconsistentGroupProtocol.Code, kerr.NonEmptyGroup.Code, kerr.GroupSubscribedToTopic.Code} {
		wantCode(t, "consumer group command "+string(rune('0'+i)), r2[i], want)
	}

	// A leaves; B takes everything at its next heartbeat.
	r = d.block(100, groups.ConsumerGroupHeartbeat{Group: "cg", MemberID: "A", Epoch: -1})[0]
	if r.Code != 0 || r.Group.Generation != -1 {
		t.Fatalf("leave: %+v", r)
	}
	wantAssignment(t, "B after A left", d.block(100, cgBeat("B", 2, targetB, ids))[0], 3, all)

	// B falls silent: its session lapses in block time.
	d.block(groups.ConsumerSessionTimeoutMs + 1)
	if g := d.f.Groups().Group("cg"); len(g.Consumers) != 0 || g.ConsumerState != "Empty" {
		t.Fatalf("after B's session lapsed: %+v", g)
	}
	wantCode(t, "B heartbeats after expiring", d.block(100, cgBeat("B", 3, nil, ids))[0], kerr.UnknownMemberID.Code)

	// Range, three members on four partitions: contiguous ranges by
	// member id, the first one larger.
	rj := func(id string) groups.ConsumerGroupHeartbeat {
		c := cgJoin(id, "orders")
		c.Group, c.AssignorSet, c.Assignor = "rg", true, "range"
		return c
	}
	d.block(100, rj("m1"), rj("m2"), rj("m3"))
	rg := d.f.Groups().Group("rg")
	want := map[string]core.TopicPartitions{"m1": {"orders": {0, 1}}, "m2": {"orders": {2}}, "m3": {"orders": {3}}}
	for id, tp := range want {
		if got := rg.ConsumerMember(id).Target; !got.Equal(tp) {
			t.Errorf("range target of %s: %v, want %v", id, got, tp)
		}
	}
	if rg.Assignor != "range" {
		t.Errorf("assignor %q, want range", rg.Assignor)
	}

	other := d.replay()
	if !reflect.DeepEqual(other.Groups().Groups(), d.f.Groups().Groups()) {
		t.Fatal("the two state machines hold different groups")
	}
}

// TestConsumerGroupStaticMember: a static member leaving with epoch -2
// keeps its partitions reserved; a new member id with the same instance id
// takes them over; while the old one has not left, the instance id is
// refused (UNRELEASED_INSTANCE_ID).
func TestConsumerGroupStaticMember(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "orders", Partitions: 2, ReplicationFactor: -1})
	s1 := cgJoin("s1", "orders")
	s1.InstanceID = "inst"
	wantAssignment(t, "static join", d.block(100, s1)[0], 1, core.TopicPartitions{"orders": {0, 1}})
	s2 := cgJoin("s2", "orders")
	s2.InstanceID = "inst"
	wantCode(t, "same instance while held", d.block(100, s2)[0], kerr.UnreleasedInstanceID.Code)
	r := d.block(100, groups.ConsumerGroupHeartbeat{Group: "cg", MemberID: "s1", InstanceID: "inst", Epoch: -2})[0]
	if r.Code != 0 || r.Group.Generation != -2 {
		t.Fatalf("static leave: %+v", r)
	}
	wantAssignment(t, "static return", d.block(100, s2)[0], 1, core.TopicPartitions{"orders": {0, 1}})
	if g := d.f.Groups().Group("cg"); len(g.Consumers) != 1 || g.ConsumerMember("s2") == nil || g.Epoch != 1 {
		t.Fatalf("after the takeover: %+v", g)
	}
}

// TestConsumerGroupTopicDeleted (issue 27): when a subscribed topic is
// deleted the group epoch moves at once, the target assignment drops the
// topic, and the member's next heartbeat revokes its partitions (the
// member keeps its epoch while revoking, as KIP-848's reconciliation has
// it); the heartbeat after that takes the new epoch. A member still
// reporting the deleted topic's id is not held up by it: the id no longer
// names a topic.
func TestConsumerGroupTopicDeleted(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "orders", Partitions: 2, ReplicationFactor: -1},
		topics.CreateTopic{Name: "gone", Partitions: 2, ReplicationFactor: -1})
	ids := map[string]core.TopicID{"orders": d.f.View().Topic("orders").ID, "gone": d.f.View().Topic("gone").ID}
	all := core.TopicPartitions{"orders": {0, 1}, "gone": {0, 1}}
	orders := core.TopicPartitions{"orders": {0, 1}}
	wantAssignment(t, "A joins", d.block(100, cgJoin("A", "gone", "orders"))[0], 1, all)
	wantAssignment(t, "A steady", d.block(100, cgBeat("A", 1, all, ids))[0], 1, nil)

	d.block(100, topics.DeleteTopic{Name: "gone"})
	g := d.f.Groups().Group("cg")
	if g.Epoch != 2 || g.AssignmentEpoch != 2 || !g.ConsumerMember("A").Target.Equal(orders) {
		t.Fatalf("after the delete: epoch %d/%d target %v, want 2/2 %v", g.Epoch, g.AssignmentEpoch, g.ConsumerMember("A").Target, orders)
	}
	if g.ConsumerState != "Reconciling" {
		t.Fatalf("state %s after the delete, want Reconciling", g.ConsumerState)
	}
	wantAssignment(t, "A told to revoke the deleted topic", d.block(100, cgBeat("A", 1, all, ids))[0], 1, orders)
	wantAssignment(t, "A reports the revocation", d.block(100, cgBeat("A", 1, all, ids))[0], 2, nil)
	if s := d.f.Groups().Group("cg").ConsumerState; s != "Stable" {
		t.Fatalf("state %s after the revocation, want Stable", s)
	}
	other := d.replay()
	if !reflect.DeepEqual(other.Groups().Groups(), d.f.Groups().Groups()) {
		t.Fatal("the two state machines hold different groups")
	}
}

// TestConsumerGroupRegexResolvedLater (issue 27): Kafka's coordinator
// resolves a regular expression new to the group asynchronously
// (GroupMetadataManager.maybeUpdateRegularExpressions): the heartbeat that
// brings it is answered with the literal topics' partitions only, and the
// regex's topics join the target at a later group epoch. Here the end of
// the block resolves it. A topic created later that the regex matches
// joins at the end of its block, a member bringing a regex the group has
// already resolved is assigned its topics at once, and the resolution is
// replayed alike.
func TestConsumerGroupRegexResolvedLater(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: -1},
		topics.CreateTopic{Name: "ev-1", Partitions: 1, ReplicationFactor: -1})
	view := d.f.View()
	ids := map[string]core.TopicID{"orders": view.Topic("orders").ID, "ev-1": view.Topic("ev-1").ID}
	join := func(id string) groups.ConsumerGroupHeartbeat {
		c := cgJoin(id, "orders")
		c.RegexSet, c.Regex = true, "ev-.*"
		return c
	}
	literal := core.TopicPartitions{"orders": {0}}
	wantAssignment(t, "A joins with a literal topic and a regex", d.block(100, join("A"))[0], 1, literal)
	g := d.f.Groups().Group("cg")
	if g.Epoch != 2 || !g.ConsumerMember("A").Target.Equal(core.TopicPartitions{"orders": {0}, "ev-1": {0}}) {
		t.Fatalf("after the join's block: epoch %d target %v, want 2 with ev-1 resolved", g.Epoch, g.ConsumerMember("A").Target)
	}
	both := core.TopicPartitions{"orders": {0}, "ev-1": {0}}
	wantAssignment(t, "A's next heartbeat takes the regex's topics", d.block(100, cgBeat("A", 1, literal, ids))[0], 2, both)

	d.block(100, topics.CreateTopic{Name: "ev-2", Partitions: 1, ReplicationFactor: -1})
	ids["ev-2"] = d.f.View().Topic("ev-2").ID
	if g := d.f.Groups().Group("cg"); g.Epoch != 3 {
		t.Fatalf("epoch %d after a matching topic was created, want 3", g.Epoch)
	}
	three := core.TopicPartitions{"orders": {0}, "ev-1": {0}, "ev-2": {0}}
	wantAssignment(t, "A takes the new topic", d.block(100, cgBeat("A", 2, both, ids))[0], 3, three)

	// B brings the regex the group already resolved: its join's target
	// covers the regex's topics (B gets its share once A releases it).
	d.block(100, join("B"))
	if tb := d.f.Groups().Group("cg").ConsumerMember("B").Target; tb.Count() == 0 {
		t.Fatalf("B's target %v is empty", tb)
	}
	if g := d.f.Groups().Group("cg"); g.Epoch != 4 {
		t.Fatalf("epoch %d after B joined, want 4 (no second bump for a resolved regex)", g.Epoch)
	}
	other := d.replay()
	if !reflect.DeepEqual(other.Groups().Groups(), d.f.Groups().Groups()) {
		t.Fatal("the two state machines hold different groups")
	}
}
