package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/shares"
	"github.com/stele-io/stele/internal/fsm/tenants"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// shareRig applies blocks at times it is given to two machines, which must
// agree on every result (its code and structured fields) and app hash.
type shareRig struct {
	t   *testing.T
	fs  []*FSM
	now int64
	n   int
}

func newShareRig(t *testing.T, version uint32) *shareRig {
	r := &shareRig{t: t, now: t0}
	for range 2 {
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		r.fs = append(r.fs, f)
	}
	t.Cleanup(func() {
		for _, f := range r.fs {
			if f != nil {
				f.Close()
			}
		}
	})
	return r
}

// after applies c in a block ms after the last one.
func (r *shareRig) after(ms int64, c core.Command) core.Result {
	r.t.Helper()
	r.now += ms
	r.n++
	var rs []core.Result
	var hashes [][]byte
	for _, f := range r.fs {
		h, _ := f.Info()
		o, err := f.ApplyBlock(core.Block{Height: h + 1, TimeMs: r.now, Txs: [][]byte{tx(r.n, c)}})
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			r.t.Fatal(err)
		}
		settle(r.t, f)
		res := o.Txs[0].Results[0]
		res.Message = ""
		rs = append(rs, res)
		_, hash := f.Info()
		hashes = append(hashes, hash)
	}
	if !reflect.DeepEqual(rs[0], rs[1]) || !bytes.Equal(hashes[0], hashes[1]) {
		r.t.Fatalf("the machines disagree: %+v and %+v", rs[0], rs[1])
	}
	return rs[0]
}

func (r *shareRig) do(what string, c core.Command, code int16) core.Result {
	r.t.Helper()
	res := r.after(100, c)
	if res.Code != code {
		r.t.Fatalf("%s: code %d, want %d", what, res.Code, code)
	}
	return res
}

// acquired lists the offsets a ShareAcquire's first partition acquired,
// with their delivery counts.
func acquired(res core.Result) (offs []int64, deliveries []int16) {
	if res.Share == nil || len(res.Share.Parts) == 0 {
		return nil, nil
	}
	for _, a := range res.Share.Parts[0].Acquired {
		for o := a.First; o <= a.Last; o++ {
			offs = append(offs, o)
			deliveries = append(deliveries, a.Deliveries)
		}
	}
	return offs, deliveries
}

func keysBatch(t *testing.T, keys ...string) []byte {
	var kv []string
	for i, k := range keys {
		kv = append(kv, k, fmt.Sprintf("v%d", i))
	}
	return keyedBatch(t, t0, -1, -1, -1, false, kv...)
}

func shareAck(first, last int64, typ int8) []ShareAckBatch {
	return []ShareAckBatch{{First: first, Last: last, Types: []int8{typ}}}
}

func shareJoin(group, member string, topics ...string) ShareGroupHeartbeat {
	return ShareGroupHeartbeat{Group: group, MemberID: member, TopicsSet: true, Topics: topics}
}

func fetchFrom(group, member string, max int32, acks ...[]ShareAckBatch) ShareAcquire {
	p := SharePart{Topic: "q", Partition: 0, Acquire: true}
	if len(acks) > 0 {
		p.Acks = acks[0]
	}
	return ShareAcquire{Group: group, MemberID: member, MaxRecords: max, Parts: []SharePart{p}}
}

func ackOnly(group, member string, acks []ShareAckBatch) ShareAcquire {
	return ShareAcquire{Group: group, MemberID: member, Parts: []SharePart{{Topic: "q", Partition: 0, Acks: acks}}}
}

// TestShareGroups (KIP-932, docs/share-groups.md): members of one share
// group acquire records of one partition one by one, each under a lock
// of share.record.lock.duration.ms; accept and reject end a record,
// release and an expired lock make it available again with its delivery
// count kept, and at share.delivery.count.limit it is archived; the
// share-partition start offset moves past what is done. Two machines
// agree on every result and app hash, and a third opened from the first's
// store holds the same groups.
func TestShareGroups(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("records before the group", topics.Produce{Topic: "q", Partition: 0, Records: keysBatch(t, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j")}, 0)
	r.do("earliest", SetShareGroupConfigs{Group: "sg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, 0)

	hb := r.do("m1 joins", shareJoin("sg", "m1", "q"), 0)
	if g := hb.Group; g == nil || !g.SendAssignment || !slices.Equal(g.Assignment["q"], []int32{0}) || g.Generation < 1 {
		t.Fatalf("m1's join: %+v", hb.Group)
	}
	hb = r.do("m2 joins", shareJoin("sg", "m2", "q"), 0)
	if g := hb.Group; !slices.Equal(g.Assignment["q"], []int32{0}) {
		t.Fatalf("m2 shares partition 0 with m1 (more members than partitions): %+v", g)
	}
	// m1's old epoch is not fenced: a share group revokes nothing.
	r.do("m1 heartbeats with its first epoch", ShareGroupHeartbeat{Group: "sg", MemberID: "m1", Epoch: 1}, 0)
	r.do("an epoch never given", ShareGroupHeartbeat{Group: "sg", MemberID: "m1", Epoch: 99}, kerr.FencedMemberEpoch.Code)

	offs, del := acquired(r.do("m1 acquires 4", fetchFrom("sg", "m1", 4), 0))
	if !slices.Equal(offs, []int64{0, 1, 2, 3}) || !slices.Equal(del, []int16{1, 1, 1, 1}) {
		t.Fatalf("m1 acquired %v (deliveries %v)", offs, del)
	}
	if offs, _ := acquired(r.do("m2 acquires the rest", fetchFrom("sg", "m2", 100), 0)); !slices.Equal(offs, []int64{4, 5, 6, 7, 8, 9}) {
		t.Fatalf("m2 acquired %v", offs)
	}
	if offs, _ := acquired(r.do("nothing left", fetchFrom("sg", "m1", 100), 0)); len(offs) != 0 {
		t.Fatalf("m1 acquired %v with every record locked", offs)
	}

	// Acknowledgements: all or none, only of one's own locked records.
	ackCode := func(what string, c ShareAcquire, want int16) {
		t.Helper()
		res := r.do(what, c, 0)
		if got := res.Share.Parts[0].AckCode; got != want {
			t.Fatalf("%s: acknowledgement code %d, want %d", what, got, want)
		}
	}
	ackCode("m2 acknowledges m1's record", ackOnly("sg", "m2", shareAck(0, 0, shares.AckAccept)), kerr.InvalidRecordState.Code)
	ackCode("an offset nobody acquired", ackOnly("sg", "m1", shareAck(20, 20, shares.AckAccept)), kerr.InvalidRequest.Code)
	ackCode("m1's and m2's records at once", ackOnly("sg", "m1", shareAck(3, 4, shares.AckAccept)), kerr.InvalidRecordState.Code)
	ackCode("m1 accepts 0-1, releases 2, rejects 3", ackOnly("sg", "m1", []ShareAckBatch{
		{First: 0, Last: 1, Types: []int8{shares.AckAccept}}, {First: 2, Last: 3, Types: []int8{shares.AckRelease, shares.AckReject}}}), 0)
	ackCode("accepted twice", ackOnly("sg", "m1", shareAck(0, 0, shares.AckAccept)), kerr.InvalidRecordState.Code)
	if g := r.fs[0].ShareGroups().Group("sg"); g.Parts[0].Start != 2 || g.Parts[0].End != 10 {
		t.Fatalf("share partition after 0-1 accepted, 3 rejected: %+v", g.Parts[0])
	}
	offs, del = acquired(r.do("the released record comes again", fetchFrom("sg", "m1", 100), 0))
	if !slices.Equal(offs, []int64{2}) || !slices.Equal(del, []int16{2}) {
		t.Fatalf("redelivery: %v deliveries %v", offs, del)
	}

	// Locks expire on block time: m2's records come again, to m1.
	r.after(shares.DefaultRecordLockMs, Tick{})
	offs, del = acquired(r.do("after the locks expired", fetchFrom("sg", "m1", 100), 0))
	if !slices.Equal(offs, []int64{2, 4, 5, 6, 7, 8, 9}) || !slices.Equal(del, []int16{3, 2, 2, 2, 2, 2, 2}) {
		t.Fatalf("after expiry: %v deliveries %v", offs, del)
	}
	ackCode("m2's expired lock", ackOnly("sg", "m2", shareAck(4, 4, shares.AckAccept)), kerr.InvalidRecordState.Code)
	// Renewing is allowed only where asked for (IsRenewAck).
	renew := ackOnly("sg", "m1", shareAck(4, 9, shares.AckRenew))
	r.do("a renew without IsRenewAck", renew, kerr.InvalidRequest.Code)
	renew.Renew = true
	ackCode("m1 renews its locks of 4-9", renew, 0)

	// Offset 2 is released until the delivery limit (5) archives it.
	for i := range 3 {
		ackCode("release 2", ackOnly("sg", "m1", shareAck(2, 2, shares.AckRelease)), 0)
		if i < 2 {
			if offs, del := acquired(r.do("2 again", fetchFrom("sg", "m1", 1), 0)); !slices.Equal(offs, []int64{2}) || del[0] != int16(4+i) {
				t.Fatalf("2 again: %v %v", offs, del)
			}
		}
	}
	if g := r.fs[0].ShareGroups().Group("sg"); g.Parts[0].Start != 4 {
		t.Fatalf("offset 2 was not archived at its fifth delivery: %+v", g.Parts[0])
	}

	// A member that leaves releases its records; a silent one is expired.
	r.do("m1 leaves", ShareGroupHeartbeat{Group: "sg", MemberID: "m1", Epoch: -1}, 0)
	if offs, _ := acquired(r.do("m2 takes m1's", fetchFrom("sg", "m2", 100), 0)); !slices.Equal(offs, []int64{4, 5, 6, 7, 8, 9}) {
		t.Fatalf("after m1 left m2 acquired %v", offs)
	}
	r.do("m1 acquires after leaving", fetchFrom("sg", "m1", 100), kerr.UnknownMemberID.Code)
	r.after(shares.DefaultSessionTimeoutMs, Tick{})
	if g := r.fs[0].ShareGroups().Group("sg"); len(g.Members) != 0 || g.State != "Empty" || g.Parts[0].Acquired != 0 || g.Parts[0].InFlight != 6 {
		t.Fatalf("after m2's session expired: %+v", g)
	}

	// The state survives a reopen.
	dir := r.fs[0].opts.Dir
	want := r.fs[0].ShareGroups().Group("sg")
	r.fs[0].Close()
	r.fs[0] = nil
	g, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	r.fs[0] = g
	if got := g.ShareGroups().Group("sg"); !reflect.DeepEqual(got, want) {
		t.Fatalf("reopened: %+v, want %+v", got, want)
	}
	r.do("m3 joins the reopened group", shareJoin("sg", "m3", "q"), 0)
	if offs, del := acquired(r.do("m3 acquires", fetchFrom("sg", "m3", 100), 0)); !slices.Equal(offs, []int64{4, 5, 6, 7, 8, 9}) || del[0] != 4 {
		t.Fatalf("m3 acquired %v %v", offs, del)
	}
	ackCode("m3 accepts everything", ackOnly("sg", "m3", shareAck(4, 9, shares.AckAccept)), 0)
	if p := r.fs[1].ShareGroups().Group("sg").Parts[0]; p.Start != 10 || p.InFlight != 0 {
		t.Fatalf("every record done: %+v", p)
	}
}

// TestShareGroupKeyOrdering (docs/share-groups.md): under
// stele.share.key.ordering=true a record is not acquired while an earlier
// record of its key is in flight, so each key's records are processed one
// at a time, in order, while other keys' go to other members.
func TestShareGroupKeyOrdering(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("configs", SetShareGroupConfigs{Group: "kg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}, {Name: "stele.share.key.ordering", Value: "true"}}}, 0)
	r.do("records", topics.Produce{Topic: "q", Partition: 0, Records: keysBatch(t, "k0", "k1", "k0", "k1", "k2", "k0")}, 0)
	r.do("a joins", shareJoin("kg", "a", "q"), 0)
	r.do("b joins", shareJoin("kg", "b", "q"), 0)
	if offs, _ := acquired(r.do("a acquires", fetchFrom("kg", "a", 100), 0)); !slices.Equal(offs, []int64{0, 1, 4}) {
		t.Fatalf("a acquired %v, want the first record of each key", offs)
	}
	if offs, _ := acquired(r.do("b acquires", fetchFrom("kg", "b", 100), 0)); len(offs) != 0 {
		t.Fatalf("b acquired %v while every key has a record in flight", offs)
	}
	r.do("a accepts k0's first", ackOnly("kg", "a", shareAck(0, 0, shares.AckAccept)), 0)
	if offs, _ := acquired(r.do("b acquires k0's second", fetchFrom("kg", "b", 100), 0)); !slices.Equal(offs, []int64{2}) {
		t.Fatalf("b acquired %v, want k0's second record", offs)
	}
	// A record released comes again before any later record of its key.
	r.do("a releases k1's first", ackOnly("kg", "a", shareAck(1, 1, shares.AckRelease)), 0)
	if offs, del := acquired(r.do("b acquires", fetchFrom("kg", "b", 100), 0)); !slices.Equal(offs, []int64{1}) || del[0] != 2 {
		t.Fatalf("b acquired %v (%v), want k1's first again", offs, del)
	}
	more := keysBatch(t, "k3", "k3")
	r.do("more records", topics.Produce{Topic: "q", Partition: 0, Records: more}, 0)
	if offs, _ := acquired(r.do("a acquires", fetchFrom("kg", "a", 100), 0)); !slices.Equal(offs, []int64{6}) {
		t.Fatalf("a acquired %v, want k3's first only", offs)
	}
}

// TestShareGroupRefusals: what a share group refuses, with Kafka's codes,
// changing nothing: an unknown group, a consumer group's name, an
// unknown member, acknowledgements that do not parse, and every command
// below app version 15.
func TestShareGroupRefusals(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("a consumer group", ConsumerGroupHeartbeat{Group: "cg", MemberID: "c1", RebalanceTimeoutMs: 30000, TopicsSet: true, Topics: []string{"q"}, OwnedSet: true}, 0)
	r.do("a share group named like it", shareJoin("cg", "m", "q"), kerr.GroupIDNotFound.Code)
	r.do("its configs", SetShareGroupConfigs{Group: "cg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, kerr.GroupIDNotFound.Code)
	r.do("a fetch of an unknown group", fetchFrom("nope", "m", 10), kerr.GroupIDNotFound.Code)
	r.do("a heartbeat of an unknown group", ShareGroupHeartbeat{Group: "nope", MemberID: "m", Epoch: 3}, kerr.GroupIDNotFound.Code)
	r.do("a join without topics", ShareGroupHeartbeat{Group: "sg", MemberID: "m"}, kerr.InvalidRequest.Code)
	r.do("m joins", shareJoin("sg", "m", "q"), 0)
	r.do("a fetch of an unknown member", fetchFrom("sg", "x", 10), kerr.UnknownMemberID.Code)
	r.do("an unknown config", SetShareGroupConfigs{Group: "sg", Configs: []ShareConfigEntry{{Name: "share.nope", Value: "1"}}}, kerr.InvalidConfig.Code)
	r.do("a lock too short", SetShareGroupConfigs{Group: "sg", Configs: []ShareConfigEntry{{Name: "share.record.lock.duration.ms", Value: "5"}}}, kerr.InvalidConfig.Code)
	for _, bad := range [][]ShareAckBatch{
		{{First: 5, Last: 4, Types: []int8{1}}},
		{{First: 0, Last: 3, Types: []int8{1, 1}}},
		{{First: 0, Last: 0, Types: []int8{9}}},
		{{First: 3, Last: 4, Types: []int8{1}}, {First: 0, Last: 1, Types: []int8{1}}},
	} {
		r.do(fmt.Sprintf("acknowledgements %+v", bad), ackOnly("sg", "m", bad), kerr.InvalidRequest.Code)
	}
	if offs, _ := acquired(r.do("a partition that does not exist", ShareAcquire{Group: "sg", MemberID: "m", MaxRecords: 1,
		Parts: []SharePart{{Topic: "q", Partition: 7, Acquire: true}}}, 0)); len(offs) != 0 {
		t.Fatal("acquired from a partition that does not exist")
	}

	// Under version 14 a transaction holding a share group command fails
	// whole, as version 14's binaries, which cannot decode it, fail it.
	old, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: shares.Version - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	o, err := old.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{tx(1, shareJoin("sg", "m", "q"))}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Txs[0].Code == 0 || len(o.Txs[0].Results) != 0 {
		t.Fatalf("a share group heartbeat under version 14: %+v", o.Txs[0])
	}
}

// TestConsumerGroupRefusesShareName: a consumer group, classic or
// KIP-848, may not take a share group's name, nor commit offsets under it
// (GROUP_ID_NOT_FOUND, as Kafka answers).
func TestConsumerGroupRefusesShareName(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("a share group", shareJoin("sg", "m", "q"), 0)
	r.do("a KIP-848 member", ConsumerGroupHeartbeat{Group: "sg", MemberID: "c1", RebalanceTimeoutMs: 30000, TopicsSet: true, Topics: []string{"q"}, OwnedSet: true}, kerr.GroupIDNotFound.Code)
	r.do("a classic member", JoinGroup{Group: "sg", ProtocolType: "consumer", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000,
		Protocols: []GroupProtocol{{Name: "range", Metadata: []byte{0}}}}, kerr.GroupIDNotFound.Code)
	r.do("an offset commit", OffsetCommit{Group: "sg", Generation: -1, Topic: "q", Partition: 0, Offset: 1}, kerr.GroupIDNotFound.Code)
}

// TestShareGroupOffsetsAdmin (KIP-932's DeleteGroups,
// AlterShareGroupOffsets and DeleteShareGroupOffsets): an empty share
// group's start offsets are set, forgotten, and the group deleted; a
// group with members refuses all three (NON_EMPTY_GROUP).
func TestShareGroupOffsetsAdmin(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 2, ReplicationFactor: -1}, 0)
	r.do("records", topics.Produce{Topic: "q", Partition: 0, Records: keysBatch(t, "a", "b", "c", "d")}, 0)
	res := r.do("offsets of a new group", AlterShareOffsets{Group: "adm", Offsets: []ShareOffset{{Topic: "q", Partition: 0, Start: 2}, {Topic: "q", Partition: 9, Start: 0}}}, 0)
	if codes := []int16{res.Share.Parts[0].Code, res.Share.Parts[1].Code}; !slices.Equal(codes, []int16{0, kerr.UnknownTopicOrPartition.Code}) {
		t.Fatalf("codes %v", codes)
	}
	r.do("m joins", shareJoin("adm", "m", "q"), 0)
	if offs, _ := acquired(r.do("m acquires from the offset set", fetchFrom("adm", "m", 100), 0)); !slices.Equal(offs, []int64{2, 3}) {
		t.Fatalf("acquired %v", offs)
	}
	r.do("altered with a member", AlterShareOffsets{Group: "adm", Offsets: []ShareOffset{{Topic: "q", Partition: 0, Start: 0}}}, kerr.NonEmptyGroup.Code)
	r.do("offsets deleted with a member", DeleteShareOffsets{Group: "adm", Topics: []string{"q"}}, kerr.NonEmptyGroup.Code)
	r.do("deleted with a member", DeleteShareGroup{Group: "adm"}, kerr.NonEmptyGroup.Code)
	r.do("m leaves", ShareGroupHeartbeat{Group: "adm", MemberID: "m", Epoch: -1}, 0)
	r.do("back to 0", AlterShareOffsets{Group: "adm", Offsets: []ShareOffset{{Topic: "q", Partition: 0, Start: 0}}}, 0)
	if p := r.fs[0].ShareGroups().Group("adm").Parts[0]; p.Start != 0 || p.InFlight != 0 {
		t.Fatalf("after the reset: %+v", p)
	}
	r.do("a config keeps the group", SetShareGroupConfigs{Group: "adm", Configs: []ShareConfigEntry{{Name: "share.delivery.count.limit", Value: "3"}}}, 0)
	r.do("offsets deleted", DeleteShareOffsets{Group: "adm", Topics: []string{"q"}}, 0)
	if g := r.fs[0].ShareGroups().Group("adm"); g == nil || len(g.Parts) != 0 {
		t.Fatalf("after deleting offsets: %+v", g)
	}
	r.do("the group deleted", DeleteShareGroup{Group: "adm"}, 0)
	if g := r.fs[1].ShareGroups().Group("adm"); g != nil {
		t.Fatalf("deleted group still there: %+v", g)
	}
	r.do("deleted again", DeleteShareGroup{Group: "adm"}, kerr.GroupIDNotFound.Code)
	r.do("offsets of a group that is not there", DeleteShareOffsets{Group: "adm", Topics: []string{"q"}}, kerr.GroupIDNotFound.Code)
}

// TestShareGroupsOfADeletedTenant (docs/tenants.md): deleting a tenant
// removes its share groups, with their members, share partitions and
// configs, and counts them; another tenant's and the default tenant's
// stay.
func TestShareGroupsOfADeletedTenant(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("tenant", CreateTenant{Name: "acme"}, 0)
	r.do("topic", topics.CreateTopic{Name: "acme~q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("default topic", topics.CreateTopic{Name: "q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("acme's share group", shareJoin("acme~sg", "m", "acme~q"), 0)
	r.do("its config", SetShareGroupConfigs{Group: "acme~cfg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, 0)
	r.do("the default tenant's", shareJoin("sg", "m", "q"), 0)
	del := r.do("acme deleted", DeleteTenant{Name: "acme"}, 0)
	if !slices.Contains(del.Counts, core.Count{What: "share_groups", N: 2}) {
		t.Fatalf("the deletion counted %v", del.Counts)
	}
	for _, f := range r.fs {
		var names []string
		for _, g := range f.ShareGroups().Groups() {
			names = append(names, g.Name)
		}
		if !slices.Equal(names, []string{"sg"}) {
			t.Fatalf("share groups after the tenant's deletion: %v", names)
		}
	}
}

// TestShareSessionClose: a ShareAcquire that closes a member's share
// session (ShareFetch or ShareAcknowledge with epoch -1) applies its
// acknowledgements, then releases what the member holds of the session's
// partitions, and only those: a session on another broker keeps its own.
func TestShareSessionClose(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 2, ReplicationFactor: -1}, 0)
	for p := range int32(2) {
		r.do("records", topics.Produce{Topic: "q", Partition: p, Records: keysBatch(t, "a", "b", "c")}, 0)
	}
	r.do("earliest", SetShareGroupConfigs{Group: "sg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, 0)
	r.do("m joins", shareJoin("sg", "m", "q"), 0)
	both := ShareAcquire{Group: "sg", MemberID: "m", MaxRecords: 100, Parts: []SharePart{{Topic: "q", Partition: 0, Acquire: true}, {Topic: "q", Partition: 1, Acquire: true}}}
	r.do("m acquires both partitions", both, 0)
	r.do("m closes its session of partition 0, accepting offset 0", ShareAcquire{Group: "sg", MemberID: "m", Close: true,
		Parts: []SharePart{{Topic: "q", Partition: 0, Acks: shareAck(0, 0, shares.AckAccept)}}}, 0)
	g := r.fs[0].ShareGroups().Group("sg")
	if p0, p1 := g.Parts[0], g.Parts[1]; p0.Start != 1 || p0.Acquired != 0 || p0.InFlight != 2 || p1.Acquired != 3 {
		t.Fatalf("after closing the session of partition 0: %+v %+v", p0, p1)
	}
}

// shareOps are the command bytes of FuzzShareGroups' programs (cmdProgram's
// numbering): topics created, deleted and trimmed, keyed records, share
// group commands, ticks.
var shareOps = []byte{0, 1, 7, 16, 21, 21, 26, 26, 27, 27, 27}

// FuzzShareGroups applies hostile but well-formed programs of share group
// commands (members joining, leaving and fenced, acquisitions with
// acknowledgements of every kind, sessions closed, configs, offsets
// altered and deleted, groups deleted) over keyed records, topics created
// and deleted and block time jumping past locks and sessions, to two
// state machines at the newest app version, the second reopened before
// every other block: neither may panic or fail, and after every block
// both hold the same results, app hash and state root; at the end the
// same store and logs, and a state root the store's contents hash to.
func FuzzShareGroups(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0xff, 1, 4, 0, 1, 2, 0, 1, 2, 0xff, 1, 6, 0, 1, 1, 0, 1, 0xff, 1, 8, 0, 0, 5, 1, 1, 0, 0, 0, 1, 0xff, 40})
	seed := []byte{0, 0, 1, 0xff, 1, 4, 0, 2, 2, 0, 1, 2, 0xff, 1, 6, 0, 1, 1, 0, 1}
	for i := range byte(16) {
		seed = append(seed, 6, 0, 0, i%3, i, 8, 0, i%3, i, 1, 1, i, 1, i, i%5, 0xff, 1+i*3)
	}
	f.Add(append(seed, 7, 0, 2, 0, 1, 2, 7, 0, 3, 0, 1, 0xff, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Every byte read as an operation picks among shareOps; the others
		// stay parameters (cmdProgram reads both from one stream).
		prog := &cmdProgram{b: data}
		var blocks []block
		now := t0
		cur := block{time: now}
		nonce := 0
		for len(prog.b) > 0 && len(blocks) < 40 {
			op := prog.next()
			if op == 0xff {
				blocks = append(blocks, cur)
				now += int64(prog.next()) * 1000
				cur = block{time: now}
				continue
			}
			if c := prog.command(t, shareOps[int(op)%len(shareOps)]); c != nil {
				nonce++
				cur.txs = append(cur.txs, tx(nonce, c))
			}
		}
		blocks = append(blocks, cur)
		open := func(dir string) *FSM {
			m, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Compactor.Wg.Wait)
			return m
		}
		bdir := t.TempDir()
		a, b := open(t.TempDir()), open(bdir)
		defer a.Close()
		defer func() { b.Close() }()
		for i, blk := range blocks {
			h := int64(i + 1)
			if i%2 == 1 {
				b.Close()
				b = open(bdir)
			}
			var outs [2]core.BlockOutcome
			for j, m := range []*FSM{a, b} {
				out, err := m.ApplyBlock(core.Block{Height: h, TimeMs: blk.time, Txs: blk.txs})
				if err != nil {
					t.Fatalf("height %d: %v", h, err)
				}
				if _, err := m.Commit(); err != nil {
					t.Fatalf("height %d: commit: %v", h, err)
				}
				outs[j] = out
			}
			if !bytes.Equal(outs[0].AppHash, outs[1].AppHash) || !bytes.Equal(a.StateRoot, b.StateRoot) {
				t.Fatalf("height %d: app hashes or state roots differ", h)
			}
			for k := range outs[0].Txs {
				if !bytes.Equal(outs[0].Txs[k].Data, outs[1].Txs[k].Data) {
					t.Fatalf("height %d tx %d: results differ", h, k)
				}
			}
			if !reflect.DeepEqual(a.ShareGroups().Groups(), b.ShareGroups().Groups()) {
				t.Fatalf("height %d: the share groups differ", h)
			}
		}
		sameMachines(t, a, b, "at the end")
		for _, m := range []*FSM{a, b} {
			root, err := core.RebuildStateRoot(m.Store)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(root, m.StateRoot) {
				t.Fatalf("the store's contents hash to state root %x, the machine holds %x", root, m.StateRoot)
			}
		}
	})
}

// keySubjectBatch is records of keys with the subjects in their
// stele-subject header, in pairs.
func keySubjectBatch(t *testing.T, keySubjects ...string) []byte {
	var recs []record.Record
	for i := 0; i+1 < len(keySubjects); i += 2 {
		recs = append(recs, record.Record{OffsetDelta: int32(i / 2), Key: []byte(keySubjects[i]), Value: []byte("v"),
			Headers: []record.RecordHeader{{Key: "stele-subject", Value: []byte(keySubjects[i+1])}}})
	}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func filtered(c ShareAcquire, keyPrefix, subject string) FilteredShareAcquire {
	return FilteredShareAcquire{ShareAcquire: c, Filter: ShareFilter{KeyPrefix: []byte(keyPrefix), Subject: subject}}
}

// TestShareGroupFilters (docs/share-groups.md "Over HTTP"): an acquisition
// with a filter takes only the records whose key starts with its prefix
// and whose subject matches its pattern; the records it passes over stay
// available, in the window, to the group's other acquisitions, and under
// key ordering hold back the later records of their key. Records no
// acquisition takes fill the window up to share.partition.max.record.locks
// and stop filtered acquisitions there; a share group of a view holds
// only its pattern's records. Under app version 15 a filtered
// acquisition fails whole, as version 15's binaries fail it.
func TestShareGroupFilters(t *testing.T) {
	r := newShareRig(t, cluster.MaxAppVersion)
	r.do("topic", topics.CreateTopic{Name: "q", Partitions: 1, ReplicationFactor: -1}, 0)
	r.do("configs", SetShareGroupConfigs{Group: "fg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"},
		{Name: "stele.share.key.ordering", Value: "true"}, {Name: "share.partition.max.record.locks", Value: "100"}}}, 0)
	r.do("records", topics.Produce{Topic: "q", Partition: 0, Records: keySubjectBatch(t,
		"eu-1", "orders.eu.created", // 0
		"us-1", "orders.us.created", // 1
		"eu-1", "orders.eu.paid", // 2
		"eu-2", "orders.eu.paid", // 3
		"us-1", "orders.us.paid", // 4
	)}, 0)
	r.do("a joins", shareJoin("fg", "a", "q"), 0)
	r.do("b joins", shareJoin("fg", "b", "q"), 0)
	r.do("an empty filter", filtered(fetchFrom("fg", "a", 10), "", ""), kerr.InvalidRequest.Code)
	r.do("a bad pattern", filtered(fetchFrom("fg", "a", 10), "", "orders..eu"), kerr.InvalidRequest.Code)

	// eu-1's and us-1's paid records wait behind their created ones,
	// which the filter passes over; eu-2's is taken.
	if offs, _ := acquired(r.do("a acquires paid orders", filtered(fetchFrom("fg", "a", 10), "", "orders.*.paid"), 0)); !slices.Equal(offs, []int64{3}) {
		t.Fatalf("a acquired %v by subject, want [3]", offs)
	}
	if offs, _ := acquired(r.do("b acquires eu keys", filtered(fetchFrom("fg", "b", 10), "eu-", ""), 0)); !slices.Equal(offs, []int64{0}) {
		t.Fatalf("b acquired %v by key prefix, want [0]", offs)
	}
	if offs, _ := acquired(r.do("b acquires us keys", filtered(fetchFrom("fg", "b", 10), "us-", "orders.us.>"), 0)); !slices.Equal(offs, []int64{1}) {
		t.Fatalf("b acquired %v by key prefix and subject, want [1]", offs)
	}
	r.do("b accepts", ackOnly("fg", "b", shareAck(0, 1, shares.AckAccept)), 0)
	if offs, _ := acquired(r.do("a acquires paid orders again", filtered(fetchFrom("fg", "a", 10), "", "orders.*.paid"), 0)); !slices.Equal(offs, []int64{2, 4}) {
		t.Fatalf("a acquired %v by subject, want [2 4] once their keys' first records are done", offs)
	}

	// 150 records no filter takes fill the window (100 in flight, three
	// of them acquired by a): the
	// eu record after them is out of the filtered acquisition's reach
	// until an unfiltered one takes them.
	var many []string
	for i := range 150 {
		many = append(many, fmt.Sprintf("x-%d", i), "other")
	}
	r.do("unmatched records", topics.Produce{Topic: "q", Partition: 0, Records: keySubjectBatch(t, many...)}, 0)
	r.do("an eu record", topics.Produce{Topic: "q", Partition: 0, Records: keySubjectBatch(t, "eu-3", "orders.eu.created")}, 0)
	if offs, _ := acquired(r.do("b acquires eu keys", filtered(fetchFrom("fg", "b", 10), "eu-", ""), 0)); len(offs) != 0 {
		t.Fatalf("b acquired %v with the window full", offs)
	}
	if offs, _ := acquired(r.do("a acquires anything", fetchFrom("fg", "a", 200), 0)); len(offs) != 97 || offs[0] != 5 {
		t.Fatalf("a acquired %d records from %v, want the 97 unmatched records in the window", len(offs), offs[:min(len(offs), 1)])
	}
	r.do("a accepts them", ackOnly("fg", "a", shareAck(2, 101, shares.AckAccept)), 0)
	if offs, _ := acquired(r.do("b acquires eu keys", filtered(fetchFrom("fg", "b", 10), "eu-", ""), 0)); !slices.Equal(offs, []int64{155}) {
		t.Fatalf("b acquired %v, want the eu record past the unmatched ones", offs)
	}

	// A share group of a view holds only the records of its pattern: no
	// record waits for a filter that no member has.
	r.do("a view of eu orders", topics.CreateTopic{Name: "eu", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "stele.view.from", Value: "q"}, {Name: "stele.view.subject", Value: "orders.eu.>"}}}, 0)
	r.do("the view's queue starts at its beginning", SetShareGroupConfigs{Group: "vg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, 0)
	r.do("v joins", shareJoin("vg", "v", "eu"), 0)
	r.do("records after the view", topics.Produce{Topic: "q", Partition: 0, Records: keySubjectBatch(t, "us-4", "orders.us.created", "eu-4", "orders.eu.created", "x", "other", "eu-5", "orders.eu.paid")}, 0)
	got := r.do("v acquires", ShareAcquire{Group: "vg", MemberID: "v", MaxRecords: 100, Parts: []SharePart{{Topic: "eu", Partition: 0, Acquire: true}}}, 0)
	if offs, _ := acquired(got); !slices.Equal(offs, []int64{0, 1}) {
		t.Fatalf("v acquired %v of the view, want its two records", offs)
	}

	// Under version 15 a transaction holding a filtered acquisition fails
	// whole, as version 15's binaries, which cannot decode it, fail it.
	old, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: shares.FilterVersion - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	o, err := old.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{tx(1, filtered(fetchFrom("fg", "a", 10), "eu-", ""))}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Txs[0].Code == 0 || len(o.Txs[0].Results) != 0 {
		t.Fatalf("a filtered acquisition under version 15: %+v", o.Txs[0])
	}
}

// TestShareGroupsTenantQuota (docs/tenants.md): from app version 16 a
// tenant's share groups count against its groups quota with its consumer
// groups: a heartbeat, configs or offsets that would create a share group
// past it are refused POLICY_VIOLATION, creating nothing, and a consumer
// group past it too; a group that exists is not counted again. Under
// version 15 share groups were not counted.
func TestShareGroupsTenantQuota(t *testing.T) {
	for _, v := range []uint32{shares.FilterVersion - 1, cluster.MaxAppVersion} {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			r := newShareRig(t, v)
			counted := v >= tenants.ShareGroupsQuotaVersion
			want := func(ok bool) int16 {
				if ok || !counted {
					return 0
				}
				return kerr.PolicyViolation.Code
			}
			r.do("tenant", CreateTenant{Name: "acme", Quotas: []TenantQuota{{Key: "groups", Value: 2}}}, 0)
			r.do("topic", topics.CreateTopic{Name: "acme~q", Partitions: 1, ReplicationFactor: -1}, 0)
			r.do("a consumer group", ConsumerGroupHeartbeat{Group: "acme~cg", MemberID: "c1", RebalanceTimeoutMs: 30000, TopicsSet: true, Topics: []string{"acme~q"}, OwnedSet: true}, 0)
			r.do("a share group", shareJoin("acme~sg", "m", "acme~q"), 0)
			r.do("a member of it", shareJoin("acme~sg", "m2", "acme~q"), 0)
			r.do("a second share group", shareJoin("acme~sg2", "m", "acme~q"), want(false))
			r.do("configs of a new share group", SetShareGroupConfigs{Group: "acme~cfg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, want(false))
			r.do("offsets of a new share group", AlterShareOffsets{Group: "acme~off", Offsets: []ShareOffset{{Topic: "acme~q", Partition: 0, Start: 0}}}, want(false))
			r.do("configs of the share group", SetShareGroupConfigs{Group: "acme~sg", Configs: []ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}, 0)
			r.do("a second consumer group", ConsumerGroupHeartbeat{Group: "acme~cg2", MemberID: "c1", RebalanceTimeoutMs: 30000, TopicsSet: true, Topics: []string{"acme~q"}, OwnedSet: true}, want(false))
			names := map[string]bool{}
			for _, g := range r.fs[0].ShareGroups().Groups() {
				names[g.Name] = true
			}
			if counted && (len(names) != 1 || !names["acme~sg"]) {
				t.Fatalf("share groups past the quota: %v", names)
			}
		})
	}
}
