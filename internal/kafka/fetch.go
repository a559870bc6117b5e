package kafka

// Fetch: v4-12
// Behavior:
//  * Only committed batches are returned, as stored: whole RecordBatch v2
//    bytes, the first of which may start before the fetch offset.
//  * Long poll: the answer waits up to max_wait_ms for min_bytes of data,
//    woken by every commit.
//  * max_bytes and each partition's max bytes are honoured, except that the
//    first partition with data returns at least one whole batch (KIP-74).
//  * The last stable offset is the high watermark (there are no
//    transactions yet), so read_committed and read_uncommitted see the same
//    records and the aborted-transactions list is empty.
//  * Fetch sessions (KIP-227) are declined: every answer carries session id
//    0, so clients send full requests; a request naming a session gets
//    FETCH_SESSION_ID_NOT_FOUND.
//  * The leader epoch is always 0: a current_leader_epoch above it gets
//    UNKNOWN_LEADER_EPOCH.
//  * Every batch's CRC is checked before it is sent; a broker whose stored
//    bytes fail it answers KAFKA_STORAGE_ERROR and shuts down (fail-stop:
//    rebuild it by state sync), never serving damaged data.
//  * A broker catching up with the chain (restarted, cut off, syncing)
//    answers NOT_LEADER_OR_FOLLOWER, so consumers retry after a metadata
//    refresh instead of reading a log that is behind.
// Not done: topic IDs in Fetch (v13+), preferred read replicas (KIP-392).

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleFetch(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.FetchRequest)
	return func() kmsg.Response { return c.fetch(r) }, nil
}

func (c *conn) fetch(r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	if r.SessionID != 0 || (r.SessionEpoch > 0) {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp
	}
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	if wait < 0 {
		wait = 0
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := c.s.b.Changed()
		n, stop := c.fillFetch(r, resp)
		if stop || n >= int(r.MinBytes) || wait == 0 {
			c.s.metrics.fetchBytes.Add(float64(n))
			return resp
		}
		select {
		case <-changed:
		case <-timer.C:
			n, _ := c.fillFetch(r, resp)
			c.s.metrics.fetchBytes.Add(float64(n))
			return resp
		case <-c.ctx.Done():
			return resp
		}
	}
}

// fillFetch builds resp's topics from the committed state and returns the
// bytes of records in it and whether the answer must go now (an error).
func (c *conn) fillFetch(r *kmsg.FetchRequest, resp *kmsg.FetchResponse) (int, bool) {
	view := c.s.b.View()
	behind := c.s.catchingUp()
	committed := r.IsolationLevel == 1
	resp.Topics = resp.Topics[:0]
	maxBytes := int(r.MaxBytes)
	if r.Version < 3 || maxBytes <= 0 {
		maxBytes = int(^uint32(0) >> 1)
	}
	total, stop := 0, false
	for _, rt := range r.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.PreferredReadReplica = -1
			// Never null: Kafka sends an empty record set, and librdkafka
			// refuses a whole response holding a null one.
			sp.RecordBatches = []byte{}
			p := view.Partition(rt.Topic, rp.Partition)
			switch {
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				stop = true
			case behind:
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				stop = true
			case rp.CurrentLeaderEpoch > 0:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
				stop = true
			default:
				hwm, lso := p.HighWatermark(), p.LogStartOffset()
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hwm, min(hwm, p.LastStableOffset()), lso
				limit := int(rp.PartitionMaxBytes)
				if room := maxBytes - total; room < limit {
					limit = room
				}
				if total > 0 && limit <= 0 {
					break // the response is full; this partition gets nothing
				}
				if limit <= 0 {
					limit = 1 // KIP-74: still at least one batch
				}
				read := p.Read
				if committed {
					read = p.ReadCommitted
				}
				data, err := read(rp.FetchOffset, limit)
				switch {
				case errors.Is(err, fsm.ErrOffsetOutOfRange):
					sp.ErrorCode = kerr.OffsetOutOfRange.Code
					stop = true
				case errors.Is(err, fsm.ErrCorruptLog):
					// Fail-stop: a broker whose storage is damaged stops
					// serving rather than hand out what it holds.
					sp.ErrorCode = kerr.KafkaStorageError.Code
					stop = true
					c.s.fatal(err)
				case errors.Is(err, fsm.ErrPartitionGone):
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					stop = true
				case err != nil:
					c.s.opts.Logger.Error("fetch read failed", "topic", rt.Topic, "partition", rp.Partition, "offset", rp.FetchOffset, "err", err)
					sp.ErrorCode = kerr.KafkaStorageError.Code
					stop = true
				case data != nil:
					sp.RecordBatches = data
					total += len(data)
					if committed {
						for _, a := range p.AbortedTxns(rp.FetchOffset, sp.LastStableOffset) {
							at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
							at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
							sp.AbortedTransactions = append(sp.AbortedTransactions, at)
						}
					}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return total, stop
}
