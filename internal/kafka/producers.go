package kafka

// InitProducerId v0-4 and DescribeProducers v0: idempotent and
// transactional producers.
// Behavior:
//   - InitProducerId without a transactional id gives a new producer id
//     with epoch 0 (as Kafka does for idempotent producers, whatever id and
//     epoch a v3+ request carries); ids come from a replicated counter, so
//     no two producers of a cluster share one. With a transactional id it
//     gives that id's producer at its next epoch (a new one the first
//     time), aborting a transaction the previous epoch left open; the
//     timeout must be within transaction.max.timeout.ms (15 min,
//     INVALID_TRANSACTION_TIMEOUT). The transaction APIs are in txns.go.
//   - Produce checks each batch of an idempotent producer against the last
//     five batches it wrote to the partition (fsm/topics/partition_producers.go): a retry is
//     answered with its first offset and not written again, a gap gets
//     OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH.
//   - DescribeProducers lists a partition's producers from the broker's
//     committed state.
//   - Authorization (acls.go), as Kafka: InitProducerId with a
//     transactional id WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
//     without one IDEMPOTENT_WRITE on the cluster or WRITE on some topic
//     (CLUSTER_AUTHORIZATION_FAILED); DescribeProducers READ on each topic.
// Not done: v5 (KIP-890's server-side epoch bumps).

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func producerRoutes() []route {
	return []route{
		{key: 22, min: 0, max: 4, handle: handleInitProducerID},
		{key: 61, min: 0, max: 0, handle: handleDescribeProducers},
	}
}

func handleInitProducerID(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.InitProducerIDRequest)
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case r.TransactionalID != nil && !c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *r.TransactionalID):
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return done(resp), nil
	case r.TransactionalID == nil && !c.clusterAllowed(kmsg.ACLOperationIdempotentWrite) && !c.mayWriteSomeTopic():
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return done(resp), nil
	}
	call := c.startCall(30*time.Second, fsm.InitProducerID{TransactionalID: deref(r.TransactionalID),
		TimeoutMs: r.TransactionTimeoutMillis})
	return func() kmsg.Response {
		defer call.cancel()
		o := call.wait()[0]
		resp.ErrorCode = o.Code
		if o.Code == 0 {
			resp.ProducerID, resp.ProducerEpoch = o.ProducerID, o.ProducerEpoch
		}
		return resp
	}, nil
}

func handleDescribeProducers(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeProducersRequest)
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	view := c.s.b.View()
	for _, rt := range r.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		readable := c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic)
		for _, part := range rt.Partitions {
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = part
			p := view.Partition(rt.Topic, part)
			switch {
			case !readable:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case p == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case c.s.catchingUp():
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			default:
				for _, pi := range p.Producers() {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch, ap.LastSequence, ap.LastTimestamp = pi.ProducerID, int32(pi.Epoch), pi.LastSequence, pi.LastTimeMs
					ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, pi.TxnStartOffset
					sp.ActiveProducers = append(sp.ActiveProducers, ap)
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return done(resp), nil
}
