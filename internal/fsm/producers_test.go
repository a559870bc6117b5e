package fsm

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// idBatch builds a batch of n records from producer pid at epoch, starting
// at sequence seq.
func idBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	return producerBatch(t, pid, epoch, seq, n, 0)
}

// producerBatch builds a batch of n records from producer pid at epoch,
// starting at sequence seq, with the batch attributes given.
func producerBatch(t *testing.T, pid int64, epoch int16, seq int32, n int, attributes int16) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte("v")}
	}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq,
		Attributes: attributes}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIdempotentProduce: retries of any of a producer's last five batches
// are answered with their first offset and not written again; gaps, stale
// epochs and a nonzero first sequence in a never-written partition are
// refused with Kafka's codes; the state survives a restart, and the same
// blocks give the same hashes on another state machine.
func TestIdempotentProduce(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	d.block(0, topics.CreateTopic{Name: "t", Partitions: 2, ReplicationFactor: -1})
	r := d.block(10, producers.InitProducerID{}, producers.InitProducerID{}, producers.InitProducerID{TransactionalID: "tx"})
	pid, pid2 := r[0].ProducerID, r[1].ProducerID
	if pid == pid2 {
		t.Fatalf("two producers got id %d", pid)
	}
	wantCode(t, "transactional id without a timeout", r[2], kerr.InvalidTransactionTimeout.Code)

	produce := func(b []byte) core.Result {
		return d.block(10, topics.Produce{Topic: "t", Partition: 0, Records: b})[0]
	}
	hwm := func() int64 { return d.f.View().Partition("t", 0).HighWatermark() }
	wantOffset := func(what string, r core.Result, off, high int64) {
		t.Helper()
		if r.Code != 0 || r.BaseOffset != off || hwm() != high {
			t.Fatalf("%s: code %d (%s) offset %d high watermark %d, want offset %d high watermark %d",
				what, r.Code, r.Message, r.BaseOffset, hwm(), off, high)
		}
	}
	wantOffset("first batch", produce(idBatch(t, pid, 0, 0, 3)), 0, 3)
	wantOffset("its retry", produce(idBatch(t, pid, 0, 0, 3)), 0, 3)
	wantOffset("next batch", produce(idBatch(t, pid, 0, 3, 2)), 3, 5)
	for i := range int32(5) {
		produce(idBatch(t, pid, 0, 5+i, 1))
	}
	wantOffset("retry of a batch five back", produce(idBatch(t, pid, 0, 5, 1)), 5, 10)
	wantCode(t, "retry of a batch six back", produce(idBatch(t, pid, 0, 3, 2)), kerr.OutOfOrderSequenceNumber.Code)
	wantCode(t, "a gap", produce(idBatch(t, pid, 0, 12, 1)), kerr.OutOfOrderSequenceNumber.Code)
	wantCode(t, "a new epoch not at 0", produce(idBatch(t, pid, 1, 10, 1)), kerr.OutOfOrderSequenceNumber.Code)
	wantOffset("a new epoch at 0", produce(idBatch(t, pid, 1, 0, 1)), 10, 11)
	wantCode(t, "the old epoch", produce(idBatch(t, pid, 0, 10, 1)), kerr.InvalidProducerEpoch.Code)
	wantOffset("an unknown producer mid-sequence, in a written partition", produce(idBatch(t, pid2, 0, 42, 1)), 11, 12)
	wantCode(t, "an unknown producer mid-sequence, in a never-written partition",
		d.block(10, topics.Produce{Topic: "t", Partition: 1, Records: idBatch(t, pid, 0, 7, 1)})[0], kerr.OutOfOrderSequenceNumber.Code)
	if hwm() != 12 {
		t.Fatalf("high watermark %d after the refusals, want 12", hwm())
	}
	ps := d.f.View().Partition("t", 0).Producers()
	if len(ps) != 2 || ps[0].ProducerID != pid || ps[0].Epoch != 1 || ps[0].LastSequence != 0 || ps[1].LastSequence != 42 {
		t.Fatalf("producers %+v", ps)
	}

	// After a restart the producers are described as before, and the
	// retry is still recognised.
	d.f.Close()
	d.f = openGroups(t, dir)
	defer d.f.Close()
	if got := d.f.View().Partition("t", 0).Producers(); len(got) != 2 || got[0] != ps[0] || got[1] != ps[1] {
		t.Fatalf("producers after a restart %+v, before %+v", got, ps)
	}
	wantOffset("a retry after a restart", produce(idBatch(t, pid, 1, 0, 1)), 10, 12)
	wantOffset("the next batch after a restart", produce(idBatch(t, pid, 1, 1, 1)), 12, 13)
	if r := d.block(10, producers.InitProducerID{})[0]; r.ProducerID <= pid2 {
		t.Fatalf("producer id %d after a restart; ids up to %d were given before", r.ProducerID, pid2)
	}

	d.replay()
}

// TestRetryLogAppendTime (issue 27): on a LogAppendTime topic a retry of
// an idempotent batch is answered, as Kafka answers it (the timestamp its
// ProducerStateManager keeps with each batch), with the log_append_time
// the batch was stored with, not the retry's block time: a client that
// looks the record up by the time its produce was answered with
// (librdkafka's and Java's delivery reports carry it) finds the record,
// also after a restart.
func TestRetryLogAppendTime(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	d.block(0, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "message.timestamp.type", Value: "LogAppendTime"}}})
	pid := d.block(10, producers.InitProducerID{})[0].ProducerID
	produce := func(seq int32) core.Result {
		return d.block(10, topics.Produce{Topic: "t", Partition: 0, Records: idBatch(t, pid, 0, seq, 2)})[0]
	}
	first := produce(0)
	if first.Code != 0 || first.LogAppendTime != d.now {
		t.Fatalf("first batch: code %d log_append_time %d, want the block time %d", first.Code, first.LogAppendTime, d.now)
	}
	check := func(what string, r core.Result) {
		t.Helper()
		if r.Code != 0 || r.BaseOffset != first.BaseOffset || r.LogAppendTime != first.LogAppendTime {
			t.Fatalf("%s at block time %d: code %d offset %d log_append_time %d; the batch was stored at offset %d with %d",
				what, d.now, r.Code, r.BaseOffset, r.LogAppendTime, first.BaseOffset, first.LogAppendTime)
		}
		off, ts, found, err := d.f.View().Partition("t", 0).OffsetForTimestamp(r.LogAppendTime)
		if err != nil || !found || off != r.BaseOffset || ts != r.LogAppendTime {
			t.Fatalf("%s: OffsetForTimestamp(%d) = %d, %d, %v, %v; want offset %d", what, r.LogAppendTime, off, ts, found, err, r.BaseOffset)
		}
	}
	check("a retry", produce(0))
	if r := produce(2); r.BaseOffset != 2 || r.LogAppendTime != d.now {
		t.Fatalf("next batch: offset %d log_append_time %d, want 2 and the block time %d", r.BaseOffset, r.LogAppendTime, d.now)
	}
	d.f.Close()
	d.f = openGroups(t, dir)
	defer d.f.Close()
	check("a retry after a restart", produce(0))
	d.replay()
}

// TestRetryCreateTime (issue 27): on a CreateTime topic a first produce
// answers log_append_time -1, but a retry of an idempotent batch is
// answered, as Kafka's UnifiedLog.append answers a duplicate whatever the
// timestamp type, with the max timestamp its producer state keeps for the
// stored batch (the largest record timestamp), and with the current log
// start offset: after DeleteRecords moved it, the retry says so.
func TestRetryCreateTime(t *testing.T) {
	dir := t.TempDir()
	d := &groupDriver{t: t, f: openGroups(t, dir), now: t0}
	d.block(0, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})
	pid := d.block(10, producers.InitProducerID{})[0].ProducerID
	batch := func(seq int32) []byte {
		recs := []record.Record{{OffsetDelta: 0, TimestampDelta: 7, Value: []byte("a")}, {OffsetDelta: 1, TimestampDelta: 3, Value: []byte("b")}}
		b, err := record.Build(record.Header{FirstTimestamp: t0 - 100, ProducerID: pid, BaseSequence: seq}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	produce := func(seq int32) core.Result {
		return d.block(10, topics.Produce{Topic: "t", Partition: 0, Records: batch(seq)})[0]
	}
	if r := produce(0); r.Code != 0 || r.BaseOffset != 0 || r.LogAppendTime != -1 || r.LogStartOffset != 0 {
		t.Fatalf("first batch: %+v, want offset 0, log_append_time -1, log start 0", r)
	}
	if r := produce(2); r.Code != 0 || r.BaseOffset != 2 || r.LogAppendTime != -1 {
		t.Fatalf("second batch: %+v, want offset 2, log_append_time -1", r)
	}
	if r := d.block(10, topics.DeleteRecords{Topic: "t", Partition: 0, Offset: 1})[0]; r.Code != 0 {
		t.Fatalf("DeleteRecords: %+v", r)
	}
	want := t0 - 100 + 7 // the batch's max timestamp
	check := func(what string, r core.Result) {
		t.Helper()
		if r.Code != 0 || r.BaseOffset != 0 || r.LogAppendTime != want || r.LogStartOffset != 1 {
			t.Fatalf("%s: code %d offset %d log_append_time %d log start %d; want offset 0, log_append_time %d (the stored max timestamp), log start 1",
				what, r.Code, r.BaseOffset, r.LogAppendTime, r.LogStartOffset, want)
		}
	}
	check("a retry", produce(0))
	d.f.Close()
	d.f = openGroups(t, dir)
	defer d.f.Close()
	check("a retry after a restart", produce(0))
	d.replay()
}

// TestProducerExpiry: a producer idle for producer.id.expiration.ms is
// forgotten by housekeeping, after which it is an unknown producer again.
func TestProducerExpiry(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})
	d.block(10, topics.Produce{Topic: "t", Partition: 0, Records: idBatch(t, 7, 0, 0, 1)})
	d.block(topics.ProducerIDExpirationMs - 100)
	if n := len(d.f.View().Partition("t", 0).Producers()); n != 1 {
		t.Fatalf("%d producers before expiry", n)
	}
	d.block(2000)
	if n := len(d.f.View().Partition("t", 0).Producers()); n != 0 {
		t.Fatalf("%d producers after expiry", n)
	}
}
