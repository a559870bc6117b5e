package kafka

// DescribeGroups v0-5, ListGroups v0-5, DeleteGroups v0-2, OffsetDelete v0.
// Behavior:
//   - DescribeGroups and ListGroups read the broker's committed groups. A
//     group that does not exist is described as "Dead" with no error, as
//     Kafka does; ListGroups filters by state (v4+, KIP-518) and type (v5+:
//     "classic" or "consumer"). Groups that only hold committed offsets are
//     listed with an empty protocol type. KIP-848 consumer groups are
//     described in classic terms, as Kafka does: their state
//     (Empty/Assigning/Reconciling/Stable), the assignor as the protocol,
//     and each member's subscription and assignment in the classic consumer
//     protocol's encoding.
//   - Share groups (share_groups.go) are listed with type "share",
//     described as "Dead" here (ShareGroupDescribe describes them) and
//     deleted when empty with their share partitions and configs.
//   - DeleteGroups deletes empty groups and their offsets
//     (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP otherwise); OffsetDelete deletes
//     offsets of an empty group, or of topics a consumer group's members do
//     not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC).
//   - DescribeGroups v3+ and ConsumerGroupDescribe answer the group's
//     authorized operations when asked (authorized_ops.go): every result of
//     DescribeGroups, the groups described by ConsumerGroupDescribe.
//   - Authorization (acls.go), as Kafka: DescribeGroups DESCRIBE on each
//     group; ListGroups lists every group with DESCRIBE on the cluster, else
//     those the principal may DESCRIBE; DeleteGroups DELETE on each group;
//     OffsetDelete DELETE on the group and READ on each topic
//     (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED).

import (
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleDescribeGroups(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeGroupsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	groups := c.s.b.Groups()
	loading := c.s.catchingUp()
	for _, name := range r.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		dg.AuthorizedOperations = authorizedOpsUnknown
		if r.IncludeAuthorizedOperations { // decoded in v3+ only
			dg.AuthorizedOperations = c.authorizedOps(kmsg.ACLResourceTypeGroup, name)
		}
		g := groups.Group(name)
		switch {
		case !c.groupAllowed(kmsg.ACLOperationDescribe, name):
			dg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case name == "":
			dg.ErrorCode = kerr.InvalidGroupID.Code
		case loading:
			dg.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		case g == nil:
			// A share group too: Kafka describes it Dead to this API.
			dg.State = "Dead"
		case g.Type == fsm.GroupConsumer:
			// A KIP-848 group in the classic terms, as Kafka describes it.
			dg.State, dg.ProtocolType, dg.Protocol = g.ConsumerState, "consumer", g.Assignor
			for _, m := range g.Consumers {
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID, dm.ClientID, dm.ClientHost = m.ID, m.ClientID, m.ClientHost
				if m.InstanceID != "" {
					inst := m.InstanceID
					dm.InstanceID = &inst
				}
				dm.ProtocolMetadata, dm.MemberAssignment = consumerAsClassic(m)
				dg.Members = append(dg.Members, dm)
			}
		default:
			dg.State, dg.ProtocolType = g.State.String(), g.ProtocolType
			if g.State == fsm.GroupStable || g.State == fsm.GroupCompletingRebalance {
				dg.Protocol = g.Protocol
			}
			for _, m := range g.Members {
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID, dm.ClientID, dm.ClientHost = m.ID, m.ClientID, m.ClientHost
				if m.InstanceID != "" {
					inst := m.InstanceID
					dm.InstanceID = &inst
				}
				if g.State == fsm.GroupStable {
					// Kafka fills metadata and assignment only once the
					// group is stable.
					for _, p := range m.Protocols {
						if p.Name == g.Protocol {
							dm.ProtocolMetadata = p.Metadata
						}
					}
					dm.MemberAssignment = m.Assignment
				}
				dg.Members = append(dg.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return done(resp), nil
}

func handleListGroups(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ListGroupsRequest)
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	if c.s.catchingUp() {
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return done(resp), nil
	}
	all := c.clusterAllowed(kmsg.ACLOperationDescribe)
	hide := c.hidesTenants()
	for _, g := range c.s.b.Groups().Groups() {
		if !all && !c.groupAllowed(kmsg.ACLOperationDescribe, g.Name) || hide && c.foreign(g.Name) {
			continue
		}
		state, protocolType := g.State.String(), g.ProtocolType
		if g.Type == fsm.GroupConsumer {
			state, protocolType = g.ConsumerState, "consumer"
		}
		typ := g.Type.String()
		if len(r.StatesFilter) > 0 && !slices.ContainsFunc(r.StatesFilter, func(s string) bool { return strings.EqualFold(s, state) }) {
			continue
		}
		if len(r.TypesFilter) > 0 && !slices.ContainsFunc(r.TypesFilter, func(s string) bool { return strings.EqualFold(s, typ) }) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.Name, protocolType, state, typ
		resp.Groups = append(resp.Groups, lg)
	}
	// Share groups (KIP-932): protocol type and group type "share".
	for _, g := range c.s.b.ShareGroups().Groups() {
		if !all && !c.groupAllowed(kmsg.ACLOperationDescribe, g.Name) || hide && c.foreign(g.Name) {
			continue
		}
		if len(r.StatesFilter) > 0 && !slices.ContainsFunc(r.StatesFilter, func(s string) bool { return strings.EqualFold(s, g.State) }) {
			continue
		}
		if len(r.TypesFilter) > 0 && !slices.ContainsFunc(r.TypesFilter, func(s string) bool { return strings.EqualFold(s, "share") }) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.Name, "share", g.State, "share"
		resp.Groups = append(resp.Groups, lg)
	}
	return done(resp), nil
}

func handleDeleteGroups(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DeleteGroupsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	var cmds []fsm.Command
	var slots []int
	for _, name := range r.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		if c.groupAllowed(kmsg.ACLOperationDelete, name) {
			var cmd fsm.Command = fsm.DeleteGroup{Group: name}
			if c.s.b.ShareGroups().Group(name) != nil {
				cmd = fsm.DeleteShareGroup{Group: name}
			}
			cmds = append(cmds, cmd)
			slots = append(slots, len(resp.Groups))
		} else {
			dg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		}
		resp.Groups = append(resp.Groups, dg)
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	call := c.startCall(30*time.Second, cmds...)
	return func() kmsg.Response {
		defer call.cancel()
		for i, o := range call.wait() {
			resp.Groups[slots[i]].ErrorCode = o.Code
		}
		return resp
	}, nil
}

func handleOffsetDelete(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.OffsetDeleteRequest)
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if !c.groupAllowed(kmsg.ACLOperationDelete, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	view := c.s.b.View()
	type slot struct{ topic, part int }
	var (
		cmds  []fsm.Command
		slots []slot
	)
	for ti, rt := range r.Topics {
		st := kmsg.NewOffsetDeleteResponseTopic()
		st.Topic = rt.Topic
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewOffsetDeleteResponseTopicPartition()
			sp.Partition = rp.Partition
			if !c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic) {
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			} else if view.Partition(rt.Topic, rp.Partition) == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				cmds = append(cmds, fsm.OffsetDelete{Group: r.Group, Topic: rt.Topic, Partition: rp.Partition})
				slots = append(slots, slot{ti, pi})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(cmds) == 0 {
		if r.Group == "" {
			resp.ErrorCode = kerr.InvalidGroupID.Code
		} else if c.s.b.Groups().Group(r.Group) == nil {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
		}
		return done(resp), nil
	}
	call := c.startCall(30*time.Second, cmds...)
	return func() kmsg.Response {
		defer call.cancel()
		for i, o := range call.wait() {
			switch o.Code {
			case kerr.GroupIDNotFound.Code, kerr.NonEmptyGroup.Code, kerr.InvalidGroupID.Code:
				// Group-level problems are the response's, as in Kafka.
				resp.ErrorCode = o.Code
			default:
				resp.Topics[slots[i].topic].Partitions[slots[i].part].ErrorCode = o.Code
			}
		}
		return resp
	}, nil
}
