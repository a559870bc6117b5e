package fsm

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// txnBatch builds a transactional batch of n records.
func txnBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	return producerBatch(t, pid, epoch, seq, n, 0x10)
}

// TestTransactions drives a transactional producer through Kafka's rules:
// partitions must be added before they are written, an open transaction
// holds the last stable offset back, a commit writes markers and makes its
// offsets visible, an abort is listed for read_committed readers, a new
// epoch fences the old one, a lapsed timeout aborts in block time; all of
// it survives a restart and replays to the same hashes.
func TestTransactions(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	d.block(0, topics.CreateTopic{Name: "out", Partitions: 2, ReplicationFactor: -1})
	r := d.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0]
	pid := r.ProducerID
	if r.Code != 0 || r.ProducerEpoch != 0 {
		t.Fatalf("init: %+v", r)
	}
	part := func(i int32) *topics.Partition { return d.f.View().Partition("out", i) }
	produce := func(i int32, b []byte) core.Result {
		return d.block(10, topics.Produce{Topic: "out", Partition: i, Records: b})[0]
	}
	add := func(epoch int16, parts ...int32) []core.Result {
		var cmds []core.Command
		for _, p := range parts {
			cmds = append(cmds, producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Epoch: epoch, Topic: "out", Partition: p})
		}
		return d.block(10, cmds...)
	}

	wantCode(t, "transactional write before AddPartitionsToTxn", produce(0, txnBatch(t, pid, 0, 0, 2)), kerr.InvalidTxnState.Code)
	for _, r := range add(0, 0, 1) {
		wantCode(t, "AddPartitionsToTxn", r, 0)
	}
	wantCode(t, "write to out-0", produce(0, txnBatch(t, pid, 0, 0, 2)), 0)
	wantCode(t, "write to out-1", produce(1, txnBatch(t, pid, 0, 0, 1)), 0)
	wantCode(t, "a plain batch during the transaction", produce(0, idBatch(t, pid, 0, 2, 1)), kerr.InvalidTxnState.Code)
	if p := part(0); p.HighWatermark() != 2 || p.LastStableOffset() != 0 {
		t.Fatalf("open transaction: high watermark %d, last stable %d; want 2, 0", p.HighWatermark(), p.LastStableOffset())
	}
	r2 := d.block(10, producers.AddOffsetsToTxn{TransactionalID: "tx", ProducerID: pid, Epoch: 0, Group: "g"},
		producers.TxnOffsetCommit{TransactionalID: "tx", ProducerID: pid, Epoch: 0, Group: "g", Generation: -1, Topic: "out", Partition: 0, Offset: 5},
		producers.TxnOffsetCommit{TransactionalID: "tx", ProducerID: pid, Epoch: 0, Group: "other", Generation: -1, Topic: "out", Partition: 0, Offset: 5})
	wantCode(t, "AddOffsetsToTxn", r2[0], 0)
	wantCode(t, "TxnOffsetCommit", r2[1], 0)
	wantCode(t, "TxnOffsetCommit to a group not added", r2[2], kerr.InvalidTxnState.Code)
	if g := d.f.Groups().Group("g"); g != nil {
		t.Fatalf("offsets visible before the commit: %+v", g.Offsets)
	}
	wantCode(t, "commit", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: 0, Commit: true})[0], 0)
	if p := part(0); p.HighWatermark() != 3 || p.LastStableOffset() != 3 {
		t.Fatalf("after the commit: high watermark %d, last stable %d; want 3, 3 (the marker)", p.HighWatermark(), p.LastStableOffset())
	}
	if o := d.f.Groups().Group("g").Offsets["out"][0]; o.Offset != 5 {
		t.Fatalf("committed offset %+v after the commit", o)
	}
	wantCode(t, "commit again (a retry)", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: 0, Commit: true})[0], 0)

	add(0, 0)
	wantCode(t, "second transaction's write", produce(0, txnBatch(t, pid, 0, 2, 2)), 0)
	wantCode(t, "abort", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: 0})[0], 0)
	wantCode(t, "commit after the abort", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: 0, Commit: true})[0], kerr.InvalidTxnState.Code)
	// A batch of the ended transaction arriving late cannot open a hanging
	// transaction on the partition (KIP-890's verification, on every append).
	wantCode(t, "a late write after the abort", produce(0, txnBatch(t, pid, 0, 4, 1)), kerr.InvalidTxnState.Code)
	aborted := part(0).AbortedTxns(0, 100)
	if len(aborted) != 1 || aborted[0] != (topics.AbortedTxn{ProducerID: pid, FirstOffset: 3, LastOffset: 5}) {
		t.Fatalf("aborted transactions %+v, want one from offset 3, marker at 5", aborted)
	}
	if got := part(0).AbortedTxns(6, 100); len(got) != 0 {
		t.Fatalf("aborted transactions after their marker: %+v", got)
	}

	// A new epoch fences the old one.
	r = d.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0]
	if r.ProducerID != pid || r.ProducerEpoch != 1 {
		t.Fatalf("re-init: %+v", r)
	}
	wantCode(t, "AddPartitionsToTxn with the old epoch", add(0, 1)[0], kerr.ProducerFenced.Code)
	add(1, 1)
	wantCode(t, "a write of the old epoch", produce(1, txnBatch(t, pid, 0, 1, 1)), kerr.InvalidProducerEpoch.Code)
	wantCode(t, "a write of the new epoch", produce(1, txnBatch(t, pid, 1, 0, 1)), 0)
	if p := part(1); p.LastStableOffset() == p.HighWatermark() {
		t.Fatalf("out-1: the open transaction does not hold the last stable offset back")
	}

	// The transaction lapses (60 s of block time) and is aborted.
	d.block(61_000)
	if p := part(1); p.LastStableOffset() != p.HighWatermark() || len(p.AbortedTxns(0, 100)) != 1 {
		t.Fatalf("after the timeout: last stable %d, high watermark %d, aborted %+v", p.LastStableOffset(), p.HighWatermark(), p.AbortedTxns(0, 100))
	}
	txs := d.f.Transactions()
	if len(txs) != 1 || txs[0].State != producers.TxnCompleteAbort || txs[0].Epoch != 2 {
		t.Fatalf("transactions after the timeout %+v", txs)
	}

	d.f.Close()
	d.f = openGroups(t, dir)
	defer d.f.Close()
	if got := d.f.Transactions(); len(got) != 1 || got[0].Epoch != 2 {
		t.Fatalf("transactions after a restart %+v", got)
	}
	if got := part(0).AbortedTxns(0, 100); len(got) != 1 || part(1).LastStableOffset() != part(1).HighWatermark() {
		t.Fatalf("after a restart: aborted %+v", got)
	}
	d.replay()
}

// TestTransactionalIDAndTopicCleanup: an unused transactional id is
// forgotten after transactional.id.expiration.ms, and deleting a topic
// deletes its producers' state and aborted-transaction lists from the
// store (docs/exactly-once.md).
func TestTransactionalIDAndTopicCleanup(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "out", Partitions: 1, ReplicationFactor: -1})
	pid := d.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0].ProducerID
	d.block(10, producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Topic: "out"})
	d.block(10, topics.Produce{Topic: "out", Records: txnBatch(t, pid, 0, 0, 1)})
	d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid})
	kinds := func() (producers, aborted int) {
		for k := range storeContents(t, d.f) {
			switch k[:2] {
			case "s/":
				producers++
			case "a/":
				aborted++
			}
		}
		return
	}
	if p, a := kinds(); p != 1 || a != 1 {
		t.Fatalf("before deleting the topic: %d producer states, %d aborted transactions stored; want 1, 1", p, a)
	}
	d.block(10, topics.DeleteTopic{Name: "out"})
	if p, a := kinds(); p != 0 || a != 0 {
		t.Fatalf("after deleting the topic: %d producer states, %d aborted transactions stored", p, a)
	}
	d.block(producers.TransactionalIDExpirationMs - 1000)
	if n := len(d.f.Transactions()); n != 1 {
		t.Fatalf("%d transactional ids before expiry, want 1", n)
	}
	d.block(2000)
	if n := len(d.f.Transactions()); n != 0 {
		t.Fatalf("%d transactional ids after expiry, want 0", n)
	}
}
