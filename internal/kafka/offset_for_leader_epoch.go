package kafka

// OffsetForLeaderEpoch: v0-4
// Behavior:
//  * Authorization (acls.go): DESCRIBE on each topic, as Kafka asks of a
//    consumer (TOPIC_AUTHORIZATION_FAILED, whether it exists or not).
//  * Stele's leader epoch is always 0 (Metadata reports 0 for every
//    partition): consensus orders every write, so a log is never truncated
//    by a leader change and epoch 0 spans the whole log.
//  * The end offset is found as Kafka's LeaderEpochFileCache finds it, with
//    one epoch, 0, starting at the log start offset: epoch 0 answers (0,
//    high watermark); -1 (undefined) and any epoch above 0 answer (-1, -1),
//    Kafka's "unknown epoch"; an epoch below -1 answers itself with the log
//    start offset.
//  * current_leader_epoch -1 is not checked; above 0 it gets
//    UNKNOWN_LEADER_EPOCH (the client knows a newer epoch than ours), below
//    -1 FENCED_LEADER_EPOCH, as Kafka compares them.
//  * An unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION.
//  * In a cluster the broker first waits for a block ordered after the
//    request (a read barrier), so a broker behind the chain without knowing
//    it cannot report an end offset below what a client has read and make
//    it rewind; one that gets no such block in 5 s, or knows it is catching
//    up, answers NOT_LEADER_OR_FOLLOWER.
//  * replica_id (v3+) is not checked: every broker holds every partition
//    and there are no Kafka-protocol followers.
// Not done: nothing else.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleOffsetForLeaderEpoch(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.OffsetForLeaderEpochRequest)
	return func() kmsg.Response { return c.offsetForLeaderEpoch(r) }, nil
}

func (c *conn) offsetForLeaderEpoch(r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	// The end offset answered is what a client compares its position
	// with (KIP-320): from a broker behind the chain it would look like a
	// truncation, and the client would rewind. In a cluster the answer
	// comes only from a state after a barrier.
	behind := c.s.catchingUp() || !c.current(maxBarrierWait)
	view := c.s.b.View()
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		describable := c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition() // epoch and end offset -1
			sp.Partition = rp.Partition
			p := view.Partition(rt.Topic, rp.Partition)
			switch {
			case !describable:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case behind:
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			case rp.CurrentLeaderEpoch > 0:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			case rp.CurrentLeaderEpoch < -1:
				sp.ErrorCode = kerr.FencedLeaderEpoch.Code
			case rp.LeaderEpoch == 0:
				sp.LeaderEpoch, sp.EndOffset = 0, p.HighWatermark()
			case rp.LeaderEpoch < -1:
				sp.LeaderEpoch, sp.EndOffset = rp.LeaderEpoch, p.LogStartOffset()
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
