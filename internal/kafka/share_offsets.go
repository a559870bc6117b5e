package kafka

// DescribeShareGroupOffsets v0-1, AlterShareGroupOffsets v0 and
// DeleteShareGroupOffsets v0: a share group's share-partition start
// offsets (KIP-932; docs/share-groups.md).
// Behavior:
//   - Describe answers each share partition's start offset (SPSO) and, in
//     v1, its lag: the records at or past it not yet done (the log's
//     records past the window, and those in flight). A partition without
//     state has start offset -1; a group that does not exist
//     GROUP_ID_NOT_FOUND.
//   - Alter sets start offsets (clamped to the log's start and end) and
//     forgets what was in flight; Delete forgets the share partitions of
//     topics, which start again by share.auto.offset.reset. Both need an
//     empty group (NON_EMPTY_GROUP); Alter makes the group when missing,
//     as Kafka does.
//   - Authorization (acls.go): Describe DESCRIBE on the group and on each
//     topic; Alter READ on the group and on each topic; Delete DELETE on
//     the group and READ on each topic.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func shareOffsetRoutes() []route {
	return []route{
		{key: 90, min: 0, max: 1, handle: handleDescribeShareGroupOffsets},
		{key: 91, min: 0, max: 0, handle: handleAlterShareGroupOffsets},
		{key: 92, min: 0, max: 0, handle: handleDeleteShareGroupOffsets},
	}
}

func handleDescribeShareGroupOffsets(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	view, shares := c.s.b.View(), c.s.b.ShareGroups()
	for _, rg := range r.Groups {
		sg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		sg.GroupID = rg.GroupID
		g := shares.Group(rg.GroupID)
		switch {
		case !c.groupAllowed(kmsg.ACLOperationDescribe, rg.GroupID):
			sg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		case g == nil:
			sg.ErrorCode = kerr.GroupIDNotFound.Code
		default:
			parts := map[sharePartKey]fsm.SharePartView{}
			for _, p := range g.Parts {
				parts[sharePartKey{p.Topic, p.Partition}] = p
			}
			type ask struct {
				topic string
				parts []int32
			}
			var asks []ask
			if rg.Topics == nil { // every partition with state
				for _, p := range g.Parts {
					if n := len(asks); n > 0 && asks[n-1].topic == p.Topic {
						asks[n-1].parts = append(asks[n-1].parts, p.Partition)
					} else {
						asks = append(asks, ask{p.Topic, []int32{p.Partition}})
					}
				}
			}
			for _, t := range rg.Topics {
				asks = append(asks, ask{t.Topic, t.Partitions})
			}
			for _, a := range asks {
				st := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
				st.Topic = a.topic
				tv := view.Topic(a.topic)
				allowed := c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, a.topic)
				if tv != nil && allowed {
					st.TopicID = tv.ID
				}
				for _, p := range a.parts {
					sp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
					sp.Partition, sp.StartOffset, sp.LeaderEpoch = p, -1, 0
					pv, ok := parts[sharePartKey{a.topic, p}]
					switch {
					case !allowed:
						sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
					case tv == nil || int(p) >= len(tv.Partitions) || p < 0:
						sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					case ok:
						sp.StartOffset = pv.Start
						sp.Lag = max(0, tv.Partitions[p].HighWatermark()-pv.End) + int64(pv.InFlight)
					}
					st.Partitions = append(st.Partitions, sp)
				}
				sg.Topics = append(sg.Topics, st)
			}
		}
		resp.Groups = append(resp.Groups, sg)
	}
	return done(resp), nil
}

func handleAlterShareGroupOffsets(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	if !c.groupAllowed(kmsg.ACLOperationRead, r.GroupID) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	view := c.s.b.View()
	cmd := fsm.AlterShareOffsets{Group: r.GroupID}
	type slot struct{ t, p int }
	var slots []slot
	for ti, rt := range r.Topics {
		st := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		st.Topic = rt.Topic
		allowed := c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic)
		if tv := view.Topic(rt.Topic); tv != nil && allowed {
			st.TopicID = tv.ID
		}
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			if allowed {
				cmd.Offsets = append(cmd.Offsets, fsm.ShareOffset{Topic: rt.Topic, Partition: rp.Partition, Start: rp.StartOffset})
				slots = append(slots, slot{ti, pi})
			} else {
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	call := c.startCall(30*time.Second, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		if o.Code != 0 {
			resp.ErrorCode, resp.ErrorMessage = o.Code, o.msg
			return resp
		}
		if o.Share != nil {
			for i, p := range o.Share.Parts {
				if i < len(slots) {
					resp.Topics[slots[i].t].Partitions[slots[i].p].ErrorCode = p.Code
				}
			}
		}
		return resp
	}, nil
}

func handleDeleteShareGroupOffsets(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	if !c.groupAllowed(kmsg.ACLOperationDelete, r.GroupID) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	view := c.s.b.View()
	cmd := fsm.DeleteShareOffsets{Group: r.GroupID}
	var slots []int
	for i, rt := range r.Topics {
		st := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		st.Topic = rt.Topic
		allowed := c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic)
		if tv := view.Topic(rt.Topic); tv != nil && allowed {
			st.TopicID = tv.ID
		}
		if allowed {
			cmd.Topics = append(cmd.Topics, rt.Topic)
			slots = append(slots, i)
		} else {
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
		}
		resp.Topics = append(resp.Topics, st)
	}
	call := c.startCall(30*time.Second, cmd)
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		if o.Code != 0 {
			resp.ErrorCode, resp.ErrorMessage = o.Code, o.msg
			return resp
		}
		if o.Share != nil {
			for i, p := range o.Share.Parts {
				if i < len(slots) {
					resp.Topics[slots[i]].ErrorCode = p.Code
				}
			}
		}
		return resp
	}, nil
}
