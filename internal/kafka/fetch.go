package kafka

// Fetch: v4-12
// Behavior:
//  * Only committed batches are returned, as stored: whole RecordBatch v2
//    bytes, the first of which may start before the fetch offset.
//  * Long poll: the answer waits up to max_wait_ms for min_bytes of data,
//    woken by every commit.
//  * max_bytes and partition_max_bytes are honoured as Kafka does (KIP-74):
//    the first partition, in request order, that has data at its fetch
//    offset returns its first batch whole even when that batch is larger
//    than either limit (so a consumer always makes progress); from then on
//    a partition gets only whole batches that fit both in its
//    partition_max_bytes and in what is left of max_bytes, and nothing when
//    its first batch does not fit. The answer's record bytes exceed
//    max_bytes only by that one first batch. Kafka may end a partition's
//    data with a partial batch to fill the limit; Stele sends whole batches
//    only (clients accept both).
//  * read_uncommitted reads up to the high watermark; read_committed stops
//    at the last stable offset (below which every transaction is decided)
//    and lists the aborted transactions overlapping the range returned,
//    whose records the client skips, as Kafka does (fsm/topics/partition_txns.go).
//  * consumer_byte_rate (client_quotas.go, throttle.go): the bytes of
//    each answer count; above the quota the answer carries
//    throttle_time_ms and the connection is muted that long. The
//    tenant's consumer_byte_rate counts them too (tenant_quotas.go).
//  * Authorization (acls.go): READ on each topic; a partition of a topic
//    without it gets TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
//  * A topic's fetch plugins (fetch_plugins.go) rewrite the batches read
//    before they are sent; one that fails fails the partition with
//    UNKNOWN_SERVER_ERROR.
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
//  * In a cluster, an offset above the high watermark is answered
//    OFFSET_OUT_OF_RANGE only once the broker has applied a block ordered
//    after the request (a read barrier): a broker behind the chain without
//    knowing it would otherwise send a consumer that read further on
//    another broker back to its reset policy. A broker that cannot get
//    such a block within max(max_wait_ms, 1 s), 5 s at most, answers
//    NOT_LEADER_OR_FOLLOWER.
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
	return func() kmsg.Response {
		resp := c.fetch(r)
		if fr, ok := resp.(*kmsg.FetchResponse); ok && (!c.s.b.Quotas().Empty() || c.tenantNow() != "") {
			// consumer_byte_rate counts what the answer carries (throttle.go).
			n := 0
			for _, t := range fr.Topics {
				for _, p := range t.Partitions {
					n += len(p.RecordBatches)
				}
			}
			fr.ThrottleMillis = c.throttle(max(c.recordQuota(fsm.QuotaConsumerByteRate, n), c.tenantByteQuota(fsm.QuotaTenantConsumerByteRate, n)))
		}
		return resp
	}, nil
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
	pastEnd := pastEndAsk
	for {
		changed := c.s.b.Changed()
		n, stop, unsure := c.fillFetch(r, resp, pastEnd)
		if unsure {
			// An offset past this broker's end: either the client's
			// position is wrong, or this broker is behind. Only a broker
			// sure it is current may say OFFSET_OUT_OF_RANGE.
			pastEnd = pastEndStale
			if c.current(wait) {
				pastEnd = pastEndOutOfRange
			}
			continue
		}
		if stop || n >= int(r.MinBytes) || wait == 0 {
			c.fetched(n)
			return resp
		}
		t0 := time.Now()
		select {
		case <-changed:
			c.waitedSince(t0)
		case <-timer.C:
			c.waitedSince(t0)
			n, _, _ := c.fillFetch(r, resp, pastEnd)
			c.fetched(n)
			return resp
		case <-c.ctx.Done():
			return resp
		}
	}
}

// pastEnd says how fillFetch answers a fetch offset above the high
// watermark.
type pastEnd int

const (
	// pastEndAsk: not yet known whether this broker is current; the
	// answer reports it as unsure (with a Barrier; without one,
	// OFFSET_OUT_OF_RANGE).
	pastEndAsk pastEnd = iota
	// pastEndOutOfRange: this broker is current, so the offset is beyond
	// the log: OFFSET_OUT_OF_RANGE, as Kafka answers.
	pastEndOutOfRange
	// pastEndStale: this broker could not learn that it is current:
	// NOT_LEADER_OR_FOLLOWER, retriable.
	pastEndStale
)

// fillFetch builds resp's topics from the committed state and returns the
// bytes of records in it, whether the answer must go now (an error), and
// whether a partition's offset is past this broker's end while pastEnd is
// pastEndAsk and a Barrier could tell whether the broker is behind.
func (c *conn) fillFetch(r *kmsg.FetchRequest, resp *kmsg.FetchResponse, pastEnd pastEnd) (int, bool, bool) {
	view := c.s.b.View()
	behind := c.s.catchingUp()
	committed := r.IsolationLevel == 1
	resp.Topics = resp.Topics[:0]
	var readReplica func(string, int32) int32
	if r.Version >= 11 {
		readReplica = c.s.readReplicas(r.Rack)
	}
	// max_bytes 0 (or less) is a limit like any other, as in Kafka: the
	// answer holds one batch.
	maxBytes := max(0, int(r.MaxBytes))
	if r.Version < 3 {
		maxBytes = int(^uint32(0) >> 1)
	}
	total, stop, unsure := 0, false, false
	for _, rt := range r.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		readable := c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic)
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
			case !readable:
				// Before existence: a denied topic's existence is not told.
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				stop = true
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				stop = true
			case readReplica != nil:
				// KIP-392: the consumer's rack has brokers and this one is
				// not among them: no records, the broker to read from, and
				// the answer goes now (as Kafka's ReplicaManager does).
				sp.PreferredReadReplica = readReplica(rt.Topic, rp.Partition)
				hwm := p.HighWatermark()
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hwm, min(hwm, p.LastStableOffset()), p.LogStartOffset()
				stop = true
			case behind:
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				stop = true
			case rp.CurrentLeaderEpoch > 0:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
				stop = true
			case rp.FetchOffset > p.HighWatermark() && pastEnd == pastEndAsk && c.s.opts.Barrier != nil:
				unsure = true
			case rp.FetchOffset > p.HighWatermark() && pastEnd == pastEndStale:
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				stop = true
			default:
				hwm, lso := p.HighWatermark(), p.LogStartOffset()
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hwm, min(hwm, p.LastStableOffset()), lso
				// KIP-74, as Kafka's ReplicaManager.readFromLog: until a
				// partition has returned data, its first batch goes out
				// whole however large, so a consumer always makes
				// progress; every partition after that gets only whole
				// batches that fit in what is left of both limits.
				limit := max(0, min(int(rp.PartitionMaxBytes), maxBytes-total))
				within := total > 0
				if within && limit == 0 {
					break // the response is full; this partition gets nothing
				}
				data, err := p.ReadWith(rp.FetchOffset, limit, fsm.ReadOptions{Committed: committed, Within: within})
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
					total += len(data)
					if data, err = c.s.runFetchPlugins(rt.Topic, rp.Partition, c.principalNow(), data); err != nil {
						// Fail closed: never the stored records in the
						// place of what a plugin was to send.
						c.s.opts.Logger.Warn("fetch plugin failed", "topic", rt.Topic, "partition", rp.Partition, "offset", rp.FetchOffset, "err", err)
						sp.ErrorCode = kerr.UnknownServerError.Code
						stop = true
						break
					}
					sp.RecordBatches, sp.HighWatermark = byzantineFetch(data, hwm)
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
	return total, stop, unsure
}

// fetched counts n record bytes a fetch returned, for the broker and for
// c's tenant.
func (c *conn) fetched(n int) {
	c.s.metrics.fetchBytes.Add(float64(n))
	if tc := c.s.tenantMetrics.of(c.tenantNow()); tc != nil {
		tc.fetchBytes.Add(int64(n))
	}
}
