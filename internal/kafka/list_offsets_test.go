package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/record"
)

// TestListOffsetsByTimeAfterAck: a write acknowledged by a broker is visible
// to every later read on that broker, the time index included: ListOffsets
// for the timestamp of a record just acknowledged finds that record
// (issue 27).
func TestListOffsetsByTimeAfterAck(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.DefaultProduceTopic("lot"), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	adm := kadm.NewClient(cl)
	base := time.Now().Truncate(time.Millisecond)
	for i := 0; i < 300; i++ {
		ts := base.Add(time.Duration(i) * time.Millisecond)
		r := &kgo.Record{Value: []byte{byte(i)}, Timestamp: ts}
		if err := cl.ProduceSync(ctx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		lo, err := adm.ListOffsetsAfterMilli(ctx(t), ts.UnixMilli(), "lot")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := lo.Lookup("lot", 0)
		if o.Err != nil || o.Offset != r.Offset || o.Timestamp != ts.UnixMilli() {
			t.Fatalf("produce %d acknowledged at offset %d (ts %d); ListOffsets(%d) = offset %d ts %d err %v",
				i, r.Offset, ts.UnixMilli(), ts.UnixMilli(), o.Offset, o.Timestamp, o.Err)
		}
	}
}

// listOffsets sends one raw ListOffsets request for partition 0 of topic at
// isolation level iso and returns the partition's answer.
func listOffsets(t *testing.T, cl *kgo.Client, topic string, iso int8, ts int64) kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = iso
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// TestListOffsetsReadCommitted (issue 27): under read_committed, ListOffsets
// bounds not only -1 (latest) by the last stable offset but every answer:
// a lookup by time or -3 whose record is at or past the LSO answers offset
// and timestamp -1, no error, as Kafka's ReplicaManager.fetchOffset does
// (it hides the record; it does not look for an earlier one), and finds it
// once the transaction is decided. read_uncommitted sees everything.
func TestListOffsetsReadCommitted(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	plain := client(t, tb.addr, kgo.DefaultProduceTopic("lorc"), kgo.ProducerLinger(0))
	if _, err := kadm.NewClient(plain).CreateTopic(ctx(t), 1, 1, nil, "lorc"); err != nil {
		t.Fatal(err)
	}
	// In the future, so that the commit marker's timestamp (the block time)
	// is below every record's and -3 finds a record, not the marker.
	base := time.Now().Truncate(time.Millisecond).Add(10 * time.Minute)
	at := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
	produce := func(cl *kgo.Client, d time.Duration) int64 {
		t.Helper()
		r := &kgo.Record{Value: []byte("v"), Timestamp: base.Add(d)}
		if err := cl.ProduceSync(ctx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return r.Offset
	}
	for i := range 5 { // offsets 0-4 at base+0..4 ms
		produce(plain, time.Duration(i)*time.Millisecond)
	}
	txn := client(t, tb.addr, kgo.TransactionalID("lorc-tx"), kgo.DefaultProduceTopic("lorc"), kgo.ProducerLinger(0))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if off := produce(txn, time.Second); off != 5 { // the open transaction starts at 5
		t.Fatalf("transactional record at offset %d, want 5", off)
	}
	produce(txn, time.Second+time.Millisecond) // 6
	produce(plain, 2*time.Second)              // 7, the largest timestamp, after the open transaction
	want := func(what string, iso int8, ts, off, rts int64) {
		t.Helper()
		p := listOffsets(t, plain, "lorc", iso, ts)
		epoch := int32(0)
		if off < 0 {
			epoch = -1
		}
		if p.ErrorCode != 0 || p.Offset != off || p.Timestamp != rts || p.LeaderEpoch != epoch {
			t.Fatalf("%s (isolation %d, timestamp %d): error %d offset %d timestamp %d epoch %d; want offset %d timestamp %d epoch %d",
				what, iso, ts, p.ErrorCode, p.Offset, p.Timestamp, p.LeaderEpoch, off, rts, epoch)
		}
	}
	want("latest, read_committed", 1, -1, 5, -1)
	want("latest, read_uncommitted", 0, -1, 8, -1)
	want("by time below the LSO, read_committed", 1, at(2*time.Millisecond), 2, at(2*time.Millisecond))
	want("by time, a record of the open transaction, read_committed", 1, at(time.Second), -1, -1)
	want("by time, a record after the open transaction, read_committed", 1, at(2*time.Second), -1, -1)
	want("by time, a record of the open transaction, read_uncommitted", 0, at(time.Second), 5, at(time.Second))
	want("max timestamp past the LSO, read_committed", 1, -3, -1, -1)
	want("max timestamp, read_uncommitted", 0, -3, 7, at(2*time.Second))
	want("by time past every record", 0, at(3*time.Second), -1, -1)

	if err := txn.EndTransaction(ctx(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the commit to reach the LSO", func() error {
		if p := listOffsets(t, plain, "lorc", 1, -1); p.Offset != 9 { // the marker at 8
			return fmt.Errorf("read_committed latest %d after the commit, want 9", p.Offset)
		}
		return nil
	})
	want("by time, a committed record, read_committed", 1, at(time.Second), 5, at(time.Second))
	want("max timestamp, read_committed, decided", 1, -3, 7, at(2*time.Second))
}

// TestListOffsetsLyingMaxTimestamp (issue 27): a client that produces a
// CreateTime batch whose header claims a smaller max timestamp than its
// records hold cannot make ListOffsets by time skip those records, nor one
// claiming a larger one be answered as the max timestamp (-3): the batch
// is stored, as Kafka's LogValidator stores it, with its records' largest
// timestamp in the header, which is what Fetch returns.
func TestListOffsetsLyingMaxTimestamp(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, 1, nil, "lie"); err != nil {
		t.Fatal(err)
	}
	base := time.Now().UnixMilli()
	produce := func(claim int64, deltas ...int64) {
		t.Helper()
		recs := make([]record.Record, len(deltas))
		for i, d := range deltas {
			recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: d, Value: []byte("v")}
		}
		b, err := record.Build(record.Header{FirstTimestamp: base, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		record.SetMaxTimestamp(b, claim)
		req := produceRequest("lie", b)
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("produce: %v %+v", err, resp)
		}
	}
	produce(base+1, 10, 50, 20) // offsets 0-2: claims base+1, holds base+50
	produce(base+30, 30)        // 3, honest
	produce(base+1_000_000, 60) // 4: claims far more than base+60
	for _, c := range []struct{ ts, off, rts int64 }{
		{base + 5, 0, base + 10},
		{base + 40, 1, base + 50},
		{base + 55, 4, base + 60},
		{base + 61, -1, -1},
		{-3, 4, base + 60},
	} {
		p := listOffsets(t, cl, "lie", 0, c.ts)
		if p.ErrorCode != 0 || p.Offset != c.off || p.Timestamp != c.rts {
			t.Fatalf("ListOffsets(%d): error %d offset %d timestamp %d; want offset %d timestamp %d",
				c.ts, p.ErrorCode, p.Offset, p.Timestamp, c.off, c.rts)
		}
	}
	fr := kmsg.NewPtrFetchRequest()
	fr.MaxWaitMillis, fr.MaxBytes = 100, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "lie"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	resp, err := fr.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	batches, err := record.Split(resp.Topics[0].Partitions[0].RecordBatches)
	if err != nil || len(batches) != 3 {
		t.Fatalf("fetched %d batches, %v", len(batches), err)
	}
	for i, want := range []int64{base + 50, base + 30, base + 60} {
		if h, err := record.ValidateStored(batches[i]); err != nil || h.MaxTimestamp != want || h.LogAppendTime() {
			t.Fatalf("fetched batch %d: %+v, %v; want CreateTime max timestamp %d", i, h, err, want)
		}
	}
}
