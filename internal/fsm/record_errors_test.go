package fsm

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// mixedBatch is one batch of records at ts+deltas[i], keyed where keys[i]
// is non-empty and keyless where it is "".
func mixedBatch(t testing.TB, ts int64, keys []string, deltas []int64) []byte {
	t.Helper()
	recs := make([]record.Record, len(keys))
	for i, k := range keys {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte("v")}
		if k != "" {
			recs[i].Key = []byte(k)
		}
		if deltas != nil {
			recs[i].TimestampDelta = deltas[i]
		}
	}
	b, err := record.Build(record.Header{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func indexes(es []core.RecordError) []int32 {
	var out []int32
	for _, e := range es {
		out = append(out, e.Index)
	}
	return out
}

// TestProduceRecordErrors: a batch with invalid records is refused whole and
// its result lists each failing record's index, as Kafka's LogValidator
// answers a Produce v8+. Reference: KIP-467.
func TestProduceRecordErrors(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	many := make([]string, core.MaxRecordErrors+500)
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1,
			topics.CreateTopic{Name: "compacted", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}},
			topics.CreateTopic{Name: "timed", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "message.timestamp.difference.max.ms", Value: "60000"}}}),
		tx(2,
			topics.Produce{Topic: "compacted", Partition: 0, Records: mixedBatch(t, t0, []string{"a", "", "b", ""}, nil)},
			topics.Produce{Topic: "compacted", Partition: 0, Records: mixedBatch(t, t0, many, nil)},
			topics.Produce{Topic: "timed", Partition: 0, Records: mixedBatch(t, t0, []string{"a", "b", "c"}, []int64{0, -120_000, 1})},
			topics.Produce{Topic: "compacted", Partition: 0, Records: mixedBatch(t, t0, []string{"a", "b"}, nil)},
		),
	}})
	if err != nil {
		t.Fatal(err)
	}
	rs := out.Txs[1].Results
	if r := rs[0]; r.Code != kerr.InvalidRecord.Code || !slices.Equal(indexes(r.RecordErrors), []int32{1, 3}) {
		t.Fatalf("keyless records in a compacted topic: code %d, record errors %v (%s); want INVALID_RECORD listing 1 and 3", r.Code, indexes(r.RecordErrors), r.Message)
	}
	if m := rs[0].RecordErrors[0].Message; m != "Compacted topic cannot accept message without key in topic partition compacted-0." {
		t.Errorf("record error message %q", m)
	}
	if r := rs[1]; r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != core.MaxRecordErrors || r.RecordErrors[core.MaxRecordErrors-1].Index != core.MaxRecordErrors-1 ||
		!strings.Contains(r.Message, "1500 record errors") {
		t.Fatalf("1500 keyless records: code %d, %d record errors (%s); want the first %d listed and the message counting 1500", r.Code, len(r.RecordErrors), r.Message, core.MaxRecordErrors)
	}
	if r := rs[2]; r.Code != kerr.InvalidTimestamp.Code || !slices.Equal(indexes(r.RecordErrors), []int32{1}) {
		t.Fatalf("a record two minutes old, one allowed: code %d, record errors %v (%s); want INVALID_TIMESTAMP listing 1", r.Code, indexes(r.RecordErrors), r.Message)
	}
	if r := rs[3]; r.Code != 0 || r.BaseOffset != 0 || r.RecordErrors != nil {
		t.Fatalf("keyed batch after refused ones: %+v; want offset 0 (nothing of the refused batches written)", r)
	}
	// The indexes are hashed, the messages are not.
	a := []core.Result{{Code: kerr.InvalidRecord.Code, RecordErrors: []core.RecordError{{Index: 1, Message: "x"}}}}
	b := []core.Result{{Code: kerr.InvalidRecord.Code, RecordErrors: []core.RecordError{{Index: 2, Message: "x"}}}}
	c := []core.Result{{Code: kerr.InvalidRecord.Code, RecordErrors: []core.RecordError{{Index: 1, Message: "y"}}}}
	if bytes.Equal(core.EncodeResults(a), core.EncodeResults(b)) || !bytes.Equal(core.EncodeResults(a), core.EncodeResults(c)) {
		t.Fatal("record indexes must be hashed and their messages not")
	}
}

// TestVersionConflictRecordError: a record whose expected version does not
// hold is the failing record of its batch (docs/keys.md).
func TestVersionConflictRecordError(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	expect := []record.RecordHeader{{Key: topics.ExpectedVersionHeader, Value: []byte("-1")}}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{
		{OffsetDelta: 0, Key: []byte("b")},
		{OffsetDelta: 1, Key: []byte("a"), Headers: expect},
		{OffsetDelta: 2, Key: []byte("a"), Headers: expect}, // a is at version 1 by now
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "acct", Partitions: 1, ReplicationFactor: -1}),
		tx(2, topics.Produce{Topic: "acct", Partition: 0, Records: b}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Txs[1].Results[0]
	if r.Code != kerr.InvalidRecord.Code || !r.VersionConflict || r.KeyVersion != 1 || !slices.Equal(indexes(r.RecordErrors), []int32{2}) {
		t.Fatalf("conflict: code %d conflict %v version %d record errors %v (%s); want INVALID_RECORD at version 1 listing record 2",
			r.Code, r.VersionConflict, r.KeyVersion, indexes(r.RecordErrors), r.Message)
	}
}
