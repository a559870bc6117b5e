package groups

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// The group commands (KindJoinGroup ... KindOffsetDelete) carry Kafka's
// classic consumer group protocol: membership, generations, assignments
// and committed offsets live in the replicated state, so every broker
// agrees on them and on when a member's session expired (block time).

// The group command kinds; values are part of the on-chain format.
const (
	KindJoinGroup    core.Kind = 7
	KindSyncGroup    core.Kind = 8
	KindHeartbeat    core.Kind = 9
	KindLeaveGroup   core.Kind = 10
	KindOffsetCommit core.Kind = 11
	KindDeleteGroup  core.Kind = 12
	KindOffsetDelete core.Kind = 13
)

// Group limits. The session timeout bounds are Kafka's defaults for
// group.min.session.timeout.ms and group.max.session.timeout.ms; the
// metadata limit is offset.metadata.max.bytes.
const (
	MinSessionTimeoutMs   = 6_000
	MaxSessionTimeoutMs   = 1_800_000
	MaxRebalanceTimeoutMs = 1 << 31 / 2 // about 12 days: bounds deadline arithmetic
	MaxOffsetMetadata     = 4096
	// MaxGroupIDLen and MaxMemberIDLen bound names kept in the state.
	MaxGroupIDLen  = 1024
	MaxMemberIDLen = 1024
	// MaxProtocolMetadata bounds the protocol metadata one member brings to
	// a join (its subscription), and MaxAssignment one member's assignment.
	MaxProtocolMetadata = 1 << 20
	MaxAssignment       = 1 << 20
)

// GroupProtocol is one protocol (assignor) a member supports, with its
// metadata (for consumers, the subscription).
type GroupProtocol struct {
	Name     string
	Metadata []byte
}

// JoinGroup joins or rejoins a member. MemberID is empty for a new member;
// with RequireKnownMember (JoinGroup v4+, KIP-394) a new member gets its id
// in a MEMBER_ID_REQUIRED result and must join again with it.
type JoinGroup struct {
	Group              string
	MemberID           string
	InstanceID         string // group.instance.id (KIP-345); empty: dynamic member
	ClientID           string
	ClientHost         string
	ProtocolType       string
	Protocols          []GroupProtocol
	SessionTimeoutMs   int32
	RebalanceTimeoutMs int32
	RequireKnownMember bool
}

// MemberAssignment is the assignment the leader gives one member.
type MemberAssignment struct {
	MemberID   string
	Assignment []byte
}

// SyncGroup ends a member's part of a rebalance; the leader's carries
// everyone's assignments.
type SyncGroup struct {
	Group        string
	MemberID     string
	InstanceID   string
	Generation   int32
	ProtocolType string // empty: not checked (SyncGroup < v5)
	Protocol     string // empty: not checked
	Assignments  []MemberAssignment
}

// Heartbeat keeps a member's session alive.
type Heartbeat struct {
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
}

// LeaveGroup removes one member, by member id or (static members) by
// instance id.
type LeaveGroup struct {
	Group      string
	MemberID   string
	InstanceID string
}

// OffsetCommit commits one partition's offset for a group. Generation -1
// with no member id is a commit from outside any generation (a simple
// consumer, an admin tool), allowed while the group has no members.
type OffsetCommit struct {
	Group       string
	MemberID    string
	InstanceID  string
	Generation  int32
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// DeleteGroup deletes an empty group and its committed offsets.
type DeleteGroup struct {
	Group string
}

// OffsetDelete deletes one partition's committed offset of a group.
type OffsetDelete struct {
	Group     string
	Topic     string
	Partition int32
}

func (JoinGroup) Kind() core.Kind    { return KindJoinGroup }
func (SyncGroup) Kind() core.Kind    { return KindSyncGroup }
func (Heartbeat) Kind() core.Kind    { return KindHeartbeat }
func (LeaveGroup) Kind() core.Kind   { return KindLeaveGroup }
func (OffsetCommit) Kind() core.Kind { return KindOffsetCommit }
func (DeleteGroup) Kind() core.Kind  { return KindDeleteGroup }
func (OffsetDelete) Kind() core.Kind { return KindOffsetDelete }

func (c JoinGroup) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.Str(c.InstanceID)
	w.Str(c.ClientID)
	w.Str(c.ClientHost)
	w.Str(c.ProtocolType)
	w.Count(len(c.Protocols))
	for _, p := range c.Protocols {
		w.Str(p.Name)
		w.Bytes(p.Metadata)
	}
	w.I32(c.SessionTimeoutMs)
	w.I32(c.RebalanceTimeoutMs)
	w.Bool(c.RequireKnownMember)
}

func (c SyncGroup) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.Str(c.InstanceID)
	w.I32(c.Generation)
	w.Str(c.ProtocolType)
	w.Str(c.Protocol)
	w.Count(len(c.Assignments))
	for _, a := range c.Assignments {
		w.Str(a.MemberID)
		w.Bytes(a.Assignment)
	}
}

func (c Heartbeat) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.Str(c.InstanceID)
	w.I32(c.Generation)
}

func (c LeaveGroup) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.Str(c.InstanceID)
}

func (c OffsetCommit) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.Str(c.InstanceID)
	w.I32(c.Generation)
	w.Str(c.Topic)
	w.I32(c.Partition)
	w.I64(c.Offset)
	w.I32(c.LeaderEpoch)
	w.Str(c.Metadata)
}

func (c DeleteGroup) Encode(w *core.Writer) { w.Str(c.Group) }

func (c OffsetDelete) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.Topic)
	w.I32(c.Partition)
}

// registerGroupCommands registers the classic group protocol's commands
// and the committed offsets' (RegisterGroups calls it).
func registerGroupCommands(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, groupsOf, KindJoinGroup, "JoinGroup", ModGroups, decodeJoinGroup, CheckGroupCommand,
		func(f *Coordinator, c JoinGroup, at core.CmdAt) core.Result {
			if r, ok := f.shareNamed(c.Group); ok {
				return r
			}
			return f.joinGroup(c, at.Tx, at.Cmd)
		})
	core.RegisterModuleCommand(r, groupsOf, KindSyncGroup, "SyncGroup", ModGroups, decodeSyncGroup, CheckGroupCommand,
		func(f *Coordinator, c SyncGroup, _ core.CmdAt) core.Result { return f.syncGroup(c) })
	core.RegisterModuleCommand(r, groupsOf, KindHeartbeat, "Heartbeat", ModGroups,
		func(r *core.Reader) Heartbeat {
			return Heartbeat{Group: r.Str(), MemberID: r.Str(), InstanceID: r.Str(), Generation: r.I32()}
		}, CheckGroupCommand,
		func(f *Coordinator, c Heartbeat, _ core.CmdAt) core.Result { return f.heartbeat(c) })
	core.RegisterModuleCommand(r, groupsOf, KindLeaveGroup, "LeaveGroup", ModGroups,
		func(r *core.Reader) LeaveGroup {
			return LeaveGroup{Group: r.Str(), MemberID: r.Str(), InstanceID: r.Str()}
		},
		CheckGroupCommand,
		func(f *Coordinator, c LeaveGroup, _ core.CmdAt) core.Result { return f.leaveGroup(c) })
	core.RegisterModuleCommand(r, groupsOf, KindOffsetCommit, "OffsetCommit", ModGroups,
		func(r *core.Reader) OffsetCommit {
			return OffsetCommit{Group: r.Str(), MemberID: r.Str(), InstanceID: r.Str(), Generation: r.I32(),
				Topic: r.Str(), Partition: r.I32(), Offset: r.I64(), LeaderEpoch: r.I32(), Metadata: r.Str()}
		}, CheckGroupCommand,
		func(f *Coordinator, c OffsetCommit, _ core.CmdAt) core.Result {
			if r, ok := f.shareNamed(c.Group); ok {
				return r
			}
			return f.offsetCommit(c)
		})
	core.RegisterModuleCommand(r, groupsOf, KindDeleteGroup, "DeleteGroup", ModGroups,
		func(r *core.Reader) DeleteGroup { return DeleteGroup{Group: r.Str()} }, CheckGroupCommand,
		func(f *Coordinator, c DeleteGroup, _ core.CmdAt) core.Result { return f.deleteGroup(c) })
	core.RegisterModuleCommand(r, groupsOf, KindOffsetDelete, "OffsetDelete", ModGroups,
		func(r *core.Reader) OffsetDelete {
			return OffsetDelete{Group: r.Str(), Topic: r.Str(), Partition: r.I32()}
		},
		CheckGroupCommand,
		func(f *Coordinator, c OffsetDelete, _ core.CmdAt) core.Result { return f.offsetDelete(c) })
}

func decodeJoinGroup(r *core.Reader) JoinGroup {
	j := JoinGroup{Group: r.Str(), MemberID: r.Str(), InstanceID: r.Str(), ClientID: r.Str(),
		ClientHost: r.Str(), ProtocolType: r.Str()}
	for i, n := 0, r.Count(2); i < n; i++ {
		j.Protocols = append(j.Protocols, GroupProtocol{Name: r.Str(), Metadata: r.BytesCopy()})
	}
	j.SessionTimeoutMs, j.RebalanceTimeoutMs, j.RequireKnownMember = r.I32(), r.I32(), r.Bool()
	return j
}

func decodeSyncGroup(r *core.Reader) SyncGroup {
	s := SyncGroup{Group: r.Str(), MemberID: r.Str(), InstanceID: r.Str(), Generation: r.I32(),
		ProtocolType: r.Str(), Protocol: r.Str()}
	for i, n := 0, r.Count(2); i < n; i++ {
		s.Assignments = append(s.Assignments, MemberAssignment{MemberID: r.Str(), Assignment: r.BytesCopy()})
	}
	return s
}

// CheckGroupCommand is CheckCommand for the group commands: what can be
// refused from the command alone. It takes topic names as the state has
// them: a tenant's included (topics.ValidStateTopicName).
func CheckGroupCommand(c core.Command) core.Result {
	return checkGroupCommandWith(c, topics.ValidStateTopicName)
}

// CheckGroupCommandStrict is the check as it was before tenants (app
// versions below 4), as topics.CheckTopicCommandStrict is.
func CheckGroupCommandStrict(c core.Command) core.Result {
	return checkGroupCommandWith(c, topics.ValidTopicName)
}

func checkGroupCommandWith(c core.Command, validTopicName func(string) error) core.Result {
	switch c := c.(type) {
	case JoinGroup:
		if r := CheckGroupIDs(c.Group, c.MemberID, c.InstanceID); r.Code != 0 {
			return r
		}
		if c.ProtocolType == "" || len(c.Protocols) == 0 {
			return core.Fail(kerr.InconsistentGroupProtocol.Code, "a member must name a protocol type and at least one protocol")
		}
		if c.SessionTimeoutMs < MinSessionTimeoutMs || c.SessionTimeoutMs > MaxSessionTimeoutMs {
			return core.Fail(kerr.InvalidSessionTimeout.Code, fmt.Sprintf("session timeout %d ms is outside [%d, %d]",
				c.SessionTimeoutMs, MinSessionTimeoutMs, MaxSessionTimeoutMs))
		}
		if c.RebalanceTimeoutMs <= 0 || c.RebalanceTimeoutMs > MaxRebalanceTimeoutMs {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("rebalance timeout %d ms is outside [1, %d]", c.RebalanceTimeoutMs, MaxRebalanceTimeoutMs))
		}
		size := 0
		seen := map[string]bool{}
		for _, p := range c.Protocols {
			if seen[p.Name] {
				return core.Fail(kerr.InconsistentGroupProtocol.Code, fmt.Sprintf("protocol %q named twice", p.Name))
			}
			seen[p.Name] = true
			size += len(p.Name) + len(p.Metadata)
		}
		if size > MaxProtocolMetadata {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("protocol metadata of %d bytes exceeds %d", size, MaxProtocolMetadata))
		}
	case SyncGroup:
		if r := CheckGroupIDs(c.Group, c.MemberID, c.InstanceID); r.Code != 0 {
			return r
		}
		for _, a := range c.Assignments {
			if len(a.Assignment) > MaxAssignment {
				return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("assignment of %d bytes exceeds %d", len(a.Assignment), MaxAssignment))
			}
		}
	case Heartbeat:
		return CheckGroupIDs(c.Group, c.MemberID, c.InstanceID)
	case LeaveGroup:
		if c.MemberID == "" && c.InstanceID == "" {
			return core.Fail(kerr.UnknownMemberID.Code, "a leaving member must give its member id or instance id")
		}
		return CheckGroupIDs(c.Group, c.MemberID, c.InstanceID)
	case OffsetCommit:
		if r := CheckGroupIDs(c.Group, c.MemberID, c.InstanceID); r.Code != 0 {
			return r
		}
		if len(c.Metadata) > MaxOffsetMetadata {
			return core.Fail(kerr.OffsetMetadataTooLarge.Code, fmt.Sprintf("offset metadata of %d bytes exceeds offset.metadata.max.bytes (%d)", len(c.Metadata), MaxOffsetMetadata))
		}
		if err := validTopicName(c.Topic); err != nil {
			return core.Fail(kerr.UnknownTopicOrPartition.Code, err.Error())
		}
		if c.Offset < -1 {
			return core.Fail(kerr.InvalidCommitOffsetSize.Code, fmt.Sprintf("offset %d is negative", c.Offset))
		}
	case ConsumerGroupHeartbeat:
		return checkConsumerHeartbeat(c)
	case DeleteGroup:
		return CheckGroupIDs(c.Group, "", "")
	case OffsetDelete:
		if r := CheckGroupIDs(c.Group, "", ""); r.Code != 0 {
			return r
		}
		if err := validTopicName(c.Topic); err != nil {
			return core.Fail(kerr.UnknownTopicOrPartition.Code, err.Error())
		}
	}
	return core.Result{}
}

func CheckGroupIDs(group, member, instance string) core.Result {
	switch {
	case group == "":
		return core.Fail(kerr.InvalidGroupID.Code, "the group id is empty")
	case strings.IndexByte(group, 0) >= 0:
		return core.Fail(kerr.InvalidGroupID.Code, "the group id contains a NUL byte")
	case len(group) > MaxGroupIDLen:
		return core.Fail(kerr.InvalidGroupID.Code, fmt.Sprintf("group id of %d bytes exceeds %d", len(group), MaxGroupIDLen))
	case len(member) > MaxMemberIDLen || len(instance) > MaxMemberIDLen:
		return core.Fail(kerr.UnknownMemberID.Code, fmt.Sprintf("member or instance id longer than %d bytes", MaxMemberIDLen))
	}
	return core.Result{}
}
