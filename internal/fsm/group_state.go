package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
)

// The groups' keys in the metadata store:
//
//	g/<group>                                  membership, generation, assignments
//	o/<group>\x00<topic>\x00<partition u32>    one committed offset

func groupKey(name string) []byte { return append([]byte("g/"), name...) }

func offsetKey(r offsetRef) []byte {
	k := append([]byte("o/"), r.group...)
	k = append(k, 0)
	k = append(k, r.topic...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(r.partition))
}

// groupsState is the groups module's part of the state machine (embedded
// in FSM): the groups, what the block changed, and what Commit published.
type groupsState struct {
	groups       map[string]*Group
	dirtyGroups  map[string]bool
	dirtyOffsets map[offsetRef]bool
	groupsDue    int64 // block time at which some group timer may fire

	// Published at Commit.
	groupView atomic.Pointer[GroupsView]
	dueView   atomic.Int64 // groupsDue as of the last Commit
}

// persistGroups adds the block's group changes to the state batch.
func (f *FSM) persistGroups(b *stateBatch) {
	for _, name := range sortedKeys(f.dirtyGroups) {
		if g := f.groups[name]; g != nil {
			b.Set(groupKey(name), encodeGroup(g))
		} else {
			b.Delete(groupKey(name))
		}
	}
	for r := range f.dirtyOffsets {
		var (
			o  CommittedOffset
			ok bool
		)
		if g := f.groups[r.group]; g != nil {
			o, ok = g.Offsets[r.topic][r.partition]
		}
		if !ok {
			b.Delete(offsetKey(r))
			continue
		}
		b.Set(offsetKey(r), encodeOffset(o))
	}
}

// encodeOffset is a committed offset's o/ value:
//
//	u8 version | i64 offset | i32 leader epoch | str metadata | i64 commit time
func encodeOffset(o CommittedOffset) []byte {
	w := &writer{}
	w.u8(persistVersion)
	w.i64(o.Offset)
	w.i32(o.LeaderEpoch)
	w.str(o.Metadata)
	w.i64(o.CommitTimeMs)
	return w.b
}

// decodeOffset reads an o/ value (encodeOffset).
func decodeOffset(v []byte) (CommittedOffset, error) {
	r := &reader{b: v}
	if ver := r.u8(); ver != persistVersion {
		return CommittedOffset{}, fmt.Errorf("stele/fsm: committed offset: state format %d not supported", ver)
	}
	o := CommittedOffset{Offset: r.i64(), LeaderEpoch: r.i32(), Metadata: r.str(), CommitTimeMs: r.i64()}
	return o, r.done()
}

// parseOffsetKey reads an o/ key. Neither a group id nor a topic name
// holds a NUL; the partition is the last 4 bytes.
func parseOffsetKey(k []byte) (offsetRef, error) {
	rest, ok := bytes.CutPrefix(k, []byte("o/"))
	i, j := bytes.IndexByte(rest, 0), len(rest)-5
	if !ok || i < 0 || j <= i || rest[j] != 0 {
		return offsetRef{}, fmt.Errorf("stele/fsm: bad offset key %q", k)
	}
	return offsetRef{group: string(rest[:i]), topic: string(rest[i+1 : j]), partition: int32(binary.BigEndian.Uint32(rest[j+1:]))}, nil
}

func encodeGroup(g *Group) []byte {
	w := &writer{}
	w.u8(persistVersion)
	w.str(g.ProtocolType)
	w.str(g.Protocol)
	w.u8(uint8(g.State))
	w.i32(g.Generation)
	w.str(g.Leader)
	w.i64(g.DeadlineMs)
	w.i64(g.RebalanceStartMs)
	w.bool(g.Initial)
	w.i64(g.InitialHeight)
	w.i64(g.EmptySinceMs)
	w.i64(g.NextSeq)
	pending := sortedKeys(g.Pending)
	w.count(len(pending))
	for _, id := range pending {
		w.str(id)
		w.i64(g.Pending[id])
	}
	members := g.sortedMembers()
	w.count(len(members))
	for _, m := range members {
		w.str(m.ID)
		w.str(m.InstanceID)
		w.str(m.ClientID)
		w.str(m.ClientHost)
		w.count(len(m.Protocols))
		for _, p := range m.Protocols {
			w.str(p.Name)
			w.bytes(p.Metadata)
		}
		w.i32(m.SessionTimeoutMs)
		w.i32(m.RebalanceTimeoutMs)
		w.i64(m.LastSeenMs)
		w.bool(m.Joined)
		w.bool(m.Synced)
		w.i32(m.Generation)
		w.bytes(m.Assignment)
		w.i64(m.Seq)
	}
	w.u8(uint8(g.Type))
	w.i32(g.Epoch)
	w.i32(g.AssignmentEpoch)
	w.str(g.SubsDigest)
	consumers := g.sortedConsumers()
	w.count(len(consumers))
	for _, m := range consumers {
		for _, s := range []string{m.ID, m.InstanceID, m.RackID, m.ClientID, m.ClientHost} {
			w.str(s)
		}
		w.i32(m.Epoch)
		w.i32(m.PrevEpoch)
		w.i32(m.RebalanceTimeoutMs)
		w.count(len(m.Topics))
		for _, t := range m.Topics {
			w.str(t)
		}
		w.str(m.Regex)
		w.str(m.Assignor)
		encodeTopicPartitions(w, m.Assigned)
		encodeTopicPartitions(w, m.Revoking)
		encodeTopicPartitions(w, m.Target)
		w.i64(m.RevokeDeadlineMs)
		w.i64(m.LastSeenMs)
		w.bool(m.Sent)
	}
	if len(g.Regexes) > 0 { // absent before AppHashFormat 7, and in groups without regexes
		regexes := sortedKeys(g.Regexes)
		w.count(len(regexes))
		for _, re := range regexes {
			w.str(re)
			w.count(len(g.Regexes[re]))
			for _, t := range g.Regexes[re] {
				w.str(t)
			}
		}
	}
	return w.b
}

func decodeGroup(name string, v []byte) (*Group, error) {
	r := &reader{b: v}
	if ver := r.u8(); ver != persistVersion {
		return nil, fmt.Errorf("stele/fsm: group %q: state format %d not supported", name, ver)
	}
	g := newGroup(name, 0)
	g.ProtocolType, g.Protocol, g.State, g.Generation, g.Leader = r.str(), r.str(), GroupState(r.u8()), r.i32(), r.str()
	g.DeadlineMs, g.RebalanceStartMs, g.Initial, g.InitialHeight, g.EmptySinceMs, g.NextSeq = r.i64(), r.i64(), r.bool(), r.i64(), r.i64(), r.i64()
	for i, n := 0, r.count(9); i < n; i++ {
		g.Pending[r.str()] = r.i64()
	}
	for i, n := 0, r.count(8); i < n; i++ {
		m := &Member{ID: r.str(), InstanceID: r.str(), ClientID: r.str(), ClientHost: r.str()}
		for j, np := 0, r.count(2); j < np; j++ {
			m.Protocols = append(m.Protocols, GroupProtocol{Name: r.str(), Metadata: r.bytesCopy()})
		}
		m.SessionTimeoutMs, m.RebalanceTimeoutMs, m.LastSeenMs = r.i32(), r.i32(), r.i64()
		m.Joined, m.Synced, m.Generation, m.Assignment, m.Seq = r.bool(), r.bool(), r.i32(), nilIfEmpty(r.bytesCopy()), r.i64()
		g.Members[m.ID] = m
	}
	g.Type, g.Epoch, g.AssignmentEpoch, g.SubsDigest = GroupType(r.u8()), r.i32(), r.i32(), r.str()
	for i, n := 0, r.count(8); i < n; i++ {
		m := &ConsumerMember{ID: r.str(), InstanceID: r.str(), RackID: r.str(), ClientID: r.str(), ClientHost: r.str(),
			Epoch: r.i32(), PrevEpoch: r.i32(), RebalanceTimeoutMs: r.i32()}
		for j, nt := 0, r.count(1); j < nt; j++ {
			m.Topics = append(m.Topics, r.str())
		}
		m.Regex, m.Assignor = r.str(), r.str()
		m.Assigned, m.Revoking, m.Target = decodeTopicPartitions(r), decodeTopicPartitions(r), decodeTopicPartitions(r)
		m.RevokeDeadlineMs, m.LastSeenMs, m.Sent = r.i64(), r.i64(), r.bool()
		g.Consumers[m.ID] = m
	}
	if len(r.b) > 0 && r.e == nil {
		for i, n := 0, r.count(2); i < n; i++ {
			re := r.str()
			topics := []string{}
			for j, nt := 0, r.count(1); j < nt; j++ {
				topics = append(topics, r.str())
			}
			g.Regexes[re] = topics
		}
	}
	if err := r.done(); err != nil {
		return nil, fmt.Errorf("stele/fsm: reading group %q: %w", name, err)
	}
	return g, nil
}

// nilIfEmpty keeps a decoded empty byte string as nil, as it was before
// it was stored.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// loadGroups reads the groups and their offsets from the store. The
// groups view is published afresh, whole, at the next publish.
func (f *FSM) loadGroups() error {
	f.groups, f.groupsDue = map[string]*Group{}, 0
	f.groupView.Store(nil)
	err := f.store.Scan([]byte("g/"), func(k, v []byte) error {
		g, err := decodeGroup(string(k[2:]), v)
		if err != nil {
			return err
		}
		f.groups[g.Name] = g
		return nil
	})
	if err != nil {
		return err
	}
	return f.store.Scan([]byte("o/"), func(k, v []byte) error {
		ref, err := parseOffsetKey(k)
		if err != nil {
			return err
		}
		g := f.groups[ref.group]
		if g == nil {
			return fmt.Errorf("stele/fsm: offset %q of a group that is not stored", k)
		}
		o, err := decodeOffset(v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading offset %q: %w", k, err)
		}
		if g.Offsets[ref.topic] == nil {
			g.Offsets[ref.topic] = map[int32]CommittedOffset{}
		}
		g.Offsets[ref.topic][ref.partition] = o
		return nil
	})
}

// GroupsView is an immutable picture of the committed groups, published at
// every Commit that changed one.
type GroupsView struct {
	Height int64
	groups map[string]*GroupView
}

// GroupView is a committed group as readers see it. Do not modify it.
type GroupView struct {
	Name         string
	ProtocolType string
	Protocol     string
	State        GroupState
	Generation   int32
	Leader       string
	// Members in join order.
	Members []MemberView
	// Offsets by topic, then partition.
	Offsets map[string]map[int32]CommittedOffset
	// The KIP-848 consumer protocol's part: the group type, epochs, the
	// assignor, the state as Kafka names it and the members by id.
	Type            GroupType
	Epoch           int32
	AssignmentEpoch int32
	Assignor        string
	ConsumerState   string
	Consumers       []ConsumerMemberView
}

// ConsumerMemberView is a committed KIP-848 member.
type ConsumerMemberView struct {
	ID, InstanceID, RackID, ClientID, ClientHost string
	Epoch                                        int32
	Topics                                       []string
	Regex                                        string
	Assigned, Target                             TopicPartitions
}

// MemberView is a committed member.
type MemberView struct {
	ID                 string
	InstanceID         string
	ClientID           string
	ClientHost         string
	Protocols          []GroupProtocol
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32
	Generation         int32
	Assignment         []byte
	Synced             bool
}

// Group returns the named group, or nil when it does not exist.
func (v *GroupsView) Group(name string) *GroupView { return v.groups[name] }

// Groups returns every group sorted by name.
func (v *GroupsView) Groups() []*GroupView {
	out := make([]*GroupView, 0, len(v.groups))
	for _, n := range sortedKeys(v.groups) {
		out = append(out, v.groups[n])
	}
	return out
}

// Member returns the member with the given id, or nil.
func (g *GroupView) Member(id string) *MemberView {
	for i := range g.Members {
		if g.Members[i].ID == id {
			return &g.Members[i]
		}
	}
	return nil
}

// Groups returns the committed groups.
func (f *FSM) Groups() *GroupsView { return f.groupView.Load() }

// GroupTimerDue is the block time (ms) at which a group timer of the
// committed state may next fire; math.MaxInt64 when none is pending.
func (f *FSM) GroupTimerDue() int64 { return f.dueView.Load() }

// publishGroups publishes the groups the block changed.
func (f *FSM) publishGroups() {
	due := f.groupsDue
	if len(f.groups) == 0 {
		due = 1<<63 - 1
	}
	f.dueView.Store(due)
	old := f.groupView.Load()
	if old != nil && len(f.dirtyGroups) == 0 && len(f.dirtyOffsets) == 0 {
		return
	}
	next := &GroupsView{Height: f.height, groups: map[string]*GroupView{}}
	if old != nil {
		maps.Copy(next.groups, old.groups)
	}
	changed := f.dirtyGroups
	if old == nil {
		changed = map[string]bool{}
		for n := range f.groups {
			changed[n] = true
		}
	}
	for r := range f.dirtyOffsets {
		changed[r.group] = true
	}
	for n := range changed {
		if g := f.groups[n]; g != nil {
			next.groups[n] = g.view()
		} else {
			delete(next.groups, n)
		}
	}
	f.groupView.Store(next)
}

func (g *Group) view() *GroupView {
	v := &GroupView{Name: g.Name, ProtocolType: g.ProtocolType, Protocol: g.Protocol, State: g.State,
		Generation: g.Generation, Leader: g.Leader, Offsets: make(map[string]map[int32]CommittedOffset, len(g.Offsets))}
	for _, m := range g.sortedMembers() {
		v.Members = append(v.Members, MemberView{ID: m.ID, InstanceID: m.InstanceID, ClientID: m.ClientID,
			ClientHost: m.ClientHost, Protocols: m.Protocols, SessionTimeoutMs: m.SessionTimeoutMs,
			RebalanceTimeoutMs: m.RebalanceTimeoutMs, Generation: m.Generation, Assignment: m.Assignment, Synced: m.Synced})
	}
	for t, parts := range g.Offsets {
		v.Offsets[t] = maps.Clone(parts)
	}
	v.Type, v.Epoch, v.AssignmentEpoch = g.Type, g.Epoch, g.AssignmentEpoch
	if g.Type == GroupConsumer {
		v.Assignor, v.ConsumerState = g.assignor(), g.consumerState()
	}
	for _, m := range g.sortedConsumers() {
		v.Consumers = append(v.Consumers, ConsumerMemberView{ID: m.ID, InstanceID: m.InstanceID, RackID: m.RackID,
			ClientID: m.ClientID, ClientHost: m.ClientHost, Epoch: m.Epoch, Topics: slices.Clone(m.Topics), Regex: m.Regex,
			Assigned: m.Assigned.clone(), Target: m.Target.clone()})
	}
	return v
}

// ConsumerMember returns the KIP-848 member with the given id, or nil.
func (g *GroupView) ConsumerMember(id string) *ConsumerMemberView {
	for i := range g.Consumers {
		if g.Consumers[i].ID == id {
			return &g.Consumers[i]
		}
	}
	return nil
}

// Empty reports whether the group has no members of either protocol.
func (g *GroupView) Empty() bool { return len(g.Members) == 0 && len(g.Consumers) == 0 }

// registerGroupState registers the groups' and committed offsets' step
// (registerGroups calls it).
func registerGroupState(r *registry) {
	r.registerStep(moduleStep{rank: 90, name: "groups and committed offsets", module: modGroups,
		empty: func(f *FSM) {
			f.groupsState = groupsState{
				groups:       map[string]*Group{},
				dirtyGroups:  map[string]bool{},
				dirtyOffsets: map[offsetRef]bool{},
			}
		},
		load:    (*FSM).loadGroups,
		stage:   func(f *FSM, b *stateBatch) error { f.persistGroups(b); return nil },
		publish: func(f *FSM, _ bool) { f.publishGroups() },
		forget: func(f *FSM) {
			clear(f.dirtyGroups)
			clear(f.dirtyOffsets)
		}})
}
