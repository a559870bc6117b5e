package fsm

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// groupDriver applies blocks of commands one at a time, keeping them so
// that the same blocks can be fed to another state machine.
type groupDriver struct {
	t      *testing.T
	f      *FSM
	now    int64
	blocks []block
	hashes [][]byte
	nonce  int
}

func (d *groupDriver) block(dt int64, cmds ...core.Command) []core.Result {
	d.t.Helper()
	d.now += dt
	var txs [][]byte
	for _, c := range cmds {
		d.nonce++
		txs = append(txs, tx(d.nonce, c))
	}
	d.blocks = append(d.blocks, block{time: d.now, txs: txs})
	out, err := d.f.ApplyBlock(core.Block{Height: int64(len(d.blocks)), TimeMs: d.now, Txs: txs})
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.f.Commit(); err != nil {
		d.t.Fatal(err)
	}
	d.hashes = append(d.hashes, out.AppHash)
	var rs []core.Result
	for _, o := range out.Txs {
		rs = append(rs, o.Results...)
	}
	return rs
}

// replay feeds the driver's blocks to a fresh state machine, requires the
// same app hash at every height, and returns it (closed when the test ends).
func (d *groupDriver) replay() *FSM {
	d.t.Helper()
	other := openGroups(d.t, d.t.TempDir())
	d.t.Cleanup(func() { other.Close() })
	return d.replayInto(other)
}

// replayInto feeds the driver's blocks to other, a fresh state machine,
// requires the same app hash at every height, and returns it.
func (d *groupDriver) replayInto(other *FSM) *FSM {
	d.t.Helper()
	for i, b := range d.blocks {
		out, err := other.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: b.time, Txs: b.txs})
		if err != nil {
			d.t.Fatal(err)
		}
		if _, err := other.Commit(); err != nil {
			d.t.Fatal(err)
		}
		if !bytes.Equal(out.AppHash, d.hashes[i]) {
			d.t.Fatalf("app hash differs at height %d", i+1)
		}
	}
	return other
}

func wantCode(t *testing.T, what string, r core.Result, code int16) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("%s: code %d (%s), want %d", what, r.Code, r.Message, code)
	}
}

func openGroups(t *testing.T, dir string) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, OffsetsRetentionMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func join(group, member, client string, requireKnown bool) groups.JoinGroup {
	return groups.JoinGroup{Group: group, MemberID: member, ClientID: client, ProtocolType: "consumer",
		Protocols:        []groups.GroupProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 1, 0, 6, 'o', 'r', 'd', 'e', 'r', 's'}}},
		SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 20_000, RequireKnownMember: requireKnown}
}

// TestGroupLifecycleDeterministic drives a group through Kafka's classic
// protocol — MEMBER_ID_REQUIRED, the initial rebalance delay, leader
// election, the leader's assignment, heartbeats, commits, a session expiry
// in block time, a rebalance, a leave, static membership with fencing,
// offset expiry and deletion — checking each result's error code; then
// feeds the same blocks to a second state machine and requires the same app
// hashes and groups, and reopens the first from disk with the same groups.
func TestGroupLifecycleDeterministic(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	d.block(0, topics.CreateTopic{Name: "orders", Partitions: 3, ReplicationFactor: -1})

	r := d.block(100, join("g", "", "c1", true), join("g", "", "c2", false))
	wantCode(t, "join without member id (v4+)", r[0], kerr.MemberIDRequired.Code)
	idA, idB := r[0].Group.MemberID, r[1].Group.MemberID
	if !strings.HasPrefix(idA, "c1-") || !strings.HasPrefix(idB, "c2-") || idA == idB {
		t.Fatalf("member ids %q, %q", idA, idB)
	}
	wantCode(t, "join (v3)", r[1], 0)
	r = d.block(100, join("g", idA, "c1", true), join("g", "c1-forged", "c1", true))
	wantCode(t, "rejoin with the given id", r[0], 0)
	wantCode(t, "join with an id never given", r[1], kerr.UnknownMemberID.Code)

	g := d.f.Groups().Group("g")
	if g.State != groups.GroupPreparingRebalance || g.Generation != 0 {
		t.Fatalf("during the initial delay: %s generation %d", g.State, g.Generation)
	}
	// The delay is counted from the block after the first join (the one
	// above), never from the join's own block time.
	d.block(groups.GroupInitialRebalanceDelayMs - 1)
	if g = d.f.Groups().Group("g"); g.State != groups.GroupPreparingRebalance {
		t.Fatalf("the initial delay ended early: %s", g.State)
	}
	d.block(1) // the delay passes in block time
	g = d.f.Groups().Group("g")
	if g.State != groups.GroupCompletingRebalance || g.Generation != 1 || g.Leader != idB || g.Protocol != "range" || len(g.Members) != 2 {
		t.Fatalf("after the delay: %+v", g)
	}

	r = d.block(100,
		groups.SyncGroup{Group: "g", MemberID: idA, Generation: 1},
		groups.Heartbeat{Group: "g", MemberID: idA, Generation: 1},
		groups.SyncGroup{Group: "g", MemberID: idB, Generation: 1, Assignments: []groups.MemberAssignment{{MemberID: idA, Assignment: []byte("a")}, {MemberID: idB, Assignment: []byte("b")}, {MemberID: "ghost", Assignment: []byte("x")}}},
		groups.SyncGroup{Group: "g", MemberID: idB, Generation: 0},
		groups.Heartbeat{Group: "g", MemberID: "ghost", Generation: 1},
		groups.OffsetCommit{Group: "g", MemberID: idA, Generation: 1, Topic: "orders", Partition: 0, Offset: 10, LeaderEpoch: 3, Metadata: "m"},
		groups.OffsetCommit{Group: "g", Generation: -1, Topic: "orders", Partition: 1, Offset: 5},
		groups.OffsetCommit{Group: "g", MemberID: idA, Generation: 1, Topic: "orders", Partition: 9, Offset: 5},
		groups.OffsetCommit{Group: "g", MemberID: idA, Generation: 1, Topic: "orders", Partition: 1, Offset: 5, Metadata: strings.Repeat("x", groups.MaxOffsetMetadata+1)},
		groups.DeleteGroup{Group: "g"},
	)
	for i, want := range []int16{0, 0, 0, kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, 0,
		kerr.UnknownMemberID.Code, kerr.UnknownTopicOrPartition.Code, kerr.OffsetMetadataTooLarge.Code, kerr.NonEmptyGroup.Code} {
		wantCode(t, "stable-phase command "+string(rune('0'+i)), r[i], want)
	}
	g = d.f.Groups().Group("g")
	if g.State != groups.GroupStable || string(g.Member(idA).Assignment) != "a" || string(g.Member(idB).Assignment) != "b" {
		t.Fatalf("after the leader's sync: %+v", g)
	}
	if o := g.Offsets["orders"][0]; o.Offset != 10 || o.LeaderEpoch != 3 || o.Metadata != "m" {
		t.Fatalf("committed offset %+v", o)
	}

	// Only B heartbeats: A's session (10 s) lapses in block time, the group
	// rebalances, B rejoins and forms generation 2 alone.
	for range 6 {
		wantCode(t, "B's heartbeat", d.block(2000, groups.Heartbeat{Group: "g", MemberID: idB, Generation: 1})[0], 0)
	}
	r = d.block(2000, groups.Heartbeat{Group: "g", MemberID: idB, Generation: 1})
	if g = d.f.Groups().Group("g"); g.Member(idA) != nil || g.State != groups.GroupPreparingRebalance {
		t.Fatalf("A should have expired and the group be rebalancing: %+v", g)
	}
	r = d.block(100, groups.Heartbeat{Group: "g", MemberID: idB, Generation: 1}, join("g", idB, "c2", true))
	wantCode(t, "heartbeat while rebalancing", r[0], kerr.RebalanceInProgress.Code)
	if g = d.f.Groups().Group("g"); g.Generation != 2 || g.State != groups.GroupCompletingRebalance || g.Leader != idB {
		t.Fatalf("B alone should form generation 2: %+v", g)
	}
	r = d.block(100, groups.LeaveGroup{Group: "g", MemberID: idB}, groups.LeaveGroup{Group: "g", MemberID: idB})
	wantCode(t, "leave", r[0], 0)
	wantCode(t, "second leave", r[1], kerr.UnknownMemberID.Code)
	if g = d.f.Groups().Group("g"); g.State != groups.GroupEmpty || g.Generation != 3 || len(g.Members) != 0 {
		t.Fatalf("after the last member left: %+v", g)
	}
	wantCode(t, "simple commit to an empty group", d.block(100,
		groups.OffsetCommit{Group: "g", Generation: -1, Topic: "orders", Partition: 2, Offset: 7})[0], 0)

	// Static membership: a restarted instance takes over without a
	// rebalance; its old member id is fenced.
	s := join("s", "", "app", false)
	s.InstanceID = "i-1"
	idS := d.block(100, s)[0].Group.MemberID
	d.block(100) // the next block arms the initial delay
	d.block(groups.GroupInitialRebalanceDelayMs)
	wantCode(t, "static leader sync", d.block(100, groups.SyncGroup{Group: "s", MemberID: idS, Generation: 1,
		Assignments: []groups.MemberAssignment{{MemberID: idS, Assignment: []byte("all")}}})[0], 0)
	r = d.block(100, s)
	wantCode(t, "static rejoin", r[0], 0)
	idS2 := r[0].Group.MemberID
	if idS2 == idS || !r[0].Group.Ready || r[0].Group.Generation != 1 {
		t.Fatalf("static rejoin result %+v", r[0].Group)
	}
	wantCode(t, "old static id heartbeat", d.block(100, groups.Heartbeat{Group: "s", MemberID: idS, InstanceID: "i-1", Generation: 1})[0], kerr.FencedInstanceID.Code)
	if g = d.f.Groups().Group("s"); g.State != groups.GroupStable || string(g.Member(idS2).Assignment) != "all" {
		t.Fatalf("static takeover changed the group: %+v", g)
	}
	wantCode(t, "leave by instance id", d.block(100, groups.LeaveGroup{Group: "s", InstanceID: "i-1"})[0], 0)

	// Offsets of an empty group expire after the retention (60 s here)
	// and the group goes with them; a deleted topic takes its offsets.
	wantCode(t, "commit in another group", d.block(100, groups.OffsetCommit{Group: "h", Generation: -1, Topic: "orders", Partition: 0, Offset: 1})[0], 0)
	d.block(100, topics.DeleteTopic{Name: "orders"})
	if h := d.f.Groups().Group("h"); h == nil || len(h.Offsets) != 0 {
		t.Fatalf("group h after its topic was deleted: %+v", h)
	}
	wantCode(t, "delete empty group", d.block(100, groups.DeleteGroup{Group: "g"})[0], 0)
	wantCode(t, "delete it again", d.block(100, groups.DeleteGroup{Group: "g"})[0], kerr.GroupIDNotFound.Code)
	d.block(61_000)
	d.block(1000)
	if got := d.f.Groups().Groups(); len(got) != 0 {
		t.Fatalf("groups left after retention: %d (first %+v)", len(got), got[0])
	}

	// The same blocks on another state machine: same hashes, same groups
	// at every step that matters (compared at the end, and the hashes
	// chain every result on the way).
	other := d.replay()
	if !reflect.DeepEqual(other.Groups().Groups(), d.f.Groups().Groups()) {
		t.Fatal("the two state machines hold different groups")
	}
	d.f.Close()
}

// TestGroupsSurviveReopen: groups, members, assignments and offsets are
// read back from the store as they were committed.
func TestGroupsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	d.block(0, topics.CreateTopic{Name: "orders", Partitions: 2, ReplicationFactor: -1})
	s := join("g", "", "c", false)
	s.InstanceID = "inst"
	id := d.block(100, s, join("g", "", "d", false))[0].Group.MemberID
	d.block(100)
	d.block(groups.GroupInitialRebalanceDelayMs)
	d.block(100, groups.SyncGroup{Group: "g", MemberID: id, Generation: 1, Assignments: []groups.MemberAssignment{{MemberID: id, Assignment: []byte("x")}}},
		groups.OffsetCommit{Group: "g", MemberID: id, Generation: 1, Topic: "orders", Partition: 1, Offset: 42, LeaderEpoch: 1, Metadata: "meta"},
		groups.OffsetCommit{Group: "simple", Generation: -1, Topic: "orders", Partition: 0, Offset: 7})
	before := d.f.Groups().Groups()
	if len(before) != 2 || before[0].State != groups.GroupStable {
		t.Fatalf("before reopening: %+v", before)
	}
	d.f.Close()
	f := openGroups(t, dir)
	defer f.Close()
	after := f.Groups().Groups()
	if len(after) != len(before) {
		t.Fatalf("%d groups after reopening, %d before", len(after), len(before))
	}
	for i := range after {
		if !reflect.DeepEqual(after[i], before[i]) {
			t.Fatalf("after reopening:\n%#v\nwant\n%#v", *after[i], *before[i])
		}
	}
}

// TestGroupCommandLimits: what CheckCommand refuses before ordering, with
// Kafka's error codes.
func TestGroupCommandLimits(t *testing.T) {
	big := join("g", "", "c", false)
	big.Protocols = []groups.GroupProtocol{{Name: "range", Metadata: make([]byte, groups.MaxProtocolMetadata)}}
	short := join("g", "", "c", false)
	short.SessionTimeoutMs = groups.MinSessionTimeoutMs - 1
	long := join("g", "", "c", false)
	long.SessionTimeoutMs = groups.MaxSessionTimeoutMs + 1
	none := join("g", "", "c", false)
	none.Protocols = nil
	twice := join("g", "", "c", false)
	twice.Protocols = append(twice.Protocols, twice.Protocols[0])
	for _, tc := range []struct {
		what string
		cmd  core.Command
		want *kerr.Error
	}{
		{"oversized protocol metadata", big, kerr.InvalidRequest},
		{"session timeout below the minimum", short, kerr.InvalidSessionTimeout},
		{"session timeout above the maximum", long, kerr.InvalidSessionTimeout},
		{"no protocol", none, kerr.InconsistentGroupProtocol},
		{"a protocol named twice", twice, kerr.InconsistentGroupProtocol},
		{"empty group id", join("", "", "c", false), kerr.InvalidGroupID},
		{"NUL in a group id", groups.Heartbeat{Group: "a\x00b"}, kerr.InvalidGroupID},
		{"oversized assignment", groups.SyncGroup{Group: "g", Assignments: []groups.MemberAssignment{{MemberID: "m", Assignment: make([]byte, groups.MaxAssignment+1)}}}, kerr.InvalidRequest},
		{"leave naming nobody", groups.LeaveGroup{Group: "g"}, kerr.UnknownMemberID},
		{"negative offset", groups.OffsetCommit{Group: "g", Topic: "t", Offset: -2}, kerr.InvalidCommitOffsetSize},
		{"oversized offset metadata", groups.OffsetCommit{Group: "g", Topic: "t", Metadata: strings.Repeat("x", groups.MaxOffsetMetadata+1)}, kerr.OffsetMetadataTooLarge},
	} {
		if got := CheckCommand(tc.cmd); got.Code != tc.want.Code {
			t.Errorf("%s: code %d (%s), want %s", tc.what, got.Code, got.Message, tc.want.Message)
		}
	}
	if r := CheckCommand(join("g", "", "c", false)); r.Code != 0 {
		t.Errorf("a good join is refused: %s", r.Message)
	}
}
