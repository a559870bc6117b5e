package kafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestProduceRecordErrors: a batch with keyless records sent to a compacted
// topic is refused whole with INVALID_RECORD, and from Produce v8 the answer
// lists each keyless record's batch_index with Kafka's message (KIP-467);
// below v8 the field does not exist.
func TestProduceRecordErrors(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 1, -1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "kv"); err != nil {
		t.Fatal(err)
	}
	batch := rawBatch(t, &kgo.Record{Key: []byte("a")}, &kgo.Record{Value: []byte("no key")}, &kgo.Record{Key: []byte("b")}, &kgo.Record{Value: []byte("no key")})
	produce := func(cl *kgo.Client) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		req := produceRequest("kv", batch)
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version < 8 {
			t.Logf("answered at v%d", resp.Version)
		}
		return resp.Topics[0].Partitions[0]
	}

	p := produce(cl)
	var idx []int32
	for _, e := range p.ErrorRecords {
		idx = append(idx, e.RelativeOffset)
		if e.ErrorMessage == nil || *e.ErrorMessage != "Compacted topic cannot accept message without key in topic partition kv-0." {
			t.Errorf("record %d: message %v", e.RelativeOffset, e.ErrorMessage)
		}
	}
	if p.ErrorCode != kerr.InvalidRecord.Code || !slices.Equal(idx, []int32{1, 3}) || p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, "2 record errors") {
		t.Fatalf("v11: code %d, record errors at %v, message %v; want INVALID_RECORD listing 1 and 3", p.ErrorCode, idx, p.ErrorMessage)
	}

	v7 := kversion.Stable()
	v7.SetMaxKeyVersion(0, 7) // Produce v7: no record_errors
	p = produce(client(t, tb.addr, kgo.MaxVersions(v7)))
	if p.ErrorCode != kerr.InvalidRecord.Code || len(p.ErrorRecords) != 0 {
		t.Fatalf("v7: code %d, %d record errors; want INVALID_RECORD and none", p.ErrorCode, len(p.ErrorRecords))
	}
	o, err := kadm.NewClient(cl).ListEndOffsets(ctx(t), "kv")
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := o.Lookup("kv", 0); end.Offset != 0 {
		t.Fatalf("end offset %d: records of a refused batch were written", end.Offset)
	}
}
