package kafka

// ShareGroupHeartbeat v1, ShareGroupDescribe v1, ShareFetch v1-2 and
// ShareAcknowledge v1-2: share groups (KIP-932, as Kafka 4.2 serves them;
// docs/share-groups.md).
// Behavior:
//   - Every heartbeat, acquisition and acknowledgement is a command
//     (fsm/shares): members, assignments, acquisition locks, delivery
//     counts, archiving and the share-partition start offset are decided
//     in apply, the same on every broker, so any broker serves any share
//     partition and a broker's crash loses no acknowledgement.
//   - Share sessions are the broker's own, as Kafka's are: epoch 0 opens
//     one (replacing the member's previous one on this broker), each
//     ShareFetch or ShareAcknowledge moves its epoch on by one, -1 closes
//     it and releases what the member still holds. At most
//     maxShareSessions per broker (SHARE_SESSION_LIMIT_REACHED), sessions
//     of closed connections making room first.
//   - A ShareFetch applies its acknowledgements, then acquires up to
//     max_records (500 by default) over the session's partitions, starting
//     at a partition that moves with the epoch; with nothing acquired it
//     waits up to max_wait_ms for new records and tries again. The records
//     go out as whole stored batches covering every offset acquired; the
//     client keeps the acquired ones.
//   - The assignor gives each partition of the subscribed topics to as
//     many members as the members outnumber the partitions (rounded up),
//     so every member has work. Heartbeat interval and session timeout
//     are the group's share.heartbeat.interval.ms and
//     share.session.timeout.ms (Kafka's defaults: 5 s, 45 s).
//   - A share group and a consumer group never share a name:
//     GROUP_ID_NOT_FOUND either way, as Kafka answers.
//   - Below app version 15 (docs/cluster.md) every share request is
//     answered UNSUPPORTED_VERSION.
//   - Authorization (acls.go): ShareGroupHeartbeat READ on the group and
//     DESCRIBE on each subscribed topic; ShareFetch and ShareAcknowledge
//     READ on the group and on each topic; ShareGroupDescribe DESCRIBE on
//     each group.
//   - ShareFetch acquires at most max_records records in both acquire
//     modes of v2 (KIP-1206): the record-limit mode's strict limit, which
//     the batch-optimized mode may exceed to a batch's end in Kafka and
//     does not here.
// Not done: racks do not influence assignment.

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

func shareRoutes() []route {
	return []route{
		{key: 76, min: 1, max: 1, handle: handleShareGroupHeartbeat},
		{key: 77, min: 1, max: 1, handle: handleShareGroupDescribe},
		{key: 78, min: 1, max: 2, handle: handleShareFetch},
		{key: 79, min: 1, max: 2, handle: handleShareAcknowledge},
	}
}

// maxShareSessions bounds the share sessions one broker keeps (Kafka's
// group.share.max.share.sessions default).
const maxShareSessions = 2000

// defaultShareMaxRecords is what a ShareFetch acquires at most when it
// does not say (v0 has no max_records).
const defaultShareMaxRecords = 500

type sharePartKey struct {
	topic     string
	partition int32
}

// shareSession is one member's share session on this broker.
type shareSession struct {
	c     *conn
	next  int32 // the epoch its next request carries
	parts []sharePartKey
}

type shareSessionKey struct{ group, member string }

// shareSessions are the broker's share sessions.
type shareSessions struct {
	// limit bounds them (0: maxShareSessions).
	limit int
	mu    struct {
		sync.Mutex
		m map[shareSessionKey]*shareSession
	}
}

// open makes a member's session anew (epoch 0).
func (s *shareSessions) open(c *conn, k shareSessionKey) (*shareSession, int16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.m == nil {
		s.mu.m = map[shareSessionKey]*shareSession{}
	}
	limit := s.limit
	if limit == 0 {
		limit = maxShareSessions
	}
	if _, ok := s.mu.m[k]; !ok && len(s.mu.m) >= limit {
		for sk, ss := range s.mu.m { // sessions of closed connections go
			if ss.c.ctx.Err() != nil {
				delete(s.mu.m, sk)
			}
		}
		if len(s.mu.m) >= limit {
			return nil, kerr.ShareSessionLimitReached.Code
		}
	}
	ss := &shareSession{c: c}
	s.mu.m[k] = ss
	return ss, 0
}

// drop removes ss, a session opened by a request that failed.
func (s *shareSessions) drop(k shareSessionKey, ss *shareSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.m[k] == ss {
		delete(s.mu.m, k)
	}
}

// at is the member's session for a request with epoch (> 0 or -1).
func (s *shareSessions) at(k shareSessionKey, epoch int32) (*shareSession, int16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.mu.m[k]
	switch {
	case ss == nil:
		return nil, kerr.ShareSessionNotFound.Code
	case epoch != -1 && epoch != ss.next:
		return nil, kerr.InvalidShareSessionEpoch.Code
	}
	return ss, 0
}

// update applies a request's partitions to ss (added, then forgotten)
// and moves its epoch on; with close it removes ss. It returns the
// session's partitions (with close: those it had).
func (s *shareSessions) update(k shareSessionKey, ss *shareSession, epoch int32, add, forget []sharePartKey, close bool) []sharePartKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if close {
		if s.mu.m[k] == ss {
			delete(s.mu.m, k)
		}
		return append([]sharePartKey(nil), ss.parts...)
	}
	for _, p := range add {
		if !containsPart(ss.parts, p) {
			ss.parts = append(ss.parts, p)
		}
	}
	for _, p := range forget {
		for i, q := range ss.parts {
			if q == p {
				ss.parts = append(ss.parts[:i:i], ss.parts[i+1:]...)
				break
			}
		}
	}
	ss.next = max(1, epoch+1)
	return append([]sharePartKey(nil), ss.parts...)
}

func containsPart(ps []sharePartKey, p sharePartKey) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// sharesOff says the chain runs an app version without share groups:
// their requests are answered UNSUPPORTED_VERSION.
func (c *conn) sharesOff() bool { return c.s.b.Upgrade().Version < fsm.ShareGroupsVersion }

func handleShareGroupHeartbeat(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ShareGroupHeartbeatRequest)
	resp := r.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	if c.sharesOff() {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return done(resp), nil
	}
	if !c.groupAllowed(kmsg.ACLOperationRead, r.GroupID) {
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
	topics := slices.Compact(slices.Sorted(slices.Values(r.SubscribedTopicNames)))
	cmd := fsm.ShareGroupHeartbeat{Group: r.GroupID, MemberID: r.MemberID, Epoch: r.MemberEpoch, RackID: deref(r.RackID),
		ClientID: c.clientID, ClientHost: c.clientHost(), TopicsSet: r.SubscribedTopicNames != nil, Topics: topics}
	call := c.startCall(30*time.Second, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		resp.ErrorCode, resp.ErrorMessage = o.Code, o.msg
		resp.HeartbeatIntervalMillis = c.shareHeartbeatInterval(r.GroupID)
		if o.Code != 0 || o.Group == nil {
			return resp
		}
		id := o.Group.MemberID
		resp.MemberID, resp.MemberEpoch = &id, o.Group.Generation
		if o.Group.SendAssignment {
			view := c.s.b.View()
			a := &kmsg.ShareGroupHeartbeatResponseAssignment{}
			for _, name := range sortedTopicNames(o.Group.Assignment) {
				t := view.Topic(name)
				if t == nil {
					continue // deleted since; the group is assigned again
				}
				at := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
				at.TopicID, at.Partitions = t.ID, o.Group.Assignment[name]
				a.TopicPartitions = append(a.TopicPartitions, at)
			}
			resp.Assignment = a
		}
		return resp
	}, nil
}

// shareHeartbeatInterval is the group's share.heartbeat.interval.ms.
func (c *conn) shareHeartbeatInterval(group string) int32 {
	g := c.s.b.ShareGroups().Group(group)
	if g == nil {
		return fsm.ShareHeartbeatIntervalMs
	}
	v, _ := g.Config("share.heartbeat.interval.ms")
	n, err := strconv.Atoi(v)
	if err != nil {
		return fsm.ShareHeartbeatIntervalMs
	}
	return int32(n)
}

func handleShareGroupDescribe(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ShareGroupDescribeRequest)
	resp := r.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	shares, view := c.s.b.ShareGroups(), c.s.b.View()
	for _, name := range r.GroupIDs {
		dg := kmsg.NewShareGroupDescribeResponseGroup()
		dg.GroupID = name
		dg.AuthorizedOperations = authorizedOpsUnknown
		g := shares.Group(name)
		switch {
		case !c.groupAllowed(kmsg.ACLOperationDescribe, name):
			dg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case name == "":
			dg.ErrorCode = kerr.InvalidGroupID.Code
		case g == nil:
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + name + " not found."
			if c.s.b.Groups().Group(name) != nil {
				msg = "Group " + name + " is not a share group."
			}
			dg.ErrorMessage = &msg
		default:
			if r.IncludeAuthorizedOperations {
				dg.AuthorizedOperations = c.authorizedOps(kmsg.ACLResourceTypeGroup, name)
			}
			dg.GroupState, dg.GroupEpoch, dg.AssignmentEpoch, dg.Assignor = g.State, g.Epoch, g.Epoch, "simple"
			for _, m := range g.Members {
				dm := kmsg.NewShareGroupDescribeResponseGroupMember()
				dm.MemberID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = m.ID, m.Epoch, m.ClientID, m.ClientHost
				if m.RackID != "" {
					rack := m.RackID
					dm.RackID = &rack
				}
				dm.SubscribedTopicNames = m.Topics
				for _, tn := range sortedTopicNames(m.Assigned) {
					t := view.Topic(tn)
					if t == nil {
						continue
					}
					at := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
					at.TopicID, at.Topic, at.Partitions = t.ID, tn, m.Assigned[tn]
					dm.Assignment.TopicPartitions = append(dm.Assignment.TopicPartitions, at)
				}
				dg.Members = append(dg.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return done(resp), nil
}

// shareRequest is what ShareFetch and ShareAcknowledge have in common,
// resolved: the group and member, the session and its epoch, and per
// partition named, its acknowledgements or its error.
type shareRequest struct {
	group, member string
	epoch         int32
	acks          map[sharePartKey][]fsm.ShareAckBatch
	errs          map[sharePartKey]int16
	named         []sharePartKey // in request order
	ids           map[string][16]byte
}

// resolveShare resolves a request's topics by id, checking READ on each;
// add collects every partition named.
func (c *conn) resolveShare(sr *shareRequest, topicID [16]byte, partitions []int32, acks func(i int) []fsm.ShareAckBatch) {
	var name string
	t := c.s.b.View().TopicByID(topicID)
	ok := t != nil
	if ok {
		name = t.Name
	}
	for i, p := range partitions {
		k := sharePartKey{name, p}
		if !ok {
			k = sharePartKey{topicIDKey(topicID), p}
		}
		sr.named = append(sr.named, k)
		switch {
		case !ok:
			sr.errs[k] = kerr.UnknownTopicID.Code
		case !c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, name):
			sr.errs[k] = kerr.TopicAuthorizationFailed.Code
		default:
			sr.ids[name] = topicID
			if a := acks(i); len(a) > 0 {
				sr.acks[k] = a
			}
		}
	}
}

// topicIDKey stands for a topic id no topic has, in a partition key.
func topicIDKey(id [16]byte) string { return "\x00" + string(id[:]) }

func handleShareFetch(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ShareFetchRequest)
	resp := r.ResponseKind().(*kmsg.ShareFetchResponse)
	sr := &shareRequest{group: deref(r.GroupID), member: deref(r.MemberID), epoch: r.ShareSessionEpoch,
		acks: map[sharePartKey][]fsm.ShareAckBatch{}, errs: map[sharePartKey]int16{}, ids: map[string][16]byte{}}
	fail := func(code int16) (respond, error) { resp.ErrorCode = code; return done(resp), nil }
	switch {
	case c.sharesOff():
		return fail(kerr.UnsupportedVersion.Code)
	case sr.group == "" || sr.member == "":
		return fail(kerr.InvalidRequest.Code)
	case !c.groupAllowed(kmsg.ACLOperationRead, sr.group):
		return fail(kerr.GroupAuthorizationFailed.Code)
	}
	for _, t := range r.Topics {
		parts := make([]int32, len(t.Partitions))
		for i, p := range t.Partitions {
			parts[i] = p.Partition
		}
		c.resolveShare(sr, t.TopicID, parts, func(i int) []fsm.ShareAckBatch {
			var out []fsm.ShareAckBatch
			for _, a := range t.Partitions[i].AcknowledgementBatches {
				out = append(out, fsm.ShareAckBatch{First: a.FirstOffset, Last: a.LastOffset, Types: a.AcknowledgeTypes})
			}
			return out
		})
	}
	var forget []sharePartKey
	view := c.s.b.View()
	for _, t := range r.ForgottenTopicsData {
		if tv := view.TopicByID(t.TopicID); tv != nil {
			for _, p := range t.Partitions {
				forget = append(forget, sharePartKey{tv.Name, p})
			}
		}
	}
	key := shareSessionKey{sr.group, sr.member}
	var ss *shareSession
	var code int16
	if sr.epoch == 0 {
		if len(sr.acks) > 0 {
			return fail(kerr.InvalidRequest.Code) // a new session has nothing to acknowledge
		}
		ss, code = c.s.shareSessions.open(c, key)
	} else {
		ss, code = c.s.shareSessions.at(key, sr.epoch)
	}
	if code != 0 {
		return fail(code)
	}
	closing := sr.epoch == -1
	var add []sharePartKey
	for _, k := range sr.named {
		if _, bad := sr.errs[k]; !bad {
			add = append(add, k)
		}
	}
	parts := c.s.shareSessions.update(key, ss, sr.epoch, add, forget, closing)
	maxRecords := r.MaxRecords
	if r.Version == 0 || maxRecords <= 0 {
		maxRecords = defaultShareMaxRecords
	}
	cmd := fsm.ShareAcquire{Group: sr.group, MemberID: sr.member, MaxRecords: maxRecords, Renew: r.IsRenewAck, Close: closing}
	acquire := !closing && !r.IsRenewAck
	// The session's partitions, from one that moves with the epoch, so a
	// small max_records does not always go to the first; then those that
	// carry acknowledgements only.
	inCmd := map[sharePartKey]bool{}
	for i := range parts {
		k := parts[(i+int(max(sr.epoch, 0)))%len(parts)]
		inCmd[k] = true
		cmd.Parts = append(cmd.Parts, fsm.SharePart{Topic: k.topic, Partition: k.partition, Acquire: acquire, Acks: sr.acks[k]})
	}
	for _, k := range sr.named {
		if a := sr.acks[k]; len(a) > 0 && !inCmd[k] {
			inCmd[k] = true
			cmd.Parts = append(cmd.Parts, fsm.SharePart{Topic: k.topic, Partition: k.partition, Acks: a})
		}
	}
	wait := time.Duration(max(r.MaxWaitMillis, 0)) * time.Millisecond
	deadline := time.Now().Add(min(wait, 30*time.Second))
	return func() kmsg.Response {
		hwms := c.shareHighWatermarks(cmd.Parts)
		o := c.shareCall(cmd)
		for o.Code == 0 && acquire && !acquiredAny(o) && time.Now().Before(deadline) {
			// Long poll: wait for a partition of the session to grow, or
			// records of it to become acquirable again.
			if !c.awaitShareRecords(sr.group, cmd.Parts, hwms, deadline) {
				break
			}
			hwms = c.shareHighWatermarks(cmd.Parts)
			for i := range cmd.Parts {
				cmd.Parts[i].Acks = nil // applied by the first command
			}
			o = c.shareCall(cmd)
		}
		if o.Code != 0 {
			if sr.epoch == 0 {
				c.s.shareSessions.drop(key, ss) // no session for a group or member that is not there
			}
			resp.ErrorCode, resp.ErrorMessage = o.Code, o.msg
			return resp
		}
		if o.Share != nil {
			resp.AcquisitionLockTimeoutMillis = o.Share.LockMs
		}
		c.fillShareFetch(resp, sr, o.Share, sr.epoch == 0)
		return resp
	}, nil
}

func (c *conn) shareCall(cmd fsm.ShareAcquire) outcome {
	call := c.startCall(30*time.Second, cmd)
	defer call.cancel()
	return call.wait()[0]
}

func acquiredAny(o outcome) bool {
	if o.Share == nil {
		return false
	}
	for _, p := range o.Share.Parts {
		if len(p.Acquired) > 0 {
			return true
		}
	}
	return false
}

// shareHighWatermarks are the committed high watermarks of parts.
func (c *conn) shareHighWatermarks(parts []fsm.SharePart) []int64 {
	view := c.s.b.View()
	out := make([]int64, len(parts))
	for i, p := range parts {
		if tp := view.Partition(p.Topic, p.Partition); tp != nil {
			out[i] = tp.HighWatermark()
		}
	}
	return out
}

// awaitShareRecords waits until a partition of parts grows past hwms or
// has records the group may acquire again (released, their lock expired,
// their key's earlier record done), or the deadline; it reports which.
// Every waiting member wakes: one acquires.
func (c *conn) awaitShareRecords(group string, parts []fsm.SharePart, hwms []int64, deadline time.Time) bool {
	defer c.waitedSince(time.Now())
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		changed := c.s.b.Changed()
		for i, h := range c.shareHighWatermarks(parts) {
			if h > hwms[i] {
				return true
			}
		}
		if g := c.s.b.ShareGroups().Group(group); g != nil {
			for _, pv := range g.Parts {
				if pv.Acquirable > 0 && slices.ContainsFunc(parts, func(p fsm.SharePart) bool { return p.Topic == pv.Topic && p.Partition == pv.Partition }) {
					return true
				}
			}
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		case <-c.ctx.Done():
			return false
		}
	}
}

// fillShareFetch answers each partition: those with an error, with
// acknowledgements, with records acquired, and with all asked for a new
// session.
func (c *conn) fillShareFetch(resp *kmsg.ShareFetchResponse, sr *shareRequest, res *fsm.ShareResult, full bool) {
	type entry struct {
		k  sharePartKey
		sp kmsg.ShareFetchResponseTopicPartition
	}
	var entries []entry
	seen := map[sharePartKey]bool{}
	add := func(k sharePartKey, sp kmsg.ShareFetchResponseTopicPartition) {
		if seen[k] {
			return
		}
		seen[k] = true
		sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = -1, -1
		entries = append(entries, entry{k, sp})
	}
	for _, k := range sr.named {
		if code, bad := sr.errs[k]; bad {
			sp := kmsg.NewShareFetchResponseTopicPartition()
			sp.Partition, sp.ErrorCode, sp.AcknowledgeErrorCode = k.partition, code, code
			add(k, sp)
		}
	}
	view := c.s.b.View()
	total := 0
	if res != nil {
		for _, p := range res.Parts {
			k := sharePartKey{p.Topic, p.Partition}
			_, acked := sr.acks[k]
			asked := full && containsPart(sr.named, k)
			if len(p.Acquired) == 0 && !acked && !asked && p.Code == 0 {
				continue
			}
			sp := kmsg.NewShareFetchResponseTopicPartition()
			sp.Partition, sp.ErrorCode, sp.AcknowledgeErrorCode = p.Partition, p.Code, p.AckCode
			sp.Records = []byte{}
			if len(p.Acquired) > 0 {
				data, err := c.readAcquired(view, p)
				if err == nil {
					data, err = c.s.runFetchPlugins(p.Topic, p.Partition, c.principalNow(), data)
				}
				if err != nil {
					// The records are acquired but cannot be sent: the
					// client releases what it did not get (gaps it
					// cannot tell apart) only when told; so the error is
					// the partition's, and the locks expire.
					sp.ErrorCode = kerr.KafkaStorageError.Code
				} else {
					sp.Records = data
					total += len(data)
					for _, a := range p.Acquired {
						ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
						ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = a.First, a.Last, a.Deliveries
						sp.AcquiredRecords = append(sp.AcquiredRecords, ar)
					}
				}
			}
			add(k, sp)
		}
	}
	for _, k := range sr.named { // acknowledged where the command did not reach
		if _, acked := sr.acks[k]; acked && !seen[k] {
			sp := kmsg.NewShareFetchResponseTopicPartition()
			sp.Partition = k.partition
			add(k, sp)
		}
	}
	c.fetched(total)
	byTopic := map[string]int{}
	for _, e := range entries {
		i, ok := byTopic[e.k.topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[e.k.topic] = i
			st := kmsg.NewShareFetchResponseTopic()
			st.TopicID = c.shareTopicID(view, sr, e.k.topic)
			resp.Topics = append(resp.Topics, st)
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, e.sp)
	}
}

// shareTopicID is the id of a topic of a share request.
func (c *conn) shareTopicID(view *fsm.View, sr *shareRequest, name string) [16]byte {
	if id, ok := sr.ids[name]; ok {
		return id
	}
	if len(name) == 17 && name[0] == 0 {
		var id [16]byte
		copy(id[:], name[1:])
		return id
	}
	if t := view.Topic(name); t != nil {
		return t.ID
	}
	return [16]byte{}
}

// readAcquired reads the stored batches holding every offset p acquired.
func (c *conn) readAcquired(view *fsm.View, p fsm.SharePartResult) ([]byte, error) {
	tp := view.Partition(p.Topic, p.Partition)
	if tp == nil {
		return nil, fsm.ErrPartitionGone
	}
	first, last := p.Acquired[0].First, p.Acquired[len(p.Acquired)-1].Last
	var out []byte
	for off := first; off <= last; {
		data, err := tp.ReadWith(off, 1<<20, fsm.ReadOptions{})
		if err != nil {
			return nil, err
		}
		if len(data) == 0 {
			break
		}
		batches, err := record.Split(data)
		if err != nil {
			return nil, err
		}
		for _, b := range batches {
			h, err := record.ParseHeader(b)
			if err != nil {
				return nil, err
			}
			if h.BaseOffset > last {
				return out, nil
			}
			out = append(out, b...)
			off = h.LastOffset() + 1
		}
	}
	return out, nil
}

func handleShareAcknowledge(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ShareAcknowledgeRequest)
	resp := r.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	sr := &shareRequest{group: deref(r.GroupID), member: deref(r.MemberID), epoch: r.ShareSessionEpoch,
		acks: map[sharePartKey][]fsm.ShareAckBatch{}, errs: map[sharePartKey]int16{}, ids: map[string][16]byte{}}
	fail := func(code int16) (respond, error) { resp.ErrorCode = code; return done(resp), nil }
	switch {
	case c.sharesOff():
		return fail(kerr.UnsupportedVersion.Code)
	case sr.group == "" || sr.member == "":
		return fail(kerr.InvalidRequest.Code)
	case !c.groupAllowed(kmsg.ACLOperationRead, sr.group):
		return fail(kerr.GroupAuthorizationFailed.Code)
	case sr.epoch == 0:
		return fail(kerr.InvalidShareSessionEpoch.Code) // a session opens with a ShareFetch
	}
	for _, t := range r.Topics {
		parts := make([]int32, len(t.Partitions))
		for i, p := range t.Partitions {
			parts[i] = p.Partition
		}
		c.resolveShare(sr, t.TopicID, parts, func(i int) []fsm.ShareAckBatch {
			var out []fsm.ShareAckBatch
			for _, a := range t.Partitions[i].AcknowledgementBatches {
				out = append(out, fsm.ShareAckBatch{First: a.FirstOffset, Last: a.LastOffset, Types: a.AcknowledgeTypes})
			}
			return out
		})
	}
	key := shareSessionKey{sr.group, sr.member}
	ss, code := c.s.shareSessions.at(key, sr.epoch)
	if code != 0 {
		return fail(code)
	}
	closing := sr.epoch == -1
	had := c.s.shareSessions.update(key, ss, sr.epoch, nil, nil, closing)
	cmd := fsm.ShareAcquire{Group: sr.group, MemberID: sr.member, Renew: r.IsRenewAck, Close: closing}
	inCmd := map[sharePartKey]bool{}
	for _, k := range sr.named {
		if a := sr.acks[k]; len(a) > 0 {
			inCmd[k] = true
			cmd.Parts = append(cmd.Parts, fsm.SharePart{Topic: k.topic, Partition: k.partition, Acks: a})
		}
	}
	if closing { // what the member holds of the session's partitions goes back
		for _, k := range had {
			if !inCmd[k] {
				cmd.Parts = append(cmd.Parts, fsm.SharePart{Topic: k.topic, Partition: k.partition})
			}
		}
	}
	return func() kmsg.Response {
		o := c.shareCall(cmd)
		if o.Code != 0 {
			resp.ErrorCode, resp.ErrorMessage = o.Code, o.msg
			return resp
		}
		codes := map[sharePartKey]int16{}
		if o.Share != nil {
			resp.AcquisitionLockTimeoutMillis = o.Share.LockMs
			for _, p := range o.Share.Parts {
				codes[sharePartKey{p.Topic, p.Partition}] = p.AckCode
			}
		}
		view := c.s.b.View()
		byTopic := map[string]int{}
		for _, k := range sr.named {
			code := codes[k]
			if e, bad := sr.errs[k]; bad {
				code = e
			}
			i, ok := byTopic[k.topic]
			if !ok {
				i = len(resp.Topics)
				byTopic[k.topic] = i
				st := kmsg.NewShareAcknowledgeResponseTopic()
				st.TopicID = c.shareTopicID(view, sr, k.topic)
				resp.Topics = append(resp.Topics, st)
			}
			sp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			sp.Partition, sp.ErrorCode = k.partition, code
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = -1, -1
			resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, sp)
		}
		return resp
	}, nil
}
