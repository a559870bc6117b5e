package kafka

// Consumer groups, Kafka's classic protocol: FindCoordinator v0-4,
// JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4, LeaveGroup v0-5 (this
// file) and the offset and admin APIs (group_offsets.go, group_admin.go).
// Behavior:
//   - Membership, generations, assignments and committed offsets are
//     replicated state (fsm): every join, sync, heartbeat, leave and commit
//     is a command, and session and rebalance timeouts run on block time,
//     so every broker agrees on the group and on when a member expired.
//   - Any broker serves any group. FindCoordinator names the broker asked
//     (it is up, and holds every group), so when a member's coordinator
//     dies its next FindCoordinator, sent to a broker it can reach, moves
//     it there within one retry. A broker catching up with the chain names
//     instead a live broker picked by a hash of the key (the same answer
//     from every broker that shares its view of the chain).
//   - JoinGroup and SyncGroup wait, as in Kafka: a join is answered when
//     the generation that includes the member is formed (every member
//     rejoined, or the rebalance timeout passed in block time, or the
//     initial delay of 3 s for an empty group's first rebalance); a sync
//     when the leader's assignment is committed. A join whose generation
//     the chain does not form in time (stalled, or this broker cut off)
//     gets NOT_COORDINATOR, so the client looks for another broker.
//     JoinGroup v4+ without an instance id gets MEMBER_ID_REQUIRED with
//     its new id first (KIP-394).
//   - Static membership (KIP-345): a member with group.instance.id that
//     rejoins without its member id takes over its old id's place without a
//     rebalance when its protocols are unchanged; the old id is fenced
//     (FENCED_INSTANCE_ID).
//   - A static leader that takes its old place without a rebalance is told
//     to skip the assignment (KIP-814).
//   - A broker behind the chain answers group reads with
//     COORDINATOR_LOAD_IN_PROGRESS (retriable).
// The KIP-848 consumer protocol is in group848.go.
// Not done: FindCoordinator v5+ (KIP-890) and share groups (KIP-932) are
// not served.
// Authorization (acls.go), as Kafka: READ on the group for JoinGroup,
// SyncGroup, Heartbeat and LeaveGroup (GROUP_AUTHORIZATION_FAILED);
// FindCoordinator DESCRIBE on the group or the transactional id
// (GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

import (
	"context"
	"hash/fnv"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/fsm"
)

func groupRoutes() []route {
	return []route{
		{key: 10, min: 0, max: 4, handle: handleFindCoordinator},
		{key: 11, min: 0, max: 9, handle: handleJoinGroup},
		{key: 12, min: 0, max: 4, handle: handleHeartbeat},
		{key: 13, min: 0, max: 5, handle: handleLeaveGroup},
		{key: 14, min: 0, max: 5, handle: handleSyncGroup},
		{key: 8, min: 0, max: 9, handle: handleOffsetCommit},
		{key: 9, min: 0, max: 9, handle: handleOffsetFetch},
		{key: 15, min: 0, max: 5, handle: handleDescribeGroups},
		{key: 16, min: 0, max: 5, handle: handleListGroups},
		{key: 42, min: 0, max: 2, handle: handleDeleteGroups},
		{key: 47, min: 0, max: 0, handle: handleOffsetDelete},
	}
}

// groupWaitSlack is added to a rebalance timeout when waiting for a join
// or sync to complete: the deadline is judged on block time, which needs
// a block after it to act.
const groupWaitSlack = 5 * time.Second

// handleFindCoordinator names the broker asked. Every broker holds every
// group and every transaction and serves any request about them (their
// state is replicated: each change is a command applied by all), so the
// broker a client has just reached is as good a coordinator as any and is
// known to be up. When the coordinator a client uses dies, the client's
// next FindCoordinator goes to a broker it can reach, which names itself:
// the group carries on within one retry, without waiting for the chain to
// notice the death (Kafka moves a coordinator only when the partition of
// __consumer_offsets holding the group gets a new leader).
//
// A broker that cannot vouch for its own state — just restarted, syncing,
// or cut off from the majority — names instead a broker the chain shows
// alive, picked by a hash of the key among them (the same on every broker
// that shares its view of the chain).
func handleFindCoordinator(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.FindCoordinatorRequest)
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	self := BrokerInfo{NodeID: c.s.opts.NodeID}
	self.Host, self.Port = c.advertised(self)
	var live []BrokerInfo
	if c.s.catchingUp() {
		_, live = c.s.members()
	}
	find := func(key string) (int32, string, int32, int16, *string) {
		if r.CoordinatorType != 0 && r.CoordinatorType != 1 {
			m := "coordinator type must be 0 (group) or 1 (transaction)"
			return -1, "", -1, kerr.InvalidRequest.Code, &m
		}
		if r.CoordinatorType == 0 && !c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, key) {
			return -1, "", -1, kerr.GroupAuthorizationFailed.Code, nil
		}
		if r.CoordinatorType == 1 && !c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, key) {
			return -1, "", -1, kerr.TransactionalIDAuthorizationFailed.Code, nil
		}
		b := self
		if len(live) > 0 {
			h := fnv.New32a()
			h.Write([]byte{byte(r.CoordinatorType)})
			h.Write([]byte(key))
			b = live[h.Sum32()%uint32(len(live))]
		}
		return b.NodeID, b.Host, b.Port, 0, nil
	}
	if r.Version < 4 {
		resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage = find(r.CoordinatorKey)
		return done(resp), nil
	}
	for _, key := range r.CoordinatorKeys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key = key
		co.NodeID, co.Host, co.Port, co.ErrorCode, co.ErrorMessage = find(key)
		resp.Coordinators = append(resp.Coordinators, co)
	}
	return done(resp), nil
}

// call is commands handed to the broker in arrival order (in a handler),
// whose results are waited for in respond.
type call struct {
	c       *conn
	ctx     context.Context
	cancel  context.CancelFunc
	pending *broker.Pending
}

// startCall enqueues cmds with a deadline of timeout.
func (c *conn) startCall(timeout time.Duration, cmds ...fsm.Command) *call {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	return &call{c: c, ctx: ctx, cancel: cancel, pending: c.s.b.Enqueue(ctx, byzantineCommands(cmds)...)}
}

func (g *call) wait() []outcome {
	defer g.c.waitedSince(time.Now())
	res, errs := g.pending.Wait(g.ctx)
	return g.c.outcomes(res, errs)
}

// answerCode enqueues cmd and answers resp once it is applied, handing set
// the command's error code.
func (c *conn) answerCode(cmd fsm.Command, resp kmsg.Response, set func(int16)) respond {
	call := c.startCall(30*time.Second, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		set(call.wait()[0].Code)
		return resp
	}
}

// awaitGroup calls check with the committed group (nil when it does not
// exist) now and after every commit until check returns true or ctx ends.
func (s *Server) awaitGroup(ctx context.Context, name string, check func(g *fsm.GroupView) bool) bool {
	for {
		changed := s.b.Changed()
		if check(s.b.Groups().Group(name)) {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// awaitGroup is Server.awaitGroup, its time counted as waiting
// (request_percentage, throttle.go).
func (c *conn) awaitGroup(ctx context.Context, name string, check func(g *fsm.GroupView) bool) bool {
	defer c.waitedSince(time.Now())
	return c.s.awaitGroup(ctx, name, check)
}

func (c *conn) clientHost() string {
	if c.nc == nil { // a connection made by a test
		return ""
	}
	host, _, err := net.SplitHostPort(c.nc.RemoteAddr().String())
	if err != nil {
		return "/" + c.nc.RemoteAddr().String()
	}
	return "/" + host
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// groupAllowed reports whether c may perform op on the group.
func (c *conn) groupAllowed(op kmsg.ACLOperation, group string) bool {
	return c.authorize(op, kmsg.ACLResourceTypeGroup, group)
}

func handleJoinGroup(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.JoinGroupRequest)
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.MemberID = -1, r.MemberID
	if !c.groupAllowed(kmsg.ACLOperationRead, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	rebalance := r.RebalanceTimeoutMillis
	if r.Version == 0 {
		rebalance = r.SessionTimeoutMillis
	}
	cmd := fsm.JoinGroup{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID),
		ClientID: c.clientID, ClientHost: c.clientHost(), ProtocolType: r.ProtocolType,
		SessionTimeoutMs: r.SessionTimeoutMillis, RebalanceTimeoutMs: rebalance,
		RequireKnownMember: r.Version >= 4 && r.InstanceID == nil}
	for _, p := range r.Protocols {
		cmd.Protocols = append(cmd.Protocols, fsm.GroupProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	call := c.startCall(time.Duration(max(rebalance, 0))*time.Millisecond+groupWaitSlack, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		if o.Group != nil {
			resp.MemberID = o.Group.MemberID
		}
		if o.Code != 0 {
			resp.ErrorCode = o.Code
			return resp
		}
		id, after, ready := o.Group.MemberID, o.Group.Generation, o.Group.Ready
		var (
			g    *fsm.GroupView
			code int16
		)
		formed := c.awaitGroup(call.ctx, r.Group, func(v *fsm.GroupView) bool {
			g = v
			var m *fsm.MemberView
			if v != nil {
				m = v.Member(id)
			}
			switch {
			case m == nil:
				code = kerr.UnknownMemberID.Code
			case ready || m.Generation > after:
			default:
				return false
			}
			return true
		})
		switch {
		case !formed:
			// The chain did not reach the rebalance deadline in time (it
			// is stalled, or this broker is cut off): find another broker.
			resp.ErrorCode = kerr.NotCoordinator.Code
		case code != 0:
			resp.ErrorCode = code
		default:
			fillJoinResponse(resp, g, id, ready)
		}
		return resp
	}, nil
}

func fillJoinResponse(resp *kmsg.JoinGroupResponse, g *fsm.GroupView, id string, ready bool) {
	resp.Generation = g.Generation
	resp.ProtocolType = &g.ProtocolType
	proto := g.Protocol
	resp.Protocol = &proto
	resp.LeaderID = g.Leader
	resp.MemberID = id
	if id != g.Leader {
		return
	}
	// A static leader that took its old place without a rebalance keeps
	// the assignment it made (KIP-814).
	resp.SkipAssignment = ready
	for _, m := range g.Members {
		if m.Generation != g.Generation {
			continue
		}
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.ID
		if m.InstanceID != "" {
			inst := m.InstanceID
			jm.InstanceID = &inst
		}
		for _, p := range m.Protocols {
			if p.Name == g.Protocol {
				jm.ProtocolMetadata = p.Metadata
			}
		}
		resp.Members = append(resp.Members, jm)
	}
}

func handleSyncGroup(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.SyncGroupRequest)
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	if !c.groupAllowed(kmsg.ACLOperationRead, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	cmd := fsm.SyncGroup{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID),
		Generation: r.Generation, ProtocolType: deref(r.ProtocolType), Protocol: deref(r.Protocol)}
	for _, a := range r.GroupAssignment {
		cmd.Assignments = append(cmd.Assignments, fsm.MemberAssignment{MemberID: a.MemberID, Assignment: a.MemberAssignment})
	}
	wait := time.Minute
	if g := c.s.b.Groups().Group(r.Group); g != nil {
		if m := g.Member(r.MemberID); m != nil {
			wait = time.Duration(m.RebalanceTimeoutMs) * time.Millisecond
		}
	}
	call := c.startCall(wait+groupWaitSlack, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		if o.Code != 0 {
			resp.ErrorCode = o.Code
			return resp
		}
		code := int16(0)
		ok := c.awaitGroup(call.ctx, r.Group, func(g *fsm.GroupView) bool {
			var m *fsm.MemberView
			if g != nil {
				m = g.Member(r.MemberID)
			}
			switch {
			case m == nil:
				code = kerr.UnknownMemberID.Code
			case g.Generation != r.Generation || g.State == fsm.GroupPreparingRebalance:
				code = kerr.RebalanceInProgress.Code
			case g.State == fsm.GroupStable:
				resp.MemberAssignment = m.Assignment
				pt, p := g.ProtocolType, g.Protocol
				resp.ProtocolType, resp.Protocol = &pt, &p
			default:
				return false
			}
			return true
		})
		if !ok {
			code = kerr.RebalanceInProgress.Code
		}
		resp.ErrorCode = code
		if code != 0 {
			resp.MemberAssignment = nil
		}
		return resp
	}, nil
}

func handleHeartbeat(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.HeartbeatRequest)
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	if !c.groupAllowed(kmsg.ACLOperationRead, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	return c.answerCode(fsm.Heartbeat{Group: r.Group, MemberID: r.MemberID,
		InstanceID: deref(r.InstanceID), Generation: r.Generation}, resp, func(code int16) { resp.ErrorCode = code }), nil
}

func handleLeaveGroup(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.LeaveGroupRequest)
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	if !c.groupAllowed(kmsg.ACLOperationRead, r.Group) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	var cmds []fsm.Command
	if r.Version < 3 {
		cmds = append(cmds, fsm.LeaveGroup{Group: r.Group, MemberID: r.MemberID})
	}
	for _, m := range r.Members {
		cmds = append(cmds, fsm.LeaveGroup{Group: r.Group, MemberID: m.MemberID, InstanceID: deref(m.InstanceID)})
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	call := c.startCall(30*time.Second, cmds...)
	return func() kmsg.Response {
		defer call.cancel()
		out := call.wait()
		if r.Version < 3 {
			resp.ErrorCode = out[0].Code
			return resp
		}
		for i, m := range r.Members {
			lm := kmsg.NewLeaveGroupResponseMember()
			lm.MemberID, lm.InstanceID, lm.ErrorCode = m.MemberID, m.InstanceID, out[i].Code
			resp.Members = append(resp.Members, lm)
		}
		return resp
	}, nil
}
