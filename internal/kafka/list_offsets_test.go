package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
