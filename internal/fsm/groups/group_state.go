package groups

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// The groups' keys in the metadata store:
//
//	g/<group>                                  membership, generation, assignments
//	o/<group>\x00<topic>\x00<partition u32>    one committed offset

func GroupKey(name string) []byte { return append([]byte("g/"), name...) }

func OffsetKey(r OffsetRef) []byte {
	k := append([]byte("o/"), r.Group...)
	k = append(k, 0)
	k = append(k, r.Topic...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(r.Partition))
}

// groupsState is the groups module's part of the state machine (embedded
// in FSM): the groups, what the block changed, and what Commit published.
// modGroups is the groups module's name.
const ModGroups core.Module = "groups"

// Coordinator is the groups module of a state machine (Kafka's group
// coordinator): the core's machine it runs on, the topics module below
// it, its options and its state.
type Coordinator struct {
	*core.Machine
	*topics.Topics
	// offsetsRetentionMs is offsets.retention.minutes in milliseconds
	// (Options.OffsetsRetentionMs).
	offsetsRetentionMs int64
	// IsShareGroup reports whether a name is a share group's (set by the
	// shares module; nil: none is): a consumer group may not take it.
	IsShareGroup func(name string) bool
	groupsState
}

// shareNamed refuses a command of a consumer group whose name a share
// group holds, as Kafka refuses it (GROUP_ID_NOT_FOUND).
func (f *Coordinator) shareNamed(group string) (core.Result, bool) {
	if f.IsShareGroup == nil || !f.IsShareGroup(group) {
		return core.Result{}, false
	}
	return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %s is a share group, not a consumer group", group)), true
}

// NewCoordinator is the groups module of the machine m, above the topics
// module t, keeping a group's offsets offsetsRetentionMs after it empties.
func NewCoordinator(m *core.Machine, t *topics.Topics, offsetsRetentionMs int64) *Coordinator {
	return &Coordinator{Machine: m, Topics: t, offsetsRetentionMs: offsetsRetentionMs}
}

// groupsOf is the groups module of the machine m.
func groupsOf(m *core.Machine) *Coordinator {
	return m.App.(interface{ GroupsModule() *Coordinator }).GroupsModule()
}

type groupsState struct {
	GroupsByName map[string]*Group
	dirtyGroups  map[string]bool
	DirtyOffsets map[OffsetRef]bool
	groupsDue    int64 // block time at which some group timer may fire

	// Published at Commit.
	groupView atomic.Pointer[GroupsView]
	DueView   atomic.Int64 // groupsDue as of the last Commit
}

// persistGroups adds the block's group changes to the state batch.
func (f *Coordinator) persistGroups(b *core.StateBatch) {
	for _, name := range core.SortedKeys(f.dirtyGroups) {
		if g := f.GroupsByName[name]; g != nil {
			b.Set(GroupKey(name), EncodeGroup(g))
		} else {
			b.Delete(GroupKey(name))
		}
	}
	for r := range f.DirtyOffsets {
		var (
			o  CommittedOffset
			ok bool
		)
		if g := f.GroupsByName[r.Group]; g != nil {
			o, ok = g.Offsets[r.Topic][r.Partition]
		}
		if !ok {
			b.Delete(OffsetKey(r))
			continue
		}
		b.Set(OffsetKey(r), encodeOffset(o))
	}
}

// encodeOffset is a committed offset's o/ value:
//
//	u8 version | i64 offset | i32 leader epoch | str metadata | i64 commit time
func encodeOffset(o CommittedOffset) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I64(o.Offset)
	w.I32(o.LeaderEpoch)
	w.Str(o.Metadata)
	w.I64(o.CommitTimeMs)
	return w.B
}

// DecodeOffset reads an o/ value (encodeOffset).
func DecodeOffset(v []byte) (CommittedOffset, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return CommittedOffset{}, fmt.Errorf("stele/fsm: committed offset: state format %d not supported", ver)
	}
	o := CommittedOffset{Offset: r.I64(), LeaderEpoch: r.I32(), Metadata: r.Str(), CommitTimeMs: r.I64()}
	return o, r.Done()
}

// ParseOffsetKey reads an o/ key. Neither a group id nor a topic name
// holds a NUL; the partition is the last 4 bytes.
func ParseOffsetKey(k []byte) (OffsetRef, error) {
	rest, ok := bytes.CutPrefix(k, []byte("o/"))
	i, j := bytes.IndexByte(rest, 0), len(rest)-5
	if !ok || i < 0 || j <= i || rest[j] != 0 {
		return OffsetRef{}, fmt.Errorf("stele/fsm: bad offset key %q", k)
	}
	return OffsetRef{Group: string(rest[:i]), Topic: string(rest[i+1 : j]), Partition: int32(binary.BigEndian.Uint32(rest[j+1:]))}, nil
}

func EncodeGroup(g *Group) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Str(g.ProtocolType)
	w.Str(g.Protocol)
	w.U8(uint8(g.State))
	w.I32(g.Generation)
	w.Str(g.Leader)
	w.I64(g.DeadlineMs)
	w.I64(g.RebalanceStartMs)
	w.Bool(g.Initial)
	w.I64(g.InitialHeight)
	w.I64(g.EmptySinceMs)
	w.I64(g.NextSeq)
	pending := core.SortedKeys(g.Pending)
	w.Count(len(pending))
	for _, id := range pending {
		w.Str(id)
		w.I64(g.Pending[id])
	}
	members := g.sortedMembers()
	w.Count(len(members))
	for _, m := range members {
		w.Str(m.ID)
		w.Str(m.InstanceID)
		w.Str(m.ClientID)
		w.Str(m.ClientHost)
		w.Count(len(m.Protocols))
		for _, p := range m.Protocols {
			w.Str(p.Name)
			w.Bytes(p.Metadata)
		}
		w.I32(m.SessionTimeoutMs)
		w.I32(m.RebalanceTimeoutMs)
		w.I64(m.LastSeenMs)
		w.Bool(m.Joined)
		w.Bool(m.Synced)
		w.I32(m.Generation)
		w.Bytes(m.Assignment)
		w.I64(m.Seq)
	}
	w.U8(uint8(g.Type))
	w.I32(g.Epoch)
	w.I32(g.AssignmentEpoch)
	w.Str(g.SubsDigest)
	consumers := g.sortedConsumers()
	w.Count(len(consumers))
	for _, m := range consumers {
		for _, s := range []string{m.ID, m.InstanceID, m.RackID, m.ClientID, m.ClientHost} {
			w.Str(s)
		}
		w.I32(m.Epoch)
		w.I32(m.PrevEpoch)
		w.I32(m.RebalanceTimeoutMs)
		w.Count(len(m.Topics))
		for _, t := range m.Topics {
			w.Str(t)
		}
		w.Str(m.Regex)
		w.Str(m.Assignor)
		core.EncodeTopicPartitions(w, m.Assigned)
		core.EncodeTopicPartitions(w, m.Revoking)
		core.EncodeTopicPartitions(w, m.Target)
		w.I64(m.RevokeDeadlineMs)
		w.I64(m.LastSeenMs)
		w.Bool(m.Sent)
	}
	if len(g.Regexes) > 0 { // absent before AppHashFormat 7, and in groups without regexes
		regexes := core.SortedKeys(g.Regexes)
		w.Count(len(regexes))
		for _, re := range regexes {
			w.Str(re)
			w.Count(len(g.Regexes[re]))
			for _, t := range g.Regexes[re] {
				w.Str(t)
			}
		}
	}
	return w.B
}

func DecodeGroup(name string, v []byte) (*Group, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: group %q: state format %d not supported", name, ver)
	}
	g := NewGroup(name, 0)
	g.ProtocolType, g.Protocol, g.State, g.Generation, g.Leader = r.Str(), r.Str(), GroupState(r.U8()), r.I32(), r.Str()
	g.DeadlineMs, g.RebalanceStartMs, g.Initial, g.InitialHeight, g.EmptySinceMs, g.NextSeq = r.I64(), r.I64(), r.Bool(), r.I64(), r.I64(), r.I64()
	for i, n := 0, r.Count(9); i < n; i++ {
		g.Pending[r.Str()] = r.I64()
	}
	for i, n := 0, r.Count(8); i < n; i++ {
		m := &Member{ID: r.Str(), InstanceID: r.Str(), ClientID: r.Str(), ClientHost: r.Str()}
		for j, np := 0, r.Count(2); j < np; j++ {
			m.Protocols = append(m.Protocols, GroupProtocol{Name: r.Str(), Metadata: r.BytesCopy()})
		}
		m.SessionTimeoutMs, m.RebalanceTimeoutMs, m.LastSeenMs = r.I32(), r.I32(), r.I64()
		m.Joined, m.Synced, m.Generation, m.Assignment, m.Seq = r.Bool(), r.Bool(), r.I32(), nilIfEmpty(r.BytesCopy()), r.I64()
		g.Members[m.ID] = m
	}
	g.Type, g.Epoch, g.AssignmentEpoch, g.SubsDigest = GroupType(r.U8()), r.I32(), r.I32(), r.Str()
	for i, n := 0, r.Count(8); i < n; i++ {
		m := &ConsumerMember{ID: r.Str(), InstanceID: r.Str(), RackID: r.Str(), ClientID: r.Str(), ClientHost: r.Str(),
			Epoch: r.I32(), PrevEpoch: r.I32(), RebalanceTimeoutMs: r.I32()}
		for j, nt := 0, r.Count(1); j < nt; j++ {
			m.Topics = append(m.Topics, r.Str())
		}
		m.Regex, m.Assignor = r.Str(), r.Str()
		m.Assigned, m.Revoking, m.Target = core.DecodeTopicPartitions(r), core.DecodeTopicPartitions(r), core.DecodeTopicPartitions(r)
		m.RevokeDeadlineMs, m.LastSeenMs, m.Sent = r.I64(), r.I64(), r.Bool()
		g.Consumers[m.ID] = m
	}
	if len(r.B) > 0 && r.E == nil {
		for i, n := 0, r.Count(2); i < n; i++ {
			re := r.Str()
			topics := []string{}
			for j, nt := 0, r.Count(1); j < nt; j++ {
				topics = append(topics, r.Str())
			}
			g.Regexes[re] = topics
		}
	}
	if err := r.Done(); err != nil {
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
func (f *Coordinator) loadGroups() error {
	f.GroupsByName, f.groupsDue = map[string]*Group{}, 0
	f.groupView.Store(nil)
	err := f.Store.Scan([]byte("g/"), func(k, v []byte) error {
		g, err := DecodeGroup(string(k[2:]), v)
		if err != nil {
			return err
		}
		f.GroupsByName[g.Name] = g
		return nil
	})
	if err != nil {
		return err
	}
	return f.Store.Scan([]byte("o/"), func(k, v []byte) error {
		ref, err := ParseOffsetKey(k)
		if err != nil {
			return err
		}
		g := f.GroupsByName[ref.Group]
		if g == nil {
			return fmt.Errorf("stele/fsm: offset %q of a group that is not stored", k)
		}
		o, err := DecodeOffset(v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading offset %q: %w", k, err)
		}
		if g.Offsets[ref.Topic] == nil {
			g.Offsets[ref.Topic] = map[int32]CommittedOffset{}
		}
		g.Offsets[ref.Topic][ref.Partition] = o
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
	Assigned, Target                             core.TopicPartitions
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
	for _, n := range core.SortedKeys(v.groups) {
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
func (f *Coordinator) Groups() *GroupsView { return f.groupView.Load() }

// GroupTimerDue is the block time (ms) at which a group timer of the
// committed state may next fire; math.MaxInt64 when none is pending.
func (f *Coordinator) GroupTimerDue() int64 { return f.DueView.Load() }

// publishGroups publishes the groups the block changed.
func (f *Coordinator) publishGroups() {
	due := f.groupsDue
	if len(f.GroupsByName) == 0 {
		due = 1<<63 - 1
	}
	f.DueView.Store(due)
	old := f.groupView.Load()
	if old != nil && len(f.dirtyGroups) == 0 && len(f.DirtyOffsets) == 0 {
		return
	}
	next := &GroupsView{Height: f.Height, groups: map[string]*GroupView{}}
	if old != nil {
		maps.Copy(next.groups, old.groups)
	}
	changed := f.dirtyGroups
	if old == nil {
		changed = map[string]bool{}
		for n := range f.GroupsByName {
			changed[n] = true
		}
	}
	for r := range f.DirtyOffsets {
		changed[r.Group] = true
	}
	for n := range changed {
		if g := f.GroupsByName[n]; g != nil {
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
			Assigned: m.Assigned.Clone(), Target: m.Target.Clone()})
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
// (RegisterGroups calls it).
func registerGroupState(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleStep(r, groupsOf, core.ModuleStep[*Coordinator]{Rank: 90, Name: "groups and committed offsets", Module: ModGroups,
		Empty: func(f *Coordinator) {
			f.groupsState = groupsState{
				GroupsByName: map[string]*Group{},
				dirtyGroups:  map[string]bool{},
				DirtyOffsets: map[OffsetRef]bool{},
			}
		},
		Load:    (*Coordinator).loadGroups,
		Stage:   func(f *Coordinator, b *core.StateBatch) error { f.persistGroups(b); return nil },
		Publish: func(f *Coordinator, _ bool) { f.publishGroups() },
		Forget: func(f *Coordinator) {
			clear(f.dirtyGroups)
			clear(f.DirtyOffsets)
		}})
}
