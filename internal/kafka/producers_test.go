package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/record"
)

// TestIdempotentProducer: franz-go's default producer is idempotent and
// asks for a producer id; a batch sent twice (a retry) is stored once and
// both answers name the same offset; a gap and a stale epoch get Kafka's
// codes; DescribeProducers shows the producer.
func TestIdempotentProducer(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr, kgo.DefaultProduceTopic("idem"))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "idem"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := adm.DescribeProducers(context.Background(), kadm.TopicsSet{"idem": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	seen := ps.SortedProducers()
	if len(seen) != 1 || seen[0].LastSequence != 99 {
		t.Fatalf("DescribeProducers after 100 idempotent records: %+v", seen)
	}

	raw := client(t, tb.addr)
	init := rawRequest(t, raw, kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 || init.ProducerID <= seen[0].ProducerID {
		t.Fatalf("InitProducerId: %v id %d", kerr.ErrorForCode(init.ErrorCode), init.ProducerID)
	}
	txn := kmsg.NewPtrInitProducerIDRequest()
	txn.TransactionalID = kmsg.StringPtr("tx")
	txn.TransactionTimeoutMillis = 900_001
	if code := rawRequest(t, raw, txn).(*kmsg.InitProducerIDResponse).ErrorCode; code != kerr.InvalidTransactionTimeout.Code {
		t.Errorf("InitProducerId with a timeout above transaction.max.timeout.ms: %v", kerr.ErrorForCode(code))
	}
	send := func(epoch int16, seq int32) (int16, int64) {
		t.Helper()
		b, err := record.Build(record.Header{ProducerID: init.ProducerID, ProducerEpoch: epoch, BaseSequence: seq},
			[]record.Record{{Value: []byte("x")}, {OffsetDelta: 1, Value: []byte("y")}})
		if err != nil {
			t.Fatal(err)
		}
		req := produceRequest("idem", b)
		p := rawRequest(t, raw, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		return p.ErrorCode, p.BaseOffset
	}
	code, first := send(0, 0)
	if code != 0 || first != 100 {
		t.Fatalf("first batch: %v at %d", kerr.ErrorForCode(code), first)
	}
	if code, again := send(0, 0); code != 0 || again != first {
		t.Fatalf("the retry: %v at %d, want offset %d", kerr.ErrorForCode(code), again, first)
	}
	if code, _ := send(0, 5); code != kerr.OutOfOrderSequenceNumber.Code {
		t.Errorf("a gap: %v", kerr.ErrorForCode(code))
	}
	if code, _ := send(1, 0); code != 0 {
		t.Errorf("a new epoch: %v", kerr.ErrorForCode(code))
	}
	if code, _ := send(0, 2); code != kerr.InvalidProducerEpoch.Code {
		t.Errorf("the old epoch: %v", kerr.ErrorForCode(code))
	}
	end, err := adm.ListEndOffsets(context.Background(), "idem")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := end.Lookup("idem", 0); o.Offset != 104 {
		t.Fatalf("log end offset %d, want 104 (100 records, then 2 + 2: the retry and the refused batches stored nothing)", o.Offset)
	}
}

// TestProduceRetryTimestamps (issue 27): Produce's log_append_time is -1 on
// a CreateTime topic and the append time on a LogAppendTime one; a retry
// of an idempotent batch (a duplicate sequence) is answered, as Kafka's
// UnifiedLog.append answers a duplicate, with its first offset, the max
// timestamp its batch was stored with as log_append_time whatever the
// timestamp type (the largest record timestamp on CreateTime, the append
// time on LogAppendTime), and the current log start offset.
func TestProduceRetryTimestamps(t *testing.T) {
	tb := startTestBroker(t, nil)
	raw := client(t, tb.addr)
	adm := kadm.NewClient(raw)
	lat := map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "rt-create"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(context.Background(), 1, 1, lat, "rt-append"); err != nil {
		t.Fatal(err)
	}
	base := time.Now().UnixMilli() - 60_000 // not the test broker's clock
	for _, tc := range []struct {
		topic     string
		logAppend bool
	}{{"rt-create", false}, {"rt-append", true}} {
		init := rawRequest(t, raw, kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
		send := func(seq int32) kmsg.ProduceResponseTopicPartition {
			t.Helper()
			b, err := record.Build(record.Header{FirstTimestamp: base, ProducerID: init.ProducerID, BaseSequence: seq},
				[]record.Record{{TimestampDelta: 5, Value: []byte("x")}, {OffsetDelta: 1, TimestampDelta: 2, Value: []byte("y")}})
			if err != nil {
				t.Fatal(err)
			}
			req := produceRequest(tc.topic, b)
			return rawRequest(t, raw, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		}
		first := send(0)
		switch {
		case first.ErrorCode != 0 || first.BaseOffset != 0 || first.LogStartOffset != 0:
			t.Fatalf("%s: first batch %+v", tc.topic, first)
		case !tc.logAppend && first.LogAppendTime != -1:
			t.Fatalf("%s: first batch log_append_time %d, want -1 on a CreateTime topic", tc.topic, first.LogAppendTime)
		case tc.logAppend && (first.LogAppendTime <= 0 || first.LogAppendTime == base+5):
			t.Fatalf("%s: first batch log_append_time %d, want the block time", tc.topic, first.LogAppendTime)
		}
		if p := send(2); p.ErrorCode != 0 || p.BaseOffset != 2 {
			t.Fatalf("%s: second batch %+v", tc.topic, p)
		}
		dr, err := adm.DeleteRecords(context.Background(), kadm.Offsets{tc.topic: {0: {At: 1}}})
		if err != nil || dr.Error() != nil {
			t.Fatalf("%s: DeleteRecords: %v %v", tc.topic, err, dr.Error())
		}
		want := base + 5 // the stored max timestamp
		if tc.logAppend {
			want = first.LogAppendTime
		}
		if p := send(0); p.ErrorCode != 0 || p.BaseOffset != 0 || p.LogAppendTime != want || p.LogStartOffset != 1 {
			t.Fatalf("%s: the retry: error %d offset %d log_append_time %d log_start_offset %d; want offset 0, log_append_time %d, log_start_offset 1",
				tc.topic, p.ErrorCode, p.BaseOffset, p.LogAppendTime, p.LogStartOffset, want)
		}
	}
}

// TestLogAppendTimeConsumed (issue 27): a consumer of a LogAppendTime topic
// sees, as from Kafka, timestamp type LogAppendTime and as every record's
// timestamp the append time the produce answered with (franz-go reads it
// from the batch header's max timestamp on such batches), not the time the
// producer stamped; a producer that sets the LogAppendTime type itself gets
// INVALID_TIMESTAMP, as Kafka's LogValidator answers.
func TestLogAppendTimeConsumed(t *testing.T) {
	tb := startTestBroker(t, nil)
	raw := client(t, tb.addr)
	lat := map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}
	if _, err := kadm.NewClient(raw).CreateTopic(context.Background(), 1, 1, lat, "latc"); err != nil {
		t.Fatal(err)
	}
	sent := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	send := func(attrs int16) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		b, err := record.Build(record.Header{Attributes: attrs, FirstTimestamp: sent.UnixMilli(), MaxTimestamp: sent.UnixMilli() + 1,
			ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
			[]record.Record{{Value: []byte("a")}, {OffsetDelta: 1, TimestampDelta: 1, Value: []byte("b")}})
		if err != nil {
			t.Fatal(err)
		}
		req := produceRequest("latc", b)
		return rawRequest(t, raw, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	first := send(0)
	if first.ErrorCode != 0 || first.LogAppendTime <= 0 || first.LogAppendTime == sent.UnixMilli() {
		t.Fatalf("produce: %+v; want the append time as log_append_time", first)
	}
	if p := send(0x08); p.ErrorCode != kerr.InvalidTimestamp.Code {
		t.Fatalf("a batch the producer marked LogAppendTime: %v, want INVALID_TIMESTAMP", kerr.ErrorForCode(p.ErrorCode))
	}
	prod := client(t, tb.addr, kgo.DefaultProduceTopic("latc"))
	if err := prod.ProduceSync(ctx(t), &kgo.Record{Value: []byte("c"), Timestamp: sent}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons := client(t, tb.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"latc": {0: kgo.NewOffset().AtStart()}}))
	var recs []*kgo.Record
	for len(recs) < 3 {
		fs := cons.PollFetches(ctx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fs.Records()...)
	}
	for i, r := range recs {
		if r.Attrs.TimestampType() != 1 || r.Timestamp.Equal(sent) || r.Timestamp.UnixMilli() < first.LogAppendTime {
			t.Fatalf("record %d: timestamp type %d, timestamp %d; want LogAppendTime (1), the append time (the first batch's %d), not the producer's %d",
				i, r.Attrs.TimestampType(), r.Timestamp.UnixMilli(), first.LogAppendTime, sent.UnixMilli())
		}
		if i < 2 && r.Timestamp.UnixMilli() != first.LogAppendTime {
			t.Fatalf("record %d: timestamp %d, want the log_append_time %d its produce answered", i, r.Timestamp.UnixMilli(), first.LogAppendTime)
		}
	}
}
