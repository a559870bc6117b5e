package kafka

// Transactions: AddPartitionsToTxn v0-3, AddOffsetsToTxn v0-3, EndTxn
// v0-3, TxnOffsetCommit v0-3, DescribeTransactions v0, ListTransactions
// v0-1 (state, producer id and duration filters); InitProducerId with a transactional id is in producers.go.
// Behavior:
//   - The transaction coordinator is the replicated state machine
//     (fsm/txns.go): every call is a command, and EndTxn writes the
//     transaction's markers to all its partitions in the block that applies
//     it, so a transaction appears whole on every broker or not at all. Any
//     broker coordinates any transactional id; FindCoordinator names one.
//   - Kafka's errors: an unknown id or a producer id that is not the id's
//     INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED, a
//     transactional write to a partition not added INVALID_TXN_STATE, a
//     commit after an abort INVALID_TXN_STATE; an EndTxn repeated after it
//     completed succeeds again. AddPartitionsToTxn adds none of a request's
//     partitions when one is unknown (UNKNOWN_TOPIC_OR_PARTITION, the others
//     OPERATION_NOT_ATTEMPTED).
//   - Transactions time out on block time (transaction.timeout.ms, at most
//     15 min): the broker aborts them and bumps the producer's epoch.
//   - read_committed Fetch stops at the last stable offset and lists the
//     aborted transactions of the range returned; ListOffsets latest for
//     read_committed is the last stable offset.
// Not done: the KIP-890 protocol (AddPartitionsToTxn v4+ batched broker
// form, EndTxn v4+, Produce v12+ implicit adds); WriteTxnMarkers (there is
// no separate coordinator to send them).

import (
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func txnRoutes() []route {
	return []route{
		{key: 24, min: 0, max: 3, handle: handleAddPartitionsToTxn},
		{key: 25, min: 0, max: 3, handle: handleAddOffsetsToTxn},
		{key: 26, min: 0, max: 3, handle: handleEndTxn},
		{key: 28, min: 0, max: 3, handle: handleTxnOffsetCommit},
		{key: 65, min: 0, max: 0, handle: handleDescribeTransactions},
		{key: 66, min: 0, max: 1, handle: handleListTransactions},
	}
}

func handleAddPartitionsToTxn(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AddPartitionsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	view := c.s.b.View()
	var (
		cmds    []fsm.Command
		unknown bool
	)
	for _, rt := range r.Topics {
		for _, p := range rt.Partitions {
			if view.Partition(rt.Topic, p) == nil {
				unknown = true
			}
			cmds = append(cmds, fsm.AddPartitionsToTxn{TransactionalID: r.TransactionalID, ProducerID: r.ProducerID,
				Epoch: r.ProducerEpoch, Topic: rt.Topic, Partition: p})
		}
	}
	answer := func(codes []int16) *kmsg.AddPartitionsToTxnResponse {
		i := 0
		for _, rt := range r.Topics {
			st := kmsg.NewAddPartitionsToTxnResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p, codes[i]
				st.Partitions = append(st.Partitions, sp)
				i++
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
	if unknown || len(cmds) == 0 {
		codes := make([]int16, len(cmds))
		for i, cmd := range cmds {
			codes[i] = kerr.OperationNotAttempted.Code
			if a := cmd.(fsm.AddPartitionsToTxn); view.Partition(a.Topic, a.Partition) == nil {
				codes[i] = kerr.UnknownTopicOrPartition.Code
			}
		}
		return done(answer(codes)), nil
	}
	call := c.startCall(30*time.Second, cmds...)
	return func() kmsg.Response {
		defer call.cancel()
		out := call.wait()
		codes := make([]int16, len(out))
		for i, o := range out {
			codes[i] = o.Code
		}
		return answer(codes)
	}, nil
}

func handleAddOffsetsToTxn(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AddOffsetsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	call := c.startCall(30*time.Second, fsm.AddOffsetsToTxn{TransactionalID: r.TransactionalID,
		ProducerID: r.ProducerID, Epoch: r.ProducerEpoch, Group: r.Group})
	return func() kmsg.Response {
		defer call.cancel()
		resp.ErrorCode = call.wait()[0].Code
		return resp
	}, nil
}

func handleEndTxn(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.EndTxnRequest)
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	call := c.startCall(30*time.Second, fsm.EndTxn{TransactionalID: r.TransactionalID,
		ProducerID: r.ProducerID, Epoch: r.ProducerEpoch, Commit: r.Commit})
	return func() kmsg.Response {
		defer call.cancel()
		resp.ErrorCode = call.wait()[0].Code
		return resp
	}, nil
}

func handleTxnOffsetCommit(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.TxnOffsetCommitRequest)
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	generation := int32(-1)
	if r.Version >= 3 {
		generation = r.Generation
	}
	var cmds []fsm.Command
	for _, rt := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			st.Partitions = append(st.Partitions, sp)
			epoch := rp.LeaderEpoch
			if r.Version < 2 {
				epoch = -1
			}
			cmds = append(cmds, fsm.TxnOffsetCommit{TransactionalID: r.TransactionalID, ProducerID: r.ProducerID,
				Epoch: r.ProducerEpoch, Group: r.Group, MemberID: r.MemberID, InstanceID: deref(r.InstanceID),
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
		out := call.wait()
		i := 0
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].ErrorCode = out[i].Code
				i++
			}
		}
		return resp
	}, nil
}

func handleDescribeTransactions(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	txns := c.s.b.Transactions()
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		i := slices.IndexFunc(txns, func(t fsm.TxnInfo) bool { return t.ID == id })
		if i < 0 {
			st.ErrorCode = kerr.TransactionalIDNotFound.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		t := txns[i]
		st.State, st.TimeoutMillis, st.ProducerID, st.ProducerEpoch = t.State.String(), t.TimeoutMs, t.ProducerID, t.Epoch
		st.StartTimestamp = -1
		if t.State == fsm.TxnOngoing {
			st.StartTimestamp = t.StartMs
		}
		for _, name := range sortedTopicNames(t.Partitions) {
			tt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			tt.Topic, tt.Partitions = name, t.Partitions[name]
			st.Topics = append(st.Topics, tt)
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return done(resp), nil
}

func handleListTransactions(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.ListTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	for _, t := range c.s.b.Transactions() {
		state := t.State.String()
		if len(r.StateFilters) > 0 && !slices.ContainsFunc(r.StateFilters, func(s string) bool { return strings.EqualFold(s, state) }) {
			continue
		}
		if len(r.ProducerIDFilters) > 0 && !slices.Contains(r.ProducerIDFilters, t.ProducerID) {
			continue
		}
		// v1: only transactions open longer than the filter (by the
		// broker's clock against the block time they began at).
		if r.Version >= 1 && r.DurationFilterMillis >= 0 &&
			(t.State != fsm.TxnOngoing || time.Now().UnixMilli()-t.StartMs <= r.DurationFilterMillis) {
			continue
		}
		lt := kmsg.NewListTransactionsResponseTransactionState()
		lt.TransactionalID, lt.ProducerID, lt.TransactionState = t.ID, t.ProducerID, state
		resp.TransactionStates = append(resp.TransactionStates, lt)
	}
	return done(resp), nil
}
