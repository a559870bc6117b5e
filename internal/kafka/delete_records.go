package kafka

// DeleteRecords: v0-2
// Behavior:
//  * Authorization (acls.go): DELETE on each topic
//    (TOPIC_AUTHORIZATION_FAILED, whether it exists or not).
//  * Advances each partition's log start offset to the given offset (-1:
//    the high watermark). Every partition becomes one DeleteRecords
//    command; they are submitted together and commit in one block, and the
//    answer waits up to timeout_ms (<= 0: 30 s). Segments wholly below the
//    new start are removed after the commit.
//  * The answer's low watermark is the log start offset after the command:
//    an offset below the current start changes nothing and answers the
//    current start, as Kafka does.
//  * An offset above the high watermark, or below -1, gets
//    OFFSET_OUT_OF_RANGE; an unknown topic or partition
//    UNKNOWN_TOPIC_OR_PARTITION.
// Not done: nothing beyond Kafka's behavior; every broker holds every
// partition, so there is no NOT_LEADER_OR_FOLLOWER.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleDeleteRecords(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DeleteRecordsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	view := c.s.b.View()
	type slot struct{ topic, part int }
	var (
		cmds  []fsm.Command
		slots []slot
	)
	for ti, rt := range r.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		deletable := c.authorize(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, rt.Topic)
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LowWatermark = -1
			cmd := fsm.DeleteRecords{Topic: rt.Topic, Partition: rp.Partition, Offset: rp.Offset}
			p := view.Partition(rt.Topic, rp.Partition)
			switch {
			case !deletable:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Offset < -1 || rp.Offset > p.HighWatermark():
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				if pr := checked(cmd); pr.failed() {
					sp.ErrorCode = pr.code
					break
				}
				cmds = append(cmds, cmd)
				slots = append(slots, slot{ti, pi})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	for i, o := range c.submit(r.TimeoutMillis, cmds...) {
		sp := &resp.Topics[slots[i].topic].Partitions[slots[i].part]
		sp.ErrorCode = o.Code
		if o.Code == 0 {
			sp.LowWatermark = o.LowWatermark
		}
	}
	return done(resp), nil
}
