package kafka

// ListOffsets: v1-8
// Behavior:
//  * Authorization (acls.go): DESCRIBE on each topic
//    (TOPIC_AUTHORIZATION_FAILED, whether it exists or not).
//  * -2 (earliest) and -4 (earliest local, KIP-405: there is no tiered
//    storage, so it is the same) answer the log start offset; -1 (latest)
//    the last fetchable offset: the high watermark, or for read_committed
//    the last stable offset (the first offset of the oldest undecided
//    transaction, if below it); -3 (max timestamp, KIP-734) the record with
//    the largest timestamp; a timestamp the first offset whose record
//    timestamp is at least it. Any other negative timestamp (-5, KIP-1005's
//    latest tiered) gets INVALID_REQUEST.
//  * A lookup by time or -3 that finds nothing, or finds a record at or
//    past the last fetchable offset (for read_committed: in or after an
//    open transaction), answers offset and timestamp -1 and leader epoch
//    -1 with no error, as Kafka's ReplicaManager.fetchOffset does: the
//    record is hidden, not replaced by an earlier one, and the answer
//    changes once the transaction is decided.
//  * On a LogAppendTime topic a record's timestamp is, from app version 2,
//    the clock of the broker that proposed its block, read when it
//    proposed, never before the produce was sent, as Kafka stamps its
//    clock at append; under app version 1 it was the block's BFT time,
//    which may precede the produce (docs/kafka-api.md).
//  * A record acknowledged by this broker is found by every later request
//    to it, on any connection, the time index included: a produce is
//    answered only after fsm.Commit published the partition's high
//    watermark, and the segments and their index entries were appended
//    before that; the lookup reads the high watermark first
//    (docs/kafka-api.md, "Read after an acknowledged write";
//    internal/cli's TestServeListOffsetsByTimeAfterAck, test/e2e
//    list_offsets_ack.sh).
//  * The leader epoch is always 0; a current_leader_epoch above it gets
//    UNKNOWN_LEADER_EPOCH.
//  * A partition named twice in one request gets INVALID_REQUEST.
//  * A broker catching up with the chain answers NOT_LEADER_OR_FOLLOWER, so
//    clients retry elsewhere instead of reading offsets that are behind;
//    also for a partition it does not know, which it may not have seen
//    created yet (not UNKNOWN_TOPIC_OR_PARTITION).
//  * In a cluster, a request asking for anything but the earliest offset
//    first waits for a block ordered after it (a read barrier): the end of
//    the log from a broker behind without knowing it would be below
//    records already acknowledged (a consumer starting at "latest" would
//    read records written before it started). A broker that gets no such
//    block in 5 s answers NOT_LEADER_OR_FOLLOWER. The earliest offset needs
//    none: from a broker behind it can only be lower, at a record that was
//    written.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleListOffsets(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ListOffsetsRequest)
	return func() kmsg.Response { return c.listOffsets(r) }, nil
}

func (c *conn) listOffsets(r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	behind := c.s.catchingUp()
	if !behind && asksForEnd(r) {
		behind = !c.current(maxBarrierWait)
	}
	view := c.s.b.View()
	type tp struct {
		t string
		p int32
	}
	seen := map[tp]bool{}
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		describable := c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			p := view.Partition(rt.Topic, rp.Partition)
			switch {
			case !describable:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case seen[tp{rt.Topic, rp.Partition}]:
				sp.ErrorCode = kerr.InvalidRequest.Code
			case behind:
				// Before the unknown-partition answer: a broker behind
				// cannot tell a topic it has not seen created yet from
				// one that does not exist.
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.CurrentLeaderEpoch > 0:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			default:
				sp.LeaderEpoch = 0
				if rp.Timestamp != -1 && rp.Timestamp != -2 && rp.Timestamp != -4 {
					sp.LeaderEpoch = -1 // until found: Kafka's "no offset" answer has none
				}
				switch ts := rp.Timestamp; ts {
				case -2, -4:
					sp.Offset = p.LogStartOffset()
				case -1:
					sp.Offset = byzantineEndOffset(lastFetchable(p, r.IsolationLevel)) // the stelebyzantine build's lie; the truth otherwise
				case -3:
					off, t, err := p.MaxTimestamp()
					switch {
					case err != nil:
						sp.ErrorCode = kerr.KafkaStorageError.Code
					case off >= 0:
						found(&sp, off, t, lastFetchable(p, r.IsolationLevel))
					}
				default:
					if ts < 0 {
						sp.ErrorCode = kerr.InvalidRequest.Code
						break
					}
					off, t, ok, err := p.OffsetForTimestamp(ts)
					switch {
					case err != nil:
						sp.ErrorCode = kerr.KafkaStorageError.Code
					case ok:
						found(&sp, off, t, lastFetchable(p, r.IsolationLevel))
					}
				}
			}
			seen[tp{rt.Topic, rp.Partition}] = true
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// lastFetchable is the end of what a reader at isolation level iso may see
// (Partition.fetchOffsetForTimestamp's lastFetchableOffset): the last
// stable offset for read_committed (1), the high watermark otherwise. It is
// read after the lookup it bounds: both only grow, so a record committed
// in between is not hidden by a bound read before it.
func lastFetchable(p *fsm.Partition, iso int8) int64 {
	end := p.HighWatermark()
	if iso == 1 {
		end = min(end, p.LastStableOffset())
	}
	return end
}

// found answers sp with the record at off (timestamp ts) that a lookup by
// time (or -3) found, unless it is at or past end, the last fetchable
// offset: then, as Kafka's ReplicaManager.fetchOffset does, the answer is
// "none" (offset and timestamp -1, no error), not an earlier record.
func found(sp *kmsg.ListOffsetsResponseTopicPartition, off, ts, end int64) {
	if off >= end {
		return
	}
	sp.Offset, sp.Timestamp, sp.LeaderEpoch = off, ts, 0
}

// asksForEnd reports whether r asks for anything but the log start: an
// answer that a broker behind the chain would give too low.
func asksForEnd(r *kmsg.ListOffsetsRequest) bool {
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			if rp.Timestamp != -2 && rp.Timestamp != -4 {
				return true
			}
		}
	}
	return false
}
