// Package groups is the state machine's groups module, Kafka's group
// coordinator: classic consumer groups (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup), KIP-848 consumer groups (ConsumerGroupHeartbeat and the
// server-side assignors, group848.go), committed offsets and their
// expiry, all driven by block time.
//
// It uses the topics module below it (its types, and the hook points it
// registers at: a deleted topic's offsets, the offsets' expiry at
// housekeeping), imports no module above it, and works on Coordinator, its
// part of a state machine, which the application (package fsm) makes with
// NewCoordinator and hands over through its GroupsModule method
// (groupsOf).
package groups

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// GroupState is a classic consumer group's state, named as Kafka names
// them. A group that does not exist is "Dead" to readers.
type GroupState uint8

// The group states.
const (
	GroupEmpty GroupState = iota
	GroupPreparingRebalance
	GroupCompletingRebalance
	GroupStable
)

func (s GroupState) String() string {
	switch s {
	case GroupEmpty:
		return "Empty"
	case GroupPreparingRebalance:
		return "PreparingRebalance"
	case GroupCompletingRebalance:
		return "CompletingRebalance"
	case GroupStable:
		return "Stable"
	}
	return fmt.Sprintf("GroupState(%d)", uint8(s))
}

// GroupInitialRebalanceDelayMs is Kafka's group.initial.rebalance.delay.ms:
// the first rebalance of an empty group waits this long (extended by each
// new member, up to the rebalance timeout) so that members starting
// together land in one generation.
const GroupInitialRebalanceDelayMs = 3000

// CommittedOffset is a group's committed position in one partition.
type CommittedOffset struct {
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	// CommitTimeMs is the block time of the commit.
	CommitTimeMs int64
}

// Member is one member of a group.
type Member struct {
	ID                 string
	InstanceID         string
	ClientID           string
	ClientHost         string
	Protocols          []GroupProtocol
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32
	// LastSeenMs is the block time of the member's last join, sync,
	// heartbeat or offset commit.
	LastSeenMs int64
	// Joined: the member has joined the rebalance in progress (or, outside
	// one, the current generation). Synced: it has sent SyncGroup for the
	// current generation.
	Joined, Synced bool
	// Generation is the last generation the member was made part of.
	Generation int32
	Assignment []byte
	// Seq orders members by first join: the leader is the earliest.
	Seq int64
}

// Group is a classic consumer group's replicated state.
type Group struct {
	Name         string
	ProtocolType string
	Protocol     string
	State        GroupState
	Generation   int32
	Leader       string
	Members      map[string]*Member
	// DeadlineMs ends the join phase (PreparingRebalance) or the sync phase
	// (CompletingRebalance); 0 otherwise. RebalanceStartMs and Initial
	// bound the initial delay of an empty group's first rebalance.
	DeadlineMs       int64
	RebalanceStartMs int64
	Initial          bool
	// InitialHeight is the height of the block that started an initial
	// rebalance; its delay is counted from the next block's time (a block
	// made after an idle spell carries the time of the one before it, up to
	// seconds old, and Kafka never ends the delay early).
	InitialHeight int64
	// EmptySinceMs is when the group last lost its last member.
	EmptySinceMs int64
	// Pending are member ids handed out with MEMBER_ID_REQUIRED, with the
	// block time at which they lapse unless used.
	Pending map[string]int64
	NextSeq int64
	// Offsets by topic, then partition.
	Offsets map[string]map[int32]CommittedOffset

	// Type says which protocol drives the group; the fields below are the
	// KIP-848 consumer protocol's (group848.go).
	Type            GroupType
	Epoch           int32
	AssignmentEpoch int32
	SubsDigest      string
	Consumers       map[string]*ConsumerMember
	// Regexes are the regular expressions the members subscribe to, each
	// with the topics (sorted) it resolved to at the end of the block that
	// brought it or last created or deleted a topic (resolveRegexes).
	Regexes map[string][]string
}

func NewGroup(name string, now int64) *Group {
	return &Group{Name: name, Members: map[string]*Member{}, Pending: map[string]int64{},
		Offsets: map[string]map[int32]CommittedOffset{}, EmptySinceMs: now, Consumers: map[string]*ConsumerMember{},
		Regexes: map[string][]string{}}
}

// sortedMembers returns the members in join order.
func (g *Group) sortedMembers() []*Member {
	out := make([]*Member, 0, len(g.Members))
	for _, m := range g.Members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

func (g *Group) byInstance(instance string) *Member {
	for _, m := range g.Members {
		if m.InstanceID == instance {
			return m
		}
	}
	return nil
}

func (g *Group) maxRebalanceTimeout() int64 {
	var d int64
	for _, m := range g.Members {
		d = max(d, int64(m.RebalanceTimeoutMs))
	}
	return d
}

// supports reports whether every member supports protocol type pt and at
// least one of protos.
func (g *Group) supports(pt string, protos []GroupProtocol) bool {
	if len(g.Members) == 0 {
		return true
	}
	if g.ProtocolType != pt {
		return false
	}
	for _, p := range protos {
		if g.everyMemberSupports(p.Name) {
			return true
		}
	}
	return false
}

func (g *Group) everyMemberSupports(name string) bool {
	for _, m := range g.Members {
		if !slices.ContainsFunc(m.Protocols, func(p GroupProtocol) bool { return p.Name == name }) {
			return false
		}
	}
	return true
}

// selectProtocol picks the protocol every member supports that most
// members prefer (Kafka's vote); ties go to the order of the earliest
// member's list.
func (g *Group) selectProtocol() string {
	members := g.sortedMembers()
	var candidates []string
	for _, p := range members[0].Protocols {
		if g.everyMemberSupports(p.Name) {
			candidates = append(candidates, p.Name)
		}
	}
	votes := map[string]int{}
	for _, m := range members {
		for _, p := range m.Protocols {
			if slices.Contains(candidates, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, c := range candidates {
		if best == "" || votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

// fenced reports whether a request naming memberID and instance comes from
// a static member whose instance id now belongs to another member id.
func (g *Group) fenced(memberID, instance string) bool {
	if instance == "" {
		return false
	}
	m := g.byInstance(instance)
	return m != nil && m.ID != memberID
}

// GroupCheck is the member checks Kafka makes before sync, heartbeat and
// commit: fencing, membership, generation.
func (g *Group) GroupCheck(memberID, instance string, generation int32) (*Member, core.Result) {
	if g.fenced(memberID, instance) {
		return nil, core.Fail(kerr.FencedInstanceID.Code, fmt.Sprintf("instance %q is now held by another member", instance))
	}
	m := g.Members[memberID]
	if m == nil {
		return nil, core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", memberID, g.Name))
	}
	if generation != g.Generation {
		return m, core.Fail(kerr.IllegalGeneration.Code, fmt.Sprintf("generation %d is not the group's current %d", generation, g.Generation))
	}
	return m, core.Result{}
}

// group returns the named group for a change, marking it dirty.
func (f *Coordinator) TouchGroup(g *Group) {
	f.dirtyGroups[g.Name] = true
}

// newMemberID makes a member id the way Kafka shapes them (client id, a
// dash, a UUID), from the chain: the app hash before the block and the
// command's position in it. The same on every broker, different for every
// join and from chain to chain.
func (f *Coordinator) newMemberID(clientID string, txIndex, cmdIndex int) string {
	var buf [24]byte
	binary.BigEndian.PutUint64(buf[0:], uint64(f.Height))
	binary.BigEndian.PutUint64(buf[8:], uint64(txIndex))
	binary.BigEndian.PutUint64(buf[16:], uint64(cmdIndex))
	d := sha256.New()
	d.Write([]byte("stele/member-id\x00"))
	d.Write(f.AppHash)
	d.Write(buf[:])
	h := hex.EncodeToString(d.Sum(nil)[:16])
	return clientID + "-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (f *Coordinator) joinGroup(c JoinGroup, txIndex, cmdIndex int) core.Result {
	now := f.BlockTime
	g := f.GroupsByName[c.Group]
	if g == nil {
		if c.MemberID != "" {
			return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q does not exist", c.Group))
		}
		g = NewGroup(c.Group, now)
		f.GroupsByName[c.Group] = g
	}
	if g.Type == GroupConsumer {
		if len(g.Consumers) > 0 {
			return core.Fail(kerr.InconsistentGroupProtocol.Code, fmt.Sprintf("group %q is a consumer group (KIP-848) with members", g.Name))
		}
		g.Type = GroupClassic // an empty consumer group (offsets only) becomes a classic one
	}
	if !g.supports(c.ProtocolType, c.Protocols) {
		return core.Fail(kerr.InconsistentGroupProtocol.Code, fmt.Sprintf("group %q uses protocol type %q and protocols no member of this join offers",
			g.Name, g.ProtocolType))
	}
	f.TouchGroup(g)
	var m *Member
	switch {
	case c.InstanceID != "":
		old := g.byInstance(c.InstanceID)
		switch {
		case old != nil && c.MemberID != "" && old.ID != c.MemberID:
			return core.Fail(kerr.FencedInstanceID.Code, fmt.Sprintf("instance %q is held by another member", c.InstanceID))
		case old == nil && c.MemberID != "":
			return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID, g.Name))
		case old != nil && c.MemberID == "":
			// A static member restarting: it takes over its old member id's
			// place (fencing the old id) without a rebalance when nothing
			// it brings changes the assignment (KIP-345).
			id := f.newMemberID(c.ClientID, txIndex, cmdIndex)
			delete(g.Members, old.ID)
			wasLeader := g.Leader == old.ID
			same := protocolsEqual(old.Protocols, c.Protocols)
			old.ID = id
			g.Members[id] = old
			if wasLeader {
				g.Leader = id
			}
			f.updateMember(old, c, now)
			if same && g.State == GroupStable {
				// Kafka answers at once with the current generation; the
				// replaced member's assignment stays.
				return core.Result{Group: &core.GroupResult{MemberID: id, Generation: g.Generation, Ready: true}}
			}
			m = old
		case old != nil:
			m = old
		}
	case c.MemberID == "":
		id := f.newMemberID(c.ClientID, txIndex, cmdIndex)
		if c.RequireKnownMember {
			g.Pending[id] = now + int64(c.SessionTimeoutMs)
			return core.Result{Code: kerr.MemberIDRequired.Code, Message: "rejoin with the member id given",
				Group: &core.GroupResult{MemberID: id}}
		}
		c.MemberID = id
	default:
		m = g.Members[c.MemberID]
		if m == nil {
			if _, ok := g.Pending[c.MemberID]; !ok {
				return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID, g.Name))
			}
			delete(g.Pending, c.MemberID)
		}
	}
	if m == nil {
		if c.MemberID == "" {
			c.MemberID = f.newMemberID(c.ClientID, txIndex, cmdIndex)
		}
		m = &Member{ID: c.MemberID, InstanceID: c.InstanceID, Seq: g.NextSeq}
		g.NextSeq++
		if len(g.Members) == 0 {
			g.ProtocolType = c.ProtocolType
		}
		g.Members[m.ID] = m
		f.updateMember(m, c, now)
		f.rebalance(g, true)
	} else {
		same := protocolsEqual(m.Protocols, c.Protocols)
		f.updateMember(m, c, now)
		switch g.State {
		case GroupStable, GroupCompletingRebalance:
			if same && m.ID != g.Leader && m.Generation == g.Generation {
				return core.Result{Group: &core.GroupResult{MemberID: m.ID, Generation: g.Generation, Ready: true}}
			}
			f.rebalance(g, false)
		case GroupEmpty:
			f.rebalance(g, false)
		}
	}
	m.Joined = true
	gen := g.Generation
	f.tryCompleteJoin(g)
	return core.Result{Group: &core.GroupResult{MemberID: m.ID, Generation: gen}}
}

func (f *Coordinator) updateMember(m *Member, c JoinGroup, now int64) {
	m.InstanceID, m.ClientID, m.ClientHost = c.InstanceID, c.ClientID, c.ClientHost
	// Copied: the command's bytes belong to the block, which must not be
	// kept alive (or changed) by the state.
	m.Protocols = make([]GroupProtocol, len(c.Protocols))
	for i, p := range c.Protocols {
		m.Protocols[i] = GroupProtocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)}
	}
	m.SessionTimeoutMs, m.RebalanceTimeoutMs = c.SessionTimeoutMs, c.RebalanceTimeoutMs
	m.LastSeenMs = now
}

func protocolsEqual(a, b []GroupProtocol) bool {
	return slices.EqualFunc(a, b, func(x, y GroupProtocol) bool {
		return x.Name == y.Name && string(x.Metadata) == string(y.Metadata)
	})
}

// rebalance starts (or, for a new member during an initial delay,
// extends) a join phase.
func (f *Coordinator) rebalance(g *Group, newMember bool) {
	now := f.BlockTime
	switch g.State {
	case GroupPreparingRebalance:
		if g.Initial && newMember && g.DeadlineMs != 0 {
			g.DeadlineMs = min(now+GroupInitialRebalanceDelayMs, g.RebalanceStartMs+g.maxRebalanceTimeout())
		}
		return
	case GroupEmpty:
		// Armed by groupTimers at the next block (see InitialHeight).
		g.Initial, g.DeadlineMs, g.InitialHeight = true, 0, f.Height
	default:
		g.Initial = false
		g.DeadlineMs = now + g.maxRebalanceTimeout()
	}
	g.State = GroupPreparingRebalance
	g.RebalanceStartMs = now
	for _, m := range g.Members {
		m.Joined, m.Synced = false, false
	}
	f.TouchGroup(g)
}

// tryCompleteJoin ends the join phase once every member has joined (after
// the initial delay) or the deadline passed; members that did not join are
// removed.
func (f *Coordinator) tryCompleteJoin(g *Group) (changed bool) {
	if g.State != GroupPreparingRebalance {
		return false
	}
	now := f.BlockTime
	all := true
	for _, m := range g.Members {
		all = all && m.Joined
	}
	if g.Initial && g.DeadlineMs == 0 {
		return false // the initial delay is not armed yet
	}
	if !(all && !g.Initial) && now < g.DeadlineMs {
		return false
	}
	for _, m := range g.sortedMembers() {
		if !m.Joined {
			delete(g.Members, m.ID)
		}
	}
	g.Generation++
	g.Initial = false
	f.TouchGroup(g)
	if len(g.Members) == 0 {
		g.State, g.Protocol, g.Leader, g.DeadlineMs = GroupEmpty, "", "", 0
		g.EmptySinceMs = now
		return true
	}
	g.Protocol = g.selectProtocol()
	if g.Members[g.Leader] == nil {
		g.Leader = g.sortedMembers()[0].ID
	}
	for _, m := range g.Members {
		m.Generation, m.Assignment, m.Synced, m.LastSeenMs = g.Generation, nil, false, now
	}
	g.State = GroupCompletingRebalance
	g.DeadlineMs = now + g.maxRebalanceTimeout()
	return true
}

func (f *Coordinator) syncGroup(c SyncGroup) core.Result {
	g := f.GroupsByName[c.Group]
	if g == nil {
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q does not exist", c.Group))
	}
	m, r := g.GroupCheck(c.MemberID, c.InstanceID, c.Generation)
	if r.Code != 0 {
		return r
	}
	if (c.ProtocolType != "" && c.ProtocolType != g.ProtocolType) || (c.Protocol != "" && c.Protocol != g.Protocol) {
		return core.Fail(kerr.InconsistentGroupProtocol.Code, fmt.Sprintf("group %q uses %s/%s", g.Name, g.ProtocolType, g.Protocol))
	}
	f.TouchGroup(g)
	m.LastSeenMs = f.BlockTime
	switch g.State {
	case GroupEmpty:
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q has no members", g.Name))
	case GroupPreparingRebalance:
		return core.Fail(kerr.RebalanceInProgress.Code, "the group is rebalancing")
	case GroupCompletingRebalance:
		m.Synced = true
		if m.ID == g.Leader {
			for _, mem := range g.Members {
				mem.Assignment = nil
			}
			for _, a := range c.Assignments {
				if mem := g.Members[a.MemberID]; mem != nil {
					mem.Assignment = slices.Clone(a.Assignment)
				}
			}
			g.State, g.DeadlineMs = GroupStable, 0
		}
	}
	return core.Result{Group: &core.GroupResult{MemberID: m.ID, Generation: g.Generation}}
}

func (f *Coordinator) heartbeat(c Heartbeat) core.Result {
	g := f.GroupsByName[c.Group]
	if g == nil {
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q does not exist", c.Group))
	}
	m, r := g.GroupCheck(c.MemberID, c.InstanceID, c.Generation)
	if r.Code != 0 {
		return r
	}
	f.TouchGroup(g)
	m.LastSeenMs = f.BlockTime
	switch g.State {
	case GroupEmpty:
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q has no members", g.Name))
	case GroupPreparingRebalance:
		return core.Fail(kerr.RebalanceInProgress.Code, "the group is rebalancing")
	}
	return core.Result{}
}

func (f *Coordinator) leaveGroup(c LeaveGroup) core.Result {
	g := f.GroupsByName[c.Group]
	if g == nil {
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("group %q does not exist", c.Group))
	}
	var m *Member
	if c.InstanceID != "" {
		m = g.byInstance(c.InstanceID)
		if m != nil && c.MemberID != "" && m.ID != c.MemberID {
			return core.Fail(kerr.FencedInstanceID.Code, fmt.Sprintf("instance %q is held by another member", c.InstanceID))
		}
	} else {
		m = g.Members[c.MemberID]
	}
	if m == nil {
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID+c.InstanceID, g.Name))
	}
	f.removeMember(g, m)
	return core.Result{Group: &core.GroupResult{MemberID: m.ID}}
}

// removeMember takes m out of g and starts (or completes) a rebalance.
func (f *Coordinator) removeMember(g *Group, m *Member) {
	delete(g.Members, m.ID)
	f.TouchGroup(g)
	switch g.State {
	case GroupStable, GroupCompletingRebalance:
		f.rebalance(g, false)
	}
	f.tryCompleteJoin(g)
}

func (f *Coordinator) offsetCommit(c OffsetCommit) core.Result {
	t := f.ByName[c.Topic]
	if t == nil || c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
		return core.Fail(kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("%s-%d does not exist", c.Topic, c.Partition))
	}
	g := f.GroupsByName[c.Group]
	switch {
	case g == nil && c.Generation >= 0:
		return core.Fail(kerr.IllegalGeneration.Code, fmt.Sprintf("group %q has no generation %d", c.Group, c.Generation))
	case g == nil:
		g = NewGroup(c.Group, f.BlockTime)
		f.GroupsByName[c.Group] = g
	case c.Generation < 0 && g.State == GroupEmpty && len(g.Consumers) == 0:
	case g.Type == GroupConsumer:
		m := g.Consumers[c.MemberID]
		if m == nil {
			return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member %q is not in group %q", c.MemberID, g.Name))
		}
		if c.Generation != m.Epoch {
			return core.Fail(kerr.StaleMemberEpoch.Code, fmt.Sprintf("epoch %d is not member %q's current %d", c.Generation, m.ID, m.Epoch))
		}
	case g.fenced(c.MemberID, c.InstanceID):
		return core.Fail(kerr.FencedInstanceID.Code, fmt.Sprintf("instance %q is now held by another member", c.InstanceID))
	case g.State == GroupCompletingRebalance:
		return core.Fail(kerr.RebalanceInProgress.Code, "the group is rebalancing")
	default:
		m, r := g.GroupCheck(c.MemberID, c.InstanceID, c.Generation)
		if r.Code != 0 {
			return r
		}
		m.LastSeenMs = f.BlockTime
	}
	f.TouchGroup(g)
	parts := g.Offsets[c.Topic]
	if parts == nil {
		parts = map[int32]CommittedOffset{}
		g.Offsets[c.Topic] = parts
	}
	parts[c.Partition] = CommittedOffset{Offset: c.Offset, LeaderEpoch: c.LeaderEpoch, Metadata: c.Metadata, CommitTimeMs: f.BlockTime}
	f.DirtyOffsets[OffsetRef{c.Group, c.Topic, c.Partition}] = true
	return core.Result{}
}

func (f *Coordinator) deleteGroup(c DeleteGroup) core.Result {
	g := f.GroupsByName[c.Group]
	switch {
	case g == nil:
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %q does not exist", c.Group))
	case g.State != GroupEmpty || len(g.Consumers) > 0:
		return core.Fail(kerr.NonEmptyGroup.Code, fmt.Sprintf("group %q has members", c.Group))
	}
	f.dropGroup(g)
	return core.Result{}
}

func (f *Coordinator) dropGroup(g *Group) {
	for topic, parts := range g.Offsets {
		for p := range parts {
			f.DirtyOffsets[OffsetRef{g.Name, topic, p}] = true
		}
	}
	delete(f.GroupsByName, g.Name)
	f.dirtyGroups[g.Name] = true
}

func (f *Coordinator) offsetDelete(c OffsetDelete) core.Result {
	g := f.GroupsByName[c.Group]
	if g == nil {
		return core.Fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("group %q does not exist", c.Group))
	}
	if g.Type == GroupConsumer && g.consumerSubscribed(c.Topic) {
		return core.Fail(kerr.GroupSubscribedToTopic.Code, fmt.Sprintf("group %q is subscribed to %s", c.Group, c.Topic))
	}
	if g.State != GroupEmpty {
		if g.ProtocolType != "consumer" {
			return core.Fail(kerr.NonEmptyGroup.Code, fmt.Sprintf("group %q has members", c.Group))
		}
		if g.subscribed(c.Topic) {
			return core.Fail(kerr.GroupSubscribedToTopic.Code, fmt.Sprintf("group %q is subscribed to %s", c.Group, c.Topic))
		}
	}
	if _, ok := g.Offsets[c.Topic][c.Partition]; ok {
		delete(g.Offsets[c.Topic], c.Partition)
		if len(g.Offsets[c.Topic]) == 0 {
			delete(g.Offsets, c.Topic)
		}
		f.DirtyOffsets[OffsetRef{g.Name, c.Topic, c.Partition}] = true
		f.TouchGroup(g)
	}
	return core.Result{}
}

// subscribed reports whether a member of a consumer group subscribes to
// topic under the group's protocol (the consumer protocol's metadata:
// version, topics, ...). Metadata that does not parse subscribes to
// nothing.
// ClassicSubscribed reports whether group is a classic consumer group
// with members one of which subscribes to a topic it names name (what
// OffsetDelete refuses, there with the topic's name in the state). The
// tenants module asks it with a tenant's short name, the one its clients
// put in their subscriptions.
func (f *Coordinator) ClassicSubscribed(group, name string) bool {
	g := f.GroupsByName[group]
	return g != nil && g.Type != GroupConsumer && g.State != GroupEmpty && g.ProtocolType == "consumer" && g.subscribed(name)
}

func (g *Group) subscribed(topic string) bool {
	for _, m := range g.Members {
		for _, p := range m.Protocols {
			if p.Name == g.Protocol && slices.Contains(consumerTopics(p.Metadata), topic) {
				return true
			}
		}
	}
	return false
}

// consumerTopics reads the topic list of a consumer protocol subscription
// (ConsumerProtocolSubscription: int16 version, then an array of strings).
func consumerTopics(meta []byte) []string {
	if len(meta) < 6 {
		return nil
	}
	n := int32(binary.BigEndian.Uint32(meta[2:6]))
	rest := meta[6:]
	var out []string
	for i := int32(0); i < n; i++ {
		if len(rest) < 2 {
			return out
		}
		l := int(int16(binary.BigEndian.Uint16(rest)))
		if l < 0 || len(rest) < 2+l {
			return out
		}
		out = append(out, string(rest[2:2+l]))
		rest = rest[2+l:]
	}
	return out
}

// RegisterGroups is the groups module's registration function
// (buildRegistry, registry.go): its files' registrations, each of what
// that file defines.
func RegisterGroups(r *core.Registry, h *topics.TopicHooks) {
	registerGroupCommands(r, h)    // group_cmds.go
	registerGroup848Commands(r, h) // group848_cmd.go
	registerGroupState(r, h)       // group_state.go
	registerGroupTimers(r, h)      // groups.go
}

// registerGroupTimers registers the groups' hooks on the topics module
// (topic_hooks.go) and their timers at the end of every block
// (RegisterGroups calls it).
func registerGroupTimers(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleBlockEnd(r, groupsOf, core.ModuleBlockEnd[*Coordinator]{Rank: 10, Name: "sessions and rebalance deadlines", Module: ModGroups, Run: (*Coordinator).groupTimers})
	h.TopicDeleted.Register(10, "committed offsets of the topic", ModGroups, func(tm *topics.Topics, t *topics.Topic) { f := groupsOf(tm.Machine); f.dropTopicOffsets(t.Name) })
	h.Housekeepers.Register(10, "committed offsets' expiry", ModGroups, func(tm *topics.Topics) []core.Change { f := groupsOf(tm.Machine); return f.expireOffsets() })
}

// dropTopicOffsets removes every group's committed offsets of a deleted
// topic.
func (f *Coordinator) dropTopicOffsets(topic string) {
	for _, name := range sortedGroupNames(f.GroupsByName) {
		g := f.GroupsByName[name]
		if len(g.Consumers) > 0 {
			f.dropTopicFromConsumers(g, topic)
			f.TouchGroup(g)
		}
		if parts, ok := g.Offsets[topic]; ok {
			for p := range parts {
				f.DirtyOffsets[OffsetRef{name, topic, p}] = true
			}
			delete(g.Offsets, topic)
			f.TouchGroup(g)
		}
	}
}

// groupTimers runs at the end of every block: members whose session
// lapsed in block time are removed, and join and sync phases whose
// deadline passed are ended. It returns a description of each change (for
// the app hash). Groups changed by the block's commands are looked at
// every block; the rest only when the earliest deadline among them is due.
func (f *Coordinator) groupTimers() (changes []core.Change) {
	now := f.BlockTime
	var names []string
	if now >= f.groupsDue {
		names = sortedGroupNames(f.GroupsByName)
	} else {
		for n := range f.dirtyGroups {
			if f.GroupsByName[n] != nil {
				names = append(names, n)
			}
		}
		sort.Strings(names)
	}
	// A block that created or deleted topics resolves every group's
	// regular expressions again (resolveRegexes), so every group is looked
	// at; looking at a group whose timers are not due changes nothing.
	topicsChanged := len(f.DirtyTopics) > 0
	if topicsChanged && now < f.groupsDue {
		names = sortedGroupNames(f.GroupsByName)
	}
	for _, n := range names {
		g := f.GroupsByName[n]
		if g.State == GroupPreparingRebalance && g.Initial && g.DeadlineMs == 0 && f.Height > g.InitialHeight {
			g.RebalanceStartMs = now
			g.DeadlineMs = now + min(GroupInitialRebalanceDelayMs, g.maxRebalanceTimeout())
			f.TouchGroup(g)
			changes = append(changes, core.Change{Kind: core.ChangeGroupInitialDelay, Name: g.Name, A: g.DeadlineMs})
		}
		for id, until := range g.Pending {
			if now > until {
				delete(g.Pending, id)
				f.TouchGroup(g)
			}
		}
		for _, m := range g.sortedMembers() {
			waiting := (g.State == GroupPreparingRebalance && m.Joined) || (g.State == GroupCompletingRebalance && m.Synced)
			if !waiting && now > m.LastSeenMs+int64(m.SessionTimeoutMs) {
				changes = append(changes, core.Change{Kind: core.ChangeMemberExpired, Name: g.Name, Sub: m.ID})
				f.removeMember(g, m)
			}
		}
		if g.State == GroupCompletingRebalance && now >= g.DeadlineMs {
			// The leader's assignment did not come in time: members that
			// did not sync are removed and the group rebalances (KIP-814).
			for _, m := range g.sortedMembers() {
				if !m.Synced {
					delete(g.Members, m.ID)
				}
			}
			changes = append(changes, core.Change{Kind: core.ChangeSyncTimedOut, Name: g.Name})
			f.rebalance(g, false)
		}
		if f.tryCompleteJoin(g) {
			changes = append(changes, core.Change{Kind: core.ChangeGeneration, Name: g.Name, A: int64(g.Generation)})
		}
		if g.Type == GroupConsumer {
			changes = append(changes, f.consumerTimers(g)...)
			changes = append(changes, f.resolveRegexes(g, topicsChanged)...)
		}
	}
	if now >= f.groupsDue {
		f.groupsDue = f.nextGroupDeadline()
	} else {
		for _, n := range names {
			f.groupsDue = min(f.groupsDue, f.GroupsByName[n].nextDeadline())
		}
	}
	return changes
}

// nextDeadline is the earliest block time at which a timer of g fires.
func (g *Group) nextDeadline() int64 {
	d := int64(1<<63 - 1)
	if g.State == GroupPreparingRebalance || g.State == GroupCompletingRebalance {
		d = g.DeadlineMs // 0 for an initial delay to arm: due at once
	}
	for _, until := range g.Pending {
		d = min(d, until+1)
	}
	for _, m := range g.Members {
		d = min(d, m.LastSeenMs+int64(m.SessionTimeoutMs)+1)
	}
	return min(d, g.consumerDeadline())
}

func (f *Coordinator) nextGroupDeadline() int64 {
	d := int64(1<<63 - 1)
	for _, g := range f.GroupsByName {
		d = min(d, g.nextDeadline())
	}
	return d
}

// expireOffsets is the offsets part of housekeeping (offsets.retention.ms,
// Kafka 2.1+ semantics): the offsets of a group without members expire
// retention after the later of their commit and the group becoming empty;
// an empty group with no offsets left is deleted. Groups with members keep
// their offsets.
func (f *Coordinator) expireOffsets() (changes []core.Change) {
	retention := f.offsetsRetentionMs
	now := f.BlockTime
	for _, name := range sortedGroupNames(f.GroupsByName) {
		g := f.GroupsByName[name]
		if g.State != GroupEmpty || len(g.Pending) > 0 || len(g.Consumers) > 0 {
			continue
		}
		for _, topic := range core.SortedKeys(g.Offsets) {
			parts := g.Offsets[topic]
			for _, p := range SortedPartitions(parts) {
				if max(parts[p].CommitTimeMs, g.EmptySinceMs)+retention <= now {
					delete(parts, p)
					f.DirtyOffsets[OffsetRef{name, topic, p}] = true
					f.TouchGroup(g)
					changes = append(changes, core.Change{Kind: core.ChangeOffsetExpired, Name: name, Sub: topic, A: int64(p)})
				}
			}
			if len(parts) == 0 {
				delete(g.Offsets, topic)
			}
		}
		if len(g.Offsets) == 0 {
			f.dropGroup(g)
			changes = append(changes, core.Change{Kind: core.ChangeGroupRemoved, Name: name})
		}
	}
	return changes
}

func sortedGroupNames(m map[string]*Group) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func SortedPartitions(m map[int32]CommittedOffset) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// OffsetRef names one committed offset.
type OffsetRef struct {
	Group, Topic string
	Partition    int32
}
