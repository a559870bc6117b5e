package kafka

// OffsetCommit v0-9 and OffsetFetch v0-9 (batched, multi-group from v8).
// Behavior:
//   - Every partition of an OffsetCommit is one command; they commit in
//     one block and are checked as Kafka checks them: a commit with
//     generation -1 and no member id is accepted while the group has no
//     members (simple consumers, admin tools); otherwise the member and
//     generation must be current (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
//     FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS while the group waits for
//     its assignment). Metadata over 4096 bytes gets
//     OFFSET_METADATA_TOO_LARGE; an unknown topic or partition
//     UNKNOWN_TOPIC_OR_PARTITION. The commit's leader epoch and metadata
//     are kept and returned by OffsetFetch.
//   - Offsets expire as in Kafka 2.1+: those of a group without members
//     offsets.retention.minutes (7 days) after the later of their commit
//     and the group becoming empty. The v2-v4 retention_time field is
//     ignored, as Kafka does since 2.1. A deleted topic's offsets go with it.
//   - OffsetFetch reads the broker's committed state; partitions without a
//     committed offset answer -1. A broker behind the chain answers
//     COORDINATOR_LOAD_IN_PROGRESS.
//   - For KIP-848 consumer groups the generation of OffsetCommit and the
//     member epoch of OffsetFetch v9 must be the member's current epoch
//     (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).
// Authorization (acls.go), as Kafka: OffsetCommit READ on the group and on
// each topic; OffsetFetch DESCRIBE on the group and on each topic (a topic
// without it is left out of an all-topics answer, and answered
// TOPIC_AUTHORIZATION_FAILED when asked for); GROUP_AUTHORIZATION_FAILED,
// TOPIC_AUTHORIZATION_FAILED.
// Not done: require_stable (v7+) waits for nothing and never answers
// UNSTABLE_OFFSET_COMMIT (a transaction's offsets, txns.go, are invisible
// until it commits); v10 (topic ids) is not served.

import (
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleOffsetCommit(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.OffsetCommitRequest)
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	generation := r.Generation
	if r.Version == 0 {
		generation = -1
	}
	groupOK := c.groupAllowed(kmsg.ACLOperationRead, r.Group)
	var cmds []fsm.Command
	type slot struct{ topic, part int }
	var slots []slot
	for ti, rt := range r.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		topicOK := c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic)
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			switch {
			case !groupOK:
				sp.ErrorCode = kerr.GroupAuthorizationFailed.Code
			case !topicOK:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			}
			st.Partitions = append(st.Partitions, sp)
			if sp.ErrorCode != 0 {
				continue
			}
			slots = append(slots, slot{ti, pi})
			epoch := rp.LeaderEpoch
			if r.Version < 6 {
				epoch = -1
			}
			cmds = append(cmds, fsm.OffsetCommit{Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID),
				Generation: generation, Topic: rt.Topic, Partition: rp.Partition, Offset: rp.Offset,
				LeaderEpoch: epoch, Metadata: deref(rp.Metadata)})
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	call := c.startCall(30*time.Second, cmds...)
	return func() kmsg.Response {
		defer call.cancel()
		for i, o := range call.wait() {
			resp.Topics[slots[i].topic].Partitions[slots[i].part].ErrorCode = o.Code
		}
		return resp
	}, nil
}

func handleOffsetFetch(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.OffsetFetchRequest)
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	loading := c.s.catchingUp()
	groups := c.s.b.Groups()
	view := c.s.b.View()
	if r.Version < 8 {
		topics := make([]kmsg.OffsetFetchRequestGroupTopic, len(r.Topics))
		for i, t := range r.Topics {
			topics[i] = kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions}
		}
		if r.Topics == nil {
			topics = nil
		}
		code, out := c.fetchGroupOffsetsAuthorized(groups.Group(r.Group), view, r.Group, topics, loading)
		resp.ErrorCode = code
		for _, t := range out {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if r.Version < 2 && code != 0 {
			// v0-1 have no top-level error: every partition carries it.
			for ti := range resp.Topics {
				for pi := range resp.Topics[ti].Partitions {
					resp.Topics[ti].Partitions[pi].ErrorCode = code
				}
			}
		}
		return done(resp), nil
	}
	for _, rg := range r.Groups {
		code, out := c.fetchGroupOffsetsAuthorized(groups.Group(rg.Group), view, rg.Group, rg.Topics, loading)
		if code == 0 && rg.MemberID != nil {
			// v9 (KIP-848): a member reading its group's offsets must be
			// current.
			if g := groups.Group(rg.Group); g != nil && g.Type == fsm.GroupConsumer {
				switch m := g.ConsumerMember(*rg.MemberID); {
				case m == nil:
					code, out = kerr.UnknownMemberID.Code, nil
				case m.Epoch != rg.MemberEpoch:
					code, out = kerr.StaleMemberEpoch.Code, nil
				}
			}
		}
		g := kmsg.NewOffsetFetchResponseGroup()
		g.Group, g.ErrorCode, g.Topics = rg.Group, code, out
		resp.Groups = append(resp.Groups, g)
	}
	return done(resp), nil
}

// fetchGroupOffsetsAuthorized is fetchGroupOffsets as a principal may see
// it (Kafka's OffsetFetch authorization): nothing without DESCRIBE on the
// group (GROUP_AUTHORIZATION_FAILED); a topic asked for without DESCRIBE
// on it gets TOPIC_AUTHORIZATION_FAILED for its partitions, and such a
// topic is left out when every topic is asked for.
func (c *conn) fetchGroupOffsetsAuthorized(g *fsm.GroupView, view *fsm.View, group string, topics []kmsg.OffsetFetchRequestGroupTopic, loading bool) (int16, []kmsg.OffsetFetchResponseGroupTopic) {
	if !c.groupAllowed(kmsg.ACLOperationDescribe, group) {
		return kerr.GroupAuthorizationFailed.Code, nil
	}
	code, out := fetchGroupOffsets(g, view, group, topics, loading)
	kept := out[:0]
	for _, t := range out {
		if c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Topic) {
			kept = append(kept, t)
			continue
		}
		if topics == nil {
			continue
		}
		for i := range t.Partitions {
			p := &t.Partitions[i]
			p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode = -1, -1, nil, kerr.TopicAuthorizationFailed.Code
		}
		kept = append(kept, t)
	}
	return code, kept
}

// fetchGroupOffsets answers one group of an OffsetFetch: the topics asked
// for (nil: every topic the group has offsets for).
func fetchGroupOffsets(g *fsm.GroupView, view *fsm.View, name string, topics []kmsg.OffsetFetchRequestGroupTopic, loading bool) (int16, []kmsg.OffsetFetchResponseGroupTopic) {
	switch {
	case name == "":
		return kerr.InvalidGroupID.Code, nil
	case loading:
		return kerr.CoordinatorLoadInProgress.Code, nil
	}
	var offsets map[string]map[int32]fsm.CommittedOffset
	if g != nil {
		offsets = g.Offsets
	}
	if topics == nil {
		names := make([]string, 0, len(offsets))
		for t := range offsets {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			parts := make([]int32, 0, len(offsets[t]))
			for p := range offsets[t] {
				parts = append(parts, p)
			}
			sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
			topics = append(topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t, Partitions: parts})
		}
	}
	var out []kmsg.OffsetFetchResponseGroupTopic
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			if o, ok := offsets[t.Topic][p]; ok && view.Partition(t.Topic, p) != nil {
				rp.Offset, rp.LeaderEpoch = o.Offset, o.LeaderEpoch
				md := o.Metadata
				rp.Metadata = &md
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return 0, out
}
