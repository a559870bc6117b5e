package kafka

// Transactions: AddPartitionsToTxn v0-5, AddOffsetsToTxn v0-3, EndTxn
// v0-3, TxnOffsetCommit v0-3, DescribeTransactions v0, ListTransactions
// v0-1 (state, producer id and duration filters); InitProducerId with a transactional id is in producers.go.
// Behavior:
//   - The transaction coordinator is the replicated state machine
//     (fsm/producers/txns.go): every call is a command, and EndTxn writes the
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
//   - AddPartitionsToTxn v4+ (KIP-890's batched broker form) adds to or,
//     with VerifyOnly, checks several transactions in one request; franz-go
//     and the Java client send v3 and below for their own transactions.
// Authorization (acls.go), as Kafka: WRITE on the transactional id for
// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and WRITE on each topic added
// (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED), READ
// on the group for AddOffsetsToTxn and TxnOffsetCommit, READ on each topic
// committed; DescribeTransactions DESCRIBE on each id, ListTransactions
// lists only the ids the principal may DESCRIBE.
// Not done: KIP-890 part 2 (EndTxn v5+ epoch bump per transaction,
// Produce v12+ implicit adds); WriteTxnMarkers (there is no separate
// coordinator to send them).

import (
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/wallclock"
)

func txnRoutes() []route {
	return []route{
		{key: 24, min: 0, max: 5, handle: handleAddPartitionsToTxn},
		{key: 25, min: 0, max: 3, handle: handleAddOffsetsToTxn},
		{key: 26, min: 0, max: 3, handle: handleEndTxn},
		{key: 28, min: 0, max: 3, handle: handleTxnOffsetCommit},
		{key: 65, min: 0, max: 0, handle: handleDescribeTransactions},
		{key: 66, min: 0, max: 1, handle: handleListTransactions},
	}
}

// addPartitionsItem is one transaction of an AddPartitionsToTxn request:
// the top-level fields before v4, each entry of Transactions from v4.
type addPartitionsItem struct {
	id     string
	pid    int64
	epoch  int16
	verify bool
	topics []kmsg.AddPartitionsToTxnRequestTransactionTopic
	codes  []int16 // one a partition, in request order
}

// handleAddPartitionsToTxn answers both forms of the request. Up to v3 a
// client adds partitions to its own transaction. From v4 (KIP-890) the
// request batches transactions and may only verify (VerifyOnly) that
// partitions are already in a transaction: Kafka brokers send that form
// to the coordinator before appending a transactional batch. Here the
// state machine checks that on every append, so no Stele broker sends it;
// Stele answers it for any caller, from the broker's committed state.
// Each transaction of a batch succeeds or fails on its own; a transaction
// naming an unknown partition adds none of its partitions.
func handleAddPartitionsToTxn(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AddPartitionsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var items []*addPartitionsItem
	if r.Version < 4 {
		it := &addPartitionsItem{id: r.TransactionalID, pid: r.ProducerID, epoch: r.ProducerEpoch}
		for _, rt := range r.Topics {
			it.topics = append(it.topics, kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: rt.Topic, Partitions: rt.Partitions})
		}
		items = append(items, it)
	} else {
		seen := map[string]bool{}
		for _, t := range r.Transactions {
			if seen[t.TransactionalID] {
				resp.ErrorCode = kerr.InvalidRequest.Code
				return done(resp), nil
			}
			seen[t.TransactionalID] = true
			items = append(items, &addPartitionsItem{id: t.TransactionalID, pid: t.ProducerID,
				epoch: t.ProducerEpoch, verify: t.VerifyOnly, topics: t.Topics})
		}
	}

	view := c.s.b.View()
	var (
		cmds  []fsm.Command
		owner []*addPartitionsItem // the item of each command
		index []int                // its place in the item's codes
	)
	for _, it := range items {
		n := 0
		for _, rt := range it.topics {
			n += len(rt.Partitions)
		}
		it.codes = make([]int16, n)
		switch {
		case it.id == "":
			fillCodes(it.codes, kerr.InvalidRequest.Code)
		case !c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, it.id):
			fillCodes(it.codes, kerr.TransactionalIDAuthorizationFailed.Code)
		case c.deniedPartitions(it):
		case it.verify:
			verifyInTxn(it, c.s.b.Transactions())
		case unknownPartitions(view, it):
		default:
			i := 0
			for _, rt := range it.topics {
				for _, p := range rt.Partitions {
					cmds = append(cmds, fsm.AddPartitionsToTxn{TransactionalID: it.id, ProducerID: it.pid,
						Epoch: it.epoch, Topic: rt.Topic, Partition: p})
					owner, index = append(owner, it), append(index, i)
					i++
				}
			}
		}
	}
	answer := func() *kmsg.AddPartitionsToTxnResponse {
		for _, it := range items {
			i := 0
			rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rt.TransactionalID = it.id
			for _, t := range it.topics {
				st := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
				st.Topic = t.Topic
				for _, p := range t.Partitions {
					sp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
					sp.Partition, sp.ErrorCode = p, it.codes[i]
					st.Partitions = append(st.Partitions, sp)
					i++
				}
				rt.Topics = append(rt.Topics, st)
			}
			resp.Transactions = append(resp.Transactions, rt)
		}
		if r.Version < 4 { // the one transaction, in the v0-3 shape
			for _, st := range resp.Transactions[0].Topics {
				ot := kmsg.NewAddPartitionsToTxnResponseTopic()
				ot.Topic = st.Topic
				for _, sp := range st.Partitions {
					op := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
					op.Partition, op.ErrorCode = sp.Partition, sp.ErrorCode
					ot.Partitions = append(ot.Partitions, op)
				}
				resp.Topics = append(resp.Topics, ot)
			}
			resp.Transactions = nil
		}
		return resp
	}
	if len(cmds) == 0 {
		return done(answer()), nil
	}
	call := c.startCall(30*time.Second, cmds...)
	return func() kmsg.Response {
		defer call.cancel()
		for i, o := range call.wait() {
			owner[i].codes[index[i]] = o.Code
		}
		return answer()
	}, nil
}

// unknownPartitions answers it when it names a partition that does not
// exist: UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for
// the rest, as Kafka does.
// deniedPartitions sets the codes of an item with a topic the principal
// may not WRITE: TOPIC_AUTHORIZATION_FAILED for its partitions,
// OPERATION_NOT_ATTEMPTED for the others, as Kafka answers.
func (c *conn) deniedPartitions(it *addPartitionsItem) bool {
	denied, i := false, 0
	for _, rt := range it.topics {
		ok := c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, rt.Topic)
		for range rt.Partitions {
			it.codes[i] = kerr.OperationNotAttempted.Code
			if !ok {
				it.codes[i], denied = kerr.TopicAuthorizationFailed.Code, true
			}
			i++
		}
	}
	if !denied {
		clear(it.codes)
	}
	return denied
}

func unknownPartitions(view *fsm.View, it *addPartitionsItem) bool {
	unknown, i := false, 0
	for _, rt := range it.topics {
		for _, p := range rt.Partitions {
			it.codes[i] = kerr.OperationNotAttempted.Code
			if view.Partition(rt.Topic, p) == nil {
				it.codes[i], unknown = kerr.UnknownTopicOrPartition.Code, true
			}
			i++
		}
	}
	return unknown
}

// verifyInTxn answers a VerifyOnly transaction from the committed
// transactions, with the errors of Kafka's coordinator: the producer
// must own the id at that epoch, and each partition must be in its open
// transaction (INVALID_TXN_STATE when not).
func verifyInTxn(it *addPartitionsItem, txns []fsm.TxnInfo) {
	i, found := slices.BinarySearchFunc(txns, it.id, func(t fsm.TxnInfo, id string) int { return strings.Compare(t.ID, id) })
	switch {
	case !found || txns[i].ProducerID != it.pid:
		fillCodes(it.codes, kerr.InvalidProducerIDMapping.Code)
		return
	case txns[i].Epoch != it.epoch:
		fillCodes(it.codes, kerr.ProducerFenced.Code)
		return
	}
	t, n := txns[i], 0
	for _, rt := range it.topics {
		for _, p := range rt.Partitions {
			it.codes[n] = kerr.InvalidTxnState.Code
			if t.State == fsm.TxnOngoing && slices.Contains(t.Partitions[rt.Topic], p) {
				it.codes[n] = 0
			}
			n++
		}
	}
}

func fillCodes(codes []int16, code int16) {
	for i := range codes {
		codes[i] = code
	}
}

func handleAddOffsetsToTxn(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.AddOffsetsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	switch {
	case !c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, r.TransactionalID):
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return done(resp), nil
	case !c.groupAllowed(kmsg.ACLOperationRead, r.Group):
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return done(resp), nil
	}
	return c.answerCode(fsm.AddOffsetsToTxn{TransactionalID: r.TransactionalID,
		ProducerID: r.ProducerID, Epoch: r.ProducerEpoch, Group: r.Group}, resp, func(code int16) { resp.ErrorCode = code }), nil
}

func handleEndTxn(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.EndTxnRequest)
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	if !c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, r.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return done(resp), nil
	}
	return c.answerCode(fsm.EndTxn{TransactionalID: r.TransactionalID,
		ProducerID: r.ProducerID, Epoch: r.ProducerEpoch, Commit: r.Commit}, resp, func(code int16) { resp.ErrorCode = code }), nil
}

func handleTxnOffsetCommit(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.TxnOffsetCommitRequest)
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	generation := int32(-1)
	if r.Version >= 3 {
		generation = r.Generation
	}
	var denied int16
	switch {
	case !c.authorize(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, r.TransactionalID):
		denied = kerr.TransactionalIDAuthorizationFailed.Code
	case !c.groupAllowed(kmsg.ACLOperationRead, r.Group):
		denied = kerr.GroupAuthorizationFailed.Code
	}
	var cmds []fsm.Command
	type slot struct{ topic, part int }
	var slots []slot
	for ti, rt := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		code := denied
		if code == 0 && !c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic) {
			code = kerr.TopicAuthorizationFailed.Code
		}
		for pi, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
			if code != 0 {
				continue
			}
			slots = append(slots, slot{ti, pi})
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
		for i, o := range call.wait() {
			resp.Topics[slots[i].topic].Partitions[slots[i].part].ErrorCode = o.Code
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
		if !c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, id) {
			st.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
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
		if !c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, t.ID) {
			continue
		}
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
			(t.State != fsm.TxnOngoing || wallclock.Now().UnixMilli()-t.StartMs <= r.DurationFilterMillis) {
			continue
		}
		lt := kmsg.NewListTransactionsResponseTransactionState()
		lt.TransactionalID, lt.ProducerID, lt.TransactionState = t.ID, t.ProducerID, state
		resp.TransactionStates = append(resp.TransactionStates, lt)
	}
	return done(resp), nil
}
