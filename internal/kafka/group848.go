package kafka

// ConsumerGroupHeartbeat v0-1 and ConsumerGroupDescribe v0-1: the consumer
// group protocol of KIP-848, where the broker assigns partitions.
// Behavior:
//   - Every heartbeat is a command (fsm/groups/group848.go): joins (epoch 0),
//     leaves (-1, or -2 for a static member that will return), epochs,
//     revocations and the target assignment are decided in apply, the same
//     on every broker. Server-side assignors: "uniform" (default: even and
//     sticky) and "range". Subscriptions by names or by regular expression
//     (v1, RE2 syntax, matched against whole topic names).
//   - Kafka's defaults, fixed: session timeout 45 s
//     (group.consumer.session.timeout.ms), heartbeat interval 5 s
//     (group.consumer.heartbeat.interval.ms); a member that does not give
//     up revoked partitions within its rebalance timeout is removed.
//   - A group is driven by one protocol at a time: a classic group with
//     members answers GROUP_ID_NOT_FOUND here, a consumer group with
//     members answers INCONSISTENT_GROUP_PROTOCOL to JoinGroup; an empty
//     group (offsets only) changes type. DescribeGroups, ListGroups and
//     OffsetCommit/OffsetFetch (member epochs, STALE_MEMBER_EPOCH) serve
//     consumer groups too.
//   - Authorization (acls.go): ConsumerGroupHeartbeat READ on the group and
//     DESCRIBE on each subscribed topic name; ConsumerGroupDescribe
//     DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED,
//     TOPIC_AUTHORIZATION_FAILED).
// Not done: a regular-expression subscription is not narrowed to the
// topics the member may describe (it cannot read the others: Fetch needs
// READ); racks do not influence assignment; group configs
// (IncrementalAlterConfigs on GROUP resources) are not served; classic
// members cannot join a consumer group (no online migration).

import (
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func group848Routes() []route {
	return []route{
		{key: 68, min: 0, max: 1, handle: handleConsumerGroupHeartbeat},
		{key: 69, min: 0, max: 1, handle: handleConsumerGroupDescribe},
	}
}

func handleConsumerGroupHeartbeat(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := r.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	if !c.groupAllowed(kmsg.ACLOperationRead, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	for _, t := range r.SubscribedTopicNames {
		if !c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t) {
			resp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.ErrorMessage = kmsg.StringPtr("not authorized to describe a subscribed topic")
			return done(resp), nil
		}
	}
	cmd := fsm.ConsumerGroupHeartbeat{Group: r.Group, MemberID: r.MemberID, Epoch: r.MemberEpoch,
		InstanceID: deref(r.InstanceID), RackID: deref(r.RackID), ClientID: c.clientID, ClientHost: c.clientHost(),
		RebalanceTimeoutMs: r.RebalanceTimeoutMillis,
		TopicsSet:          r.SubscribedTopicNames != nil, Topics: r.SubscribedTopicNames,
		RegexSet: r.SubscribedTopicRegex != nil, Regex: deref(r.SubscribedTopicRegex),
		AssignorSet: r.ServerAssignor != nil, Assignor: deref(r.ServerAssignor),
		OwnedSet: r.Topics != nil, GenerateID: r.Version == 0}
	for _, t := range r.Topics {
		cmd.Owned = append(cmd.Owned, fsm.OwnedTopic{ID: t.TopicID, Partitions: t.Partitions})
	}
	call := c.startCall(30*time.Second, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		resp.ErrorCode, resp.ErrorMessage = o.Code, o.msg
		resp.HeartbeatIntervalMillis = fsm.ConsumerHeartbeatIntervalMs
		if o.Code != 0 || o.Group == nil {
			return resp
		}
		id := o.Group.MemberID
		resp.MemberID, resp.MemberEpoch = &id, o.Group.Generation
		if o.Group.SendAssignment {
			view := c.s.b.View()
			a := &kmsg.ConsumerGroupHeartbeatResponseAssignment{}
			for _, name := range sortedTopicNames(o.Group.Assignment) {
				t := view.Topic(name)
				if t == nil {
					continue // deleted since; the next heartbeat retargets
				}
				at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
				at.TopicID, at.Partitions = t.ID, o.Group.Assignment[name]
				a.Topics = append(a.Topics, at)
			}
			resp.Assignment = a
		}
		return resp
	}, nil
}

func sortedTopicNames(tp fsm.TopicPartitions) []string {
	out := make([]string, 0, len(tp))
	for t := range tp {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func handleConsumerGroupDescribe(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ConsumerGroupDescribeRequest)
	resp := r.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	groups, view := c.s.b.Groups(), c.s.b.View()
	loading := c.s.catchingUp()
	for _, name := range r.Groups {
		dg := kmsg.NewConsumerGroupDescribeResponseGroup()
		dg.Group = name
		dg.AuthorizedOperations = authorizedOpsUnknown
		g := groups.Group(name)
		switch {
		case !c.groupAllowed(kmsg.ACLOperationDescribe, name):
			dg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case name == "":
			dg.ErrorCode = kerr.InvalidGroupID.Code
		case loading:
			dg.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		case g == nil || (g.Type != fsm.GroupConsumer && !g.Empty()):
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + name + " not found."
			if g != nil {
				msg = "Group " + name + " is not a consumer group."
			}
			dg.ErrorMessage = &msg
		default:
			if r.IncludeAuthorizedOperations { // of groups described, as Kafka
				dg.AuthorizedOperations = c.authorizedOps(kmsg.ACLResourceTypeGroup, name)
			}
			dg.State, dg.Epoch, dg.AssignmentEpoch, dg.AssignorName = g.ConsumerState, g.Epoch, g.AssignmentEpoch, g.Assignor
			if g.Type != fsm.GroupConsumer {
				dg.State = "Empty"
			}
			for _, m := range g.Consumers {
				dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				dm.MemberID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = m.ID, m.Epoch, m.ClientID, m.ClientHost
				if m.InstanceID != "" {
					inst := m.InstanceID
					dm.InstanceID = &inst
				}
				if m.RackID != "" {
					rack := m.RackID
					dm.RackID = &rack
				}
				dm.SubscribedTopics = m.Topics
				if m.Regex != "" {
					re := m.Regex
					dm.SubscribedTopicRegex = &re
				}
				dm.Assignment = kmsgAssignment(view, m.Assigned)
				dm.TargetAssignment = kmsgAssignment(view, m.Target)
				dm.MemberType = 1 // consumer protocol
				dg.Members = append(dg.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return done(resp), nil
}

func kmsgAssignment(view *fsm.View, tp fsm.TopicPartitions) kmsg.Assignment {
	a := kmsg.NewAssignment()
	for _, name := range sortedTopicNames(tp) {
		t := view.Topic(name)
		if t == nil {
			continue
		}
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID, at.Topic, at.Partitions = t.ID, name, tp[name]
		a.TopicPartitions = append(a.TopicPartitions, at)
	}
	return a
}

// consumerAsClassic describes a KIP-848 member in DescribeGroups' terms:
// its subscription and assignment in the classic consumer protocol's
// encoding, as Kafka does for consumer groups.
func consumerAsClassic(m fsm.ConsumerMemberView) (metadata, assignment []byte) {
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Version = 0
	sub.Topics = m.Topics
	as := kmsg.NewConsumerMemberAssignment()
	as.Version = 0
	for _, name := range sortedTopicNames(m.Assigned) {
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = name, m.Assigned[name]
		as.Topics = append(as.Topics, at)
	}
	return sub.AppendTo(nil), as.AppendTo(nil)
}
