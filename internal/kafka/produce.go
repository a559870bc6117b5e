package kafka

// Produce: v3-11
// Behavior:
//  * acks=1 and acks=-1 both answer after the block holding the batches is
//    committed and applied, with the offset given to the first record;
//    acks=0 answers nothing (the batches are still ordered).
//  * Requests on one connection are handed to the broker in arrival order
//    and the connection keeps reading while they commit, so pipelined
//    requests (max.in.flight > 1) are appended in the order sent.
//  * A partition's batches are appended whole or not at all. A corrupt
//    batch (CRC, framing, not magic v2) gets CORRUPT_MESSAGE, a batch over
//    max.message.bytes MESSAGE_TOO_LARGE, a record without a key in a
//    compacted topic INVALID_RECORD; other partitions of the request are
//    unaffected.
//  * An unknown topic is created first when auto.create.topics.enable is on
//    (in the same transaction, so the batch lands in the new topic).
//  * acks other than -1, 0, 1 get INVALID_REQUIRED_ACKS.
//  * Batches of idempotent producers are checked against the producer's
//    last five batches in the partition when applied (fsm/producers.go): a
//    retry is answered with its first offset and not stored again;
//    OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH otherwise.
// Not done: transactional producers (transactional batches get
// INVALID_TXN_STATE); compression.type other than producer (batches are
// stored as sent).

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
	for ti, rt := range r.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			st.Partitions = append(st.Partitions, sp)
			code := int16(0)
			switch {
			case r.Acks != -1 && r.Acks != 0 && r.Acks != 1:
				code = kerr.InvalidRequiredAcks.Code
			case fsm.ValidTopicName(rt.Topic) != nil:
				code = kerr.InvalidTopicException.Code
			case view.Topic(rt.Topic) == nil && !created[rt.Topic]:
				if !s.opts.AutoCreateTopics {
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
	pending := s.b.Enqueue(ctx, cmds...)
	if r.Acks == 0 {
		go func() {
			defer cancel()
			pending.Wait(ctx)
		}()
		return func() kmsg.Response { return nil }, nil
	}
	return func() kmsg.Response {
		defer cancel()
		res, errs := pending.Wait(ctx)
		out := outcomes(res, errs)
		for _, p := range parts {
			if p.cmd < 0 {
				continue
			}
			sp := &resp.Topics[p.topic].Partitions[p.part]
			o := out[p.cmd]
			sp.ErrorCode = o.Code
			if o.Code == 0 {
				s.metrics.produceBytes.Add(float64(len(cmds[p.cmd].(fsm.Produce).Records)))
				sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = o.BaseOffset, o.LogAppendTime, o.LogStartOffset
			} else {
				sp.ErrorMessage = o.msg
			}
		}
		return resp
	}, nil
}
