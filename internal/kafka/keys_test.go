package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// TestExpectedVersionThroughKafka: a Kafka client states the version it
// expects a key to be at with the stele-expected-version record header;
// a record whose expectation holds is written, one whose does not fails
// with INVALID_RECORD (franz-go surfaces the code; the response also
// carries Stele's message naming the key and its version), and nothing of
// its batch is written.
func TestExpectedVersionThroughKafka(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr, kgo.DefaultProduceTopic("acct"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, nil, "acct"); err != nil {
		t.Fatal(err)
	}
	rec := func(key, value, expect string) *kgo.Record {
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		if expect != "" {
			r.Headers = []kgo.RecordHeader{{Key: fsm.ExpectedVersionHeader, Value: []byte(expect)}}
		}
		return r
	}
	if err := cl.ProduceSync(ctx(t), rec("a", "first", "-1")).FirstErr(); err != nil {
		t.Fatalf("first event, expecting none: %v", err)
	}
	if err := cl.ProduceSync(ctx(t), rec("a", "second", "0")).FirstErr(); err != nil {
		t.Fatalf("expecting version 0: %v", err)
	}
	if err := cl.ProduceSync(ctx(t), rec("a", "stale", "0")).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a stale expectation: %v, want INVALID_RECORD", err)
	}

	// The raw answer names the key and its version.
	req := produceRequest("acct", rawBatch(t, rec("a", "stale again", "0"), rec("b", "b0", "")))
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != kerr.InvalidRecord.Code || p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, `key "a"`) || !strings.Contains(*p.ErrorMessage, "version 1") {
		t.Fatalf("raw produce: code %d message %v", p.ErrorCode, p.ErrorMessage)
	}
	evs, err := tb.b.KeyEvents("acct", []byte("b"), 0, 10)
	if err != nil || len(evs) != 0 {
		t.Fatalf("the refused batch's record of b was written: %v %v", evs, err)
	}
}

// produceRequest asks, with acks=all, to append batch to partition 0 of
// topic: the raw Produce the tests send when they need the answer's fields.
func produceRequest(topic string, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// rawBatch encodes records as one uncompressed batch.
func rawBatch(t *testing.T, recs ...*kgo.Record) []byte {
	t.Helper()
	var rs []record.Record
	for i, r := range recs {
		rr := record.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			rr.Headers = append(rr.Headers, record.RecordHeader{Key: h.Key, Value: h.Value})
		}
		rs = append(rs, rr)
	}
	b, err := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
