package kafka

// Produce: v3-11
// Behavior:
//  * acks=1 and acks=-1 both answer after the block holding the batches is
//    committed and applied, with the offset given to the first record (and
//    the block time as log_append_time when the topic's
//    message.timestamp.type is LogAppendTime); acks=0 answers nothing (the
//    batches are still ordered).
//  * Requests on one connection are handed to the broker in arrival order
//    and the connection keeps reading while they commit, so pipelined
//    requests (max.in.flight > 1) are appended in the order sent.
//  * A partition's batches are appended whole or not at all, each checked as
//    Kafka's LogValidator checks it: a corrupt batch (CRC, framing, not
//    magic v2) gets CORRUPT_MESSAGE, a batch over max.message.bytes
//    MESSAGE_TOO_LARGE (so does one too large for a consensus
//    transaction), a control batch or a record without a key in a
//    compacted topic INVALID_RECORD, a timestamp (other than -1) further
//    than message.timestamp.difference.max.ms from the block time, or the
//    LogAppendTime type set by the producer (on a LogAppendTime topic, or
//    without a timestamp) INVALID_TIMESTAMP; other partitions of the
//    request are unaffected.
//  * On a LogAppendTime topic the stored batch has the LogAppendTime type
//    and the block time as its max (and first) timestamp: what consumers
//    read as each record's timestamp, and log_append_time in the answer.
//    Every record is checked, and from v8 the answer lists each failing
//    record in record_errors (KIP-467: batch_index and
//    batch_index_error_message, as Kafka words it), the first
//    fsm.MaxRecordErrors (1000) of them where Kafka lists all (error_message
//    gives the total); a client fails the unlisted records of the batch too
//    (librdkafka with _INVALID_DIFFERENT_RECORD).
//  * On a CreateTime topic a batch whose header max timestamp is not its
//    records' largest timestamp is stored with theirs (new CRC), as
//    Kafka's LogValidator rewrites it: a lying header cannot hide records
//    from ListOffsets by time. A certificate or a signature does not cover
//    the rewritten field (docs/kafka-api.md).
//  * Stele's own record headers are checked in apply, failing the whole
//    batch with INVALID_RECORD: a record expecting a version of its key
//    other than the latest (docs/keys.md), a signature that does not verify
//    or a replayed sequence, an unsigned record in a topic with
//    stele.signed.by (docs/signed-producers.md), and from app version 11
//    a record whose subject (the stele-subject header, or the JSON Pointer
//    of stele.subject.from) is invalid, or missing where
//    stele.subject.required is true (docs/subjects.md).
//  * An unknown topic is created first when auto.create.topics.enable is on
//    (in the same transaction, so the batch lands in the new topic), and
//    gets UNKNOWN_TOPIC_OR_PARTITION otherwise; an invalid topic name
//    INVALID_TOPIC_EXCEPTION.
//  * acks other than -1, 0, 1 get INVALID_REQUIRED_ACKS.
//  * producer_byte_rate (client_quotas.go, throttle.go): the request's
//    record bytes count; above the quota the answer carries
//    throttle_time_ms and the connection is muted that long. The
//    tenant's producer_byte_rate counts them too (tenant_quotas.go).
//  * Authorization (acls.go): WRITE on each topic
//    (TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not), and
//    for a transactional producer WRITE on its transactional id
//    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition); creating
//    an unknown topic needs CREATE on the cluster or the topic
//    (UNKNOWN_TOPIC_OR_PARTITION without it).
//  * Batches of idempotent producers are checked against the producer's
//    last five batches in the partition when applied (fsm/topics/partition_producers.go): a
//    retry is answered with its first offset and not stored again;
//    OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH otherwise. A
//    retry's log_append_time is, as Kafka's UnifiedLog.append answers a
//    duplicate whatever the timestamp type, the max timestamp its batch
//    was stored with: on a LogAppendTime topic its append time (not the
//    retry's block time), on a CreateTime topic its largest record
//    timestamp (where a first produce answers -1); its log_start_offset is
//    the current one.
//  * Transactional batches (txns.go) are taken only in a partition added to
//    the producer's ongoing transaction, and a producer with an ongoing
//    transaction must write transactional batches (INVALID_TXN_STATE
//    otherwise); a fenced epoch gets INVALID_PRODUCER_EPOCH.
// Not done: compression.type other than producer is accepted but not
// applied (batches are stored as the producer compressed them); Produce
// v12+ (KIP-890's implicit AddPartitionsToTxn).

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

type producePart struct {
	topic, part int // indexes into the response
	cmd         int // index into cmds, or -1 when answered without ordering
}

func handleProduce(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ProduceRequest)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	s := c.s

	var (
		cmds  []fsm.Command
		parts []producePart
	)
	view := s.b.View()
	created := map[string]bool{}
	txnDenied := r.TransactionID != nil && !c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *r.TransactionID)
	for ti, rt := range r.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		writable := c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, rt.Topic)
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			st.Partitions = append(st.Partitions, sp)
			code := int16(0)
			switch {
			case r.Acks != -1 && r.Acks != 0 && r.Acks != 1:
				code = kerr.InvalidRequiredAcks.Code
			case txnDenied:
				code = kerr.TransactionalIDAuthorizationFailed.Code
			case !writable:
				code = kerr.TopicAuthorizationFailed.Code
			case c.validTopicName(rt.Topic) != nil:
				code = kerr.InvalidTopicException.Code
			case view.Topic(rt.Topic) == nil && !created[rt.Topic]:
				if !s.opts.AutoCreateTopics || !c.mayCreateTopic(rt.Topic) {
					code = kerr.UnknownTopicOrPartition.Code
					break
				}
				created[rt.Topic] = true
				cmds = append(cmds, fsm.CreateTopic{Name: rt.Topic, Partitions: s.opts.DefaultPartitions, ReplicationFactor: -1})
			}
			if code != 0 {
				st.Partitions[pi].ErrorCode = code
				parts = append(parts, producePart{ti, pi, -1})
				continue
			}
			parts = append(parts, producePart{ti, pi, len(cmds)})
			cmds = append(cmds, fsm.Produce{Topic: rt.Topic, Partition: rp.Partition, Records: rp.Records})
		}
		resp.Topics = append(resp.Topics, st)
	}

	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	pending := s.b.Enqueue(ctx, byzantineCommands(cmds)...)
	// producer_byte_rate counts what the request carries (throttle.go).
	var reqBytes int
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			reqBytes += len(rp.Records)
		}
	}
	if r.Acks == 0 {
		c.throttle(c.produceThrottle(reqBytes))
		go func() {
			defer cancel()
			pending.Wait(ctx)
		}()
		return func() kmsg.Response { return nil }, nil
	}
	return func() kmsg.Response {
		defer cancel()
		res, errs := pending.Wait(ctx)
		out := c.outcomes(res, errs)
		for _, p := range parts {
			if p.cmd < 0 {
				continue
			}
			sp := &resp.Topics[p.topic].Partitions[p.part]
			o := out[p.cmd]
			sp.ErrorCode = o.Code
			if o.Code == 0 {
				n := len(cmds[p.cmd].(fsm.Produce).Records)
				s.metrics.produceBytes.Add(float64(n))
				if tc := s.tenantMetrics.of(c.tenantNow()); tc != nil {
					tc.produceBytes.Add(int64(n))
				}
				sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = o.BaseOffset, o.LogAppendTime, o.LogStartOffset
			} else {
				sp.ErrorMessage = o.msg
				sp.ErrorRecords = recordErrors(r.Version, o.RecordErrors)
			}
		}
		resp.ThrottleMillis = c.throttle(c.produceThrottle(reqBytes))
		return resp
	}, nil
}

// produceThrottle counts a produce request's record bytes against the
// user's and the tenant's producer_byte_rate, and returns the longer
// throttle.
func (c *conn) produceThrottle(n int) time.Duration {
	return max(c.recordQuota(fsm.QuotaProducerByteRate, n), c.tenantByteQuota(fsm.QuotaTenantProducerByteRate, n))
}

// recordErrors is a refused partition's record_errors (Produce v8+).
func recordErrors(version int16, es []fsm.RecordError) []kmsg.ProduceResponseTopicPartitionErrorRecord {
	if version < 8 || len(es) == 0 {
		return nil
	}
	out := make([]kmsg.ProduceResponseTopicPartitionErrorRecord, len(es))
	for i, e := range es {
		out[i] = kmsg.NewProduceResponseTopicPartitionErrorRecord()
		out[i].RelativeOffset = e.Index
		if e.Message != "" {
			m := e.Message
			out[i].ErrorMessage = &m
		}
	}
	return out
}
