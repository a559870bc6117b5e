package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// readAll reads topic from the beginning with the isolation level given
// until no record comes for a second, and returns the values.
func readAll(t *testing.T, addr, topic string, level kgo.IsolationLevel) []string {
	t.Helper()
	cl := client(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond))
	var out []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)); n++ })
		if n == 0 {
			return out
		}
	}
}

// TestTransactionalProducer: franz-go's transactional producer commits and
// aborts; read_committed readers see only the committed records, and a
// read_uncommitted reader sees all of them (the markers are not records).
func TestTransactionalProducer(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	adm := kadm.NewClient(client(t, tb.addr))
	if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, "txn"); err != nil {
		t.Fatal(err)
	}
	cl := client(t, tb.addr, kgo.TransactionalID("tx-1"), kgo.DefaultProduceTopic("txn"))
	ctx := context.Background()
	run := func(prefix string, n int, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	run("kept", 10, kgo.TryCommit)
	run("dropped", 5, kgo.TryAbort)
	run("kept2", 3, kgo.TryCommit)

	committed := readAll(t, tb.addr, "txn", kgo.ReadCommitted())
	if len(committed) != 13 {
		t.Fatalf("read_committed read %d records, want 13: %v", len(committed), committed)
	}
	for _, v := range committed {
		if strings.HasPrefix(v, "dropped") {
			t.Fatalf("read_committed read %q, a record of an aborted transaction", v)
		}
	}
	if all := readAll(t, tb.addr, "txn", kgo.ReadUncommitted()); len(all) != 18 {
		t.Fatalf("read_uncommitted read %d records, want 18", len(all))
	}
	txs, err := adm.DescribeTransactions(ctx, "tx-1")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := txs["tx-1"]; !ok || d.State != "CompleteCommit" {
		t.Fatalf("DescribeTransactions: %+v", txs)
	}
}

// TestConsumeTransformProduce: franz-go's group transact session reads an
// input topic as a group member and writes each record, transformed, to an
// output topic, committing the input offsets in the same transactions.
// Under read_committed the output holds every input record exactly once,
// and the group's committed offsets cover the input.
func TestConsumeTransformProduce(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	adm := kadm.NewClient(client(t, tb.addr))
	ctx := context.Background()
	for _, topic := range []string{"in", "out"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	const n = 300
	produceValues(t, tb.addr, "in", 0, n)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(tb.addr), kgo.ConsumerGroup("etl"), kgo.ConsumeTopics("in"),
			kgo.TransactionalID(fmt.Sprintf("etl-%d", w)), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("out"),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				fs := s.PollFetches(pctx)
				cancel()
				if fs.NumRecords() == 0 {
					continue
				}
				if err := s.Begin(); err != nil {
					t.Errorf("begin: %v", err)
					return
				}
				fs.EachRecord(func(r *kgo.Record) {
					s.Produce(ctx, &kgo.Record{Key: r.Key, Value: append([]byte("out-"), r.Value...)}, nil)
				})
				if _, err := s.End(ctx, kgo.TryCommit); err != nil {
					t.Errorf("end: %v", err)
					return
				}
			}
		}()
	}
	waitFor(t, 60*time.Second, "every input record transformed", func() error {
		if got := len(readAll(t, tb.addr, "out", kgo.ReadCommitted())); got < n {
			return fmt.Errorf("%d of %d in the output", got, n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	out := readAll(t, tb.addr, "out", kgo.ReadCommitted())
	seen := map[string]int{}
	for _, v := range out {
		seen[v]++
	}
	for i := range n {
		if k := seen[fmt.Sprintf("out-v%d", i)]; k != 1 {
			t.Errorf("input record %d is in the output %d times", i, k)
		}
	}
	offs, err := adm.FetchOffsets(ctx, "etl")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != n {
		t.Errorf("the group's committed offsets sum to %d, want %d", sum, n)
	}
}

// TestTransactionErrors: Kafka's answers to transactional requests that
// cannot be served; nothing is added or written by them.
func TestTransactionErrors(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("x"), 60_000
	ir := rawRequest(t, cl, init).(*kmsg.InitProducerIDResponse)
	if ir.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(ir.ErrorCode))
	}
	check := func(what string, got int16, want *kerr.Error) {
		t.Helper()
		if got != want.Code {
			t.Errorf("%s: %v, want %v", what, kerr.ErrorForCode(got), want)
		}
	}
	add := func(id string, pid int64, epoch int16, topics ...string) *kmsg.AddPartitionsToTxnResponse {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
		for _, topic := range topics {
			req.Topics = append(req.Topics, kmsg.AddPartitionsToTxnRequestTopic{Topic: topic, Partitions: []int32{0}})
		}
		return rawRequest(t, cl, req).(*kmsg.AddPartitionsToTxnResponse)
	}
	r := add("x", ir.ProducerID, 0, "t", "missing")
	check("the known partition beside an unknown one", r.Topics[0].Partitions[0].ErrorCode, kerr.OperationNotAttempted)
	check("the unknown partition", r.Topics[1].Partitions[0].ErrorCode, kerr.UnknownTopicOrPartition)
	check("an unknown transactional id", add("nope", ir.ProducerID, 0, "t").Topics[0].Partitions[0].ErrorCode, kerr.InvalidProducerIDMapping)
	check("another producer id", add("x", ir.ProducerID+1, 0, "t").Topics[0].Partitions[0].ErrorCode, kerr.InvalidProducerIDMapping)

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "x", ir.ProducerID, 0, true
	check("commit with nothing begun", rawRequest(t, cl, end).(*kmsg.EndTxnResponse).ErrorCode, kerr.InvalidTxnState)

	again := rawRequest(t, cl, init).(*kmsg.InitProducerIDResponse)
	if again.ProducerID != ir.ProducerID || again.ProducerEpoch != 1 {
		t.Fatalf("second InitProducerId: id %d epoch %d", again.ProducerID, again.ProducerEpoch)
	}
	check("the fenced epoch", add("x", ir.ProducerID, 0, "t").Topics[0].Partitions[0].ErrorCode, kerr.ProducerFenced)

	desc := kmsg.NewPtrDescribeTransactionsRequest()
	desc.TransactionalIDs = []string{"x", "nope"}
	dr := rawRequest(t, cl, desc).(*kmsg.DescribeTransactionsResponse)
	check("describe x", dr.TransactionStates[0].ErrorCode, nil0)
	check("describe an unknown id", dr.TransactionStates[1].ErrorCode, kerr.TransactionalIDNotFound)
	list := kmsg.NewPtrListTransactionsRequest()
	list.StateFilters = []string{"Ongoing"}
	if lr := rawRequest(t, cl, list).(*kmsg.ListTransactionsResponse); len(lr.TransactionStates) != 0 {
		t.Errorf("ListTransactions Ongoing: %+v", lr.TransactionStates)
	}
}

// TestListTransactionsDurationFilter: ListTransactions v1 lists only the
// transactions open longer than its duration filter (docs/kafka-api.md).
func TestListTransactionsDurationFilter(t *testing.T) {
	tb := startTestBroker(t, nil) // block time starts in 2023: an open transaction is old
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("open"), 900_000
	ir := rawRequest(t, cl, init).(*kmsg.InitProducerIDResponse)
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = "open", ir.ProducerID, ir.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	if code := rawRequest(t, cl, add).(*kmsg.AddPartitionsToTxnResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	listed := func(filterMs int64) int {
		req := kmsg.NewPtrListTransactionsRequest()
		req.SetVersion(1)
		req.DurationFilterMillis = filterMs
		return len(rawRequest(t, cl, req).(*kmsg.ListTransactionsResponse).TransactionStates)
	}
	if n := listed(-1); n != 1 {
		t.Fatalf("no duration filter: %d transactions, want 1", n)
	}
	if n := listed(1000); n != 1 {
		t.Fatalf("open longer than 1 s: %d transactions, want 1", n)
	}
	if n := listed(1 << 50); n != 0 {
		t.Fatalf("open longer than 35,000 years: %d transactions, want 0", n)
	}
}

// TestAddPartitionsToTxnBatched: the KIP-890 broker form (v4+) adds to
// several transactions in one request, each on its own, and VerifyOnly
// checks without adding, with the errors of Kafka's coordinator.
func TestAddPartitionsToTxnBatched(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int64{}
	for _, id := range []string{"a", "b", "c"} {
		init := kmsg.NewPtrInitProducerIDRequest()
		init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr(id), 60_000
		ir := rawRequest(t, cl, init).(*kmsg.InitProducerIDResponse)
		if ir.ErrorCode != 0 {
			t.Fatal(kerr.ErrorForCode(ir.ErrorCode))
		}
		pids[id] = ir.ProducerID
	}
	txn := func(id string, pid int64, epoch int16, verify bool, topic string, parts ...int32) kmsg.AddPartitionsToTxnRequestTransaction {
		return kmsg.AddPartitionsToTxnRequestTransaction{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch,
			VerifyOnly: verify, Topics: []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: topic, Partitions: parts}}}
	}
	send := func(txns ...kmsg.AddPartitionsToTxnRequestTransaction) map[string][]int16 {
		t.Helper()
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Transactions = txns
		resp := rawRequest(t, cl, req).(*kmsg.AddPartitionsToTxnResponse)
		if resp.Version < 4 || resp.ErrorCode != 0 {
			t.Fatalf("v%d, top-level error %v", resp.Version, kerr.ErrorForCode(resp.ErrorCode))
		}
		out := map[string][]int16{}
		for _, rt := range resp.Transactions {
			for _, st := range rt.Topics {
				for _, sp := range st.Partitions {
					out[rt.TransactionalID] = append(out[rt.TransactionalID], sp.ErrorCode)
				}
			}
		}
		return out
	}
	expect := func(what string, got []int16, want ...*kerr.Error) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d codes, want %d", what, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i].Code {
				t.Errorf("%s[%d]: %v, want %v", what, i, kerr.ErrorForCode(got[i]), want[i])
			}
		}
	}

	// Two transactions added in one request; a third names a missing topic
	// and adds nothing, without failing the others.
	got := send(txn("a", pids["a"], 0, false, "t", 0), txn("b", pids["b"], 0, false, "t", 0, 1),
		txn("c", pids["c"], 0, false, "missing", 0))
	expect("add a", got["a"], nil0)
	expect("add b", got["b"], nil0, nil0)
	expect("add c", got["c"], kerr.UnknownTopicOrPartition)
	parts := map[string]fsm.TopicPartitions{}
	for _, ti := range tb.b.Transactions() {
		parts[ti.ID] = ti.Partitions
	}
	if !slices.Equal(parts["a"]["t"], []int32{0}) || !slices.Equal(parts["b"]["t"], []int32{0, 1}) || len(parts["c"]) != 0 {
		t.Fatalf("transactions' partitions after the batch: %v", parts)
	}

	// VerifyOnly: in the transaction, not in it, fenced, not the id's
	// producer; and nothing is added by verifying.
	got = send(txn("a", pids["a"], 0, true, "t", 0, 1), txn("b", pids["b"], 1, true, "t", 0),
		txn("c", pids["a"], 0, true, "t", 0))
	expect("verify a", got["a"], nil0, kerr.InvalidTxnState)
	expect("verify b at another epoch", got["b"], kerr.ProducerFenced)
	expect("verify c with a's producer id", got["c"], kerr.InvalidProducerIDMapping)
	expect("verify c, never begun", send(txn("c", pids["c"], 0, true, "t", 0))["c"], kerr.InvalidTxnState)
	for _, ti := range tb.b.Transactions() {
		if ti.ID == "a" && !slices.Equal(ti.Partitions["t"], []int32{0}) {
			t.Fatalf("verifying added to a: %v", ti.Partitions)
		}
	}

	// One transactional id twice in a request is malformed.
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{txn("a", pids["a"], 0, false, "t", 1), txn("a", pids["a"], 0, false, "t", 1)}
	if resp := rawRequest(t, cl, req).(*kmsg.AddPartitionsToTxnResponse); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("duplicate transactional id: %v, want INVALID_REQUEST", kerr.ErrorForCode(resp.ErrorCode))
	}
}
