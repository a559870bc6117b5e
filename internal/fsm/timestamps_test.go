package fsm

import (
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// lyingBatch builds a CreateTime batch whose records have the timestamps
// first+delta and whose header then claims max timestamp claim (the CRC
// made right, as a hostile client makes it).
func lyingBatch(t *testing.T, first, claim int64, deltas ...int64) []byte {
	t.Helper()
	recs := make([]record.Record, len(deltas))
	for i, d := range deltas {
		recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: d, Value: []byte("v")}
	}
	b, err := record.Build(record.Header{FirstTimestamp: first, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	record.SetMaxTimestamp(b, claim)
	return b
}

// TestLyingMaxTimestamp (issue 27): a CreateTime batch whose header claims
// another max timestamp than its records hold is stored, as Kafka's
// LogValidator stores it, with the records' largest timestamp in its
// header (CRC recomputed), so that the time index, ListOffsets by time and
// -3 go by the records: a header claiming too little cannot make a lookup
// by time skip the batch's records, nor one claiming too much be answered
// as the max timestamp. The stored bytes are what the app hash proves; a
// signed batch (the signature covers no timestamp) is restamped and still
// verified; all of it holds after a restart.
func TestLyingMaxTimestamp(t *testing.T) {
	dir := t.TempDir()
	r := newProofRecorder(t, open(t, dir))
	defer func() { r.f.Close() }()
	alice := newSigner("alice", 1)
	r.block(0, topics.CreateTopic{Name: "ct", Partitions: 1, ReplicationFactor: -1},
		topics.CreateTopic{Name: "signed", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.signed.by", Value: "alice"}}},
		alice.register(nil))
	for i, b := range [][]byte{
		lyingBatch(t, t0, t0+2, 1, 2),          // 0-1, honest
		lyingBatch(t, t0, t0+5, 10, 50, 20),    // 2-4, claims t0+5, holds t0+50
		lyingBatch(t, t0, t0+30, 30),           // 5, honest
		lyingBatch(t, t0, t0+1000, 60),         // 6, claims t0+1000, holds t0+60
		lyingBatch(t, t0, math.MinInt64+1, 70), // 7, claims a negative time
	} {
		if res := r.block(10, topics.Produce{Topic: "ct", Partition: 0, Records: b}); res[0].Code != 0 {
			t.Fatalf("batch %d: %+v", i, res[0])
		}
	}
	signed := signedBatch(t, "signed", -1, -1, signedRec{"s", &alice, 1, nil})
	record.SetMaxTimestamp(signed, t0-1)
	if res := r.block(10, topics.Produce{Topic: "signed", Partition: 0, Records: signed}); res[0].Code != 0 {
		t.Fatalf("signed batch with a lying header: %+v", res[0])
	}

	check := func(when string) {
		t.Helper()
		p := r.f.View().Partition("ct", 0)
		for _, c := range []struct {
			ts, off, rts int64
			found        bool
		}{
			{t0 + 8, 2, t0 + 10, true},  // in the batch claiming t0+5
			{t0 + 40, 3, t0 + 50, true}, // its largest, past what it claims
			{t0 + 55, 6, t0 + 60, true},
			{t0 + 65, 7, t0 + 70, true},
			{t0 + 71, 0, 0, false}, // no record, whatever a header claimed
		} {
			off, rts, found, err := p.OffsetForTimestamp(c.ts)
			if err != nil || found != c.found || (found && (off != c.off || rts != c.rts)) {
				t.Fatalf("%s: OffsetForTimestamp(t0+%d) = %d, t0+%d, %v, %v; want %d, t0+%d, %v",
					when, c.ts-t0, off, rts-t0, found, err, c.off, c.rts-t0, c.found)
			}
		}
		if off, ts, err := p.MaxTimestamp(); err != nil || off != 7 || ts != t0+70 {
			t.Fatalf("%s: MaxTimestamp = %d, t0+%d, %v; want 7, t0+70", when, off, ts-t0, err)
		}
		for _, topic := range []string{"ct", "signed"} {
			data, err := r.f.View().Partition(topic, 0).Read(0, math.MaxInt32)
			if err != nil {
				t.Fatal(err)
			}
			batches, err := record.Split(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range batches {
				h, recs, err := record.Records(b)
				if err != nil {
					t.Fatalf("%s: stored batch of %s: %v", when, topic, err)
				}
				if _, err := record.ValidateStored(b); err != nil {
					t.Fatalf("%s: stored batch of %s: %v", when, topic, err)
				}
				want := int64(-1)
				for _, rec := range recs {
					want = max(want, rec.Timestamp)
				}
				if h.MaxTimestamp != want || h.LogAppendTime() {
					t.Fatalf("%s: stored batch of %s at %d: header max timestamp %d (LogAppendTime %v), records' largest %d",
						when, topic, h.BaseOffset, h.MaxTimestamp, h.LogAppendTime(), want)
				}
			}
		}
	}
	check("after the produces")
	r.checkAll(r.f, "after the produces") // the restamped bytes are what the app hash proves
	if err := r.f.Close(); err != nil {
		t.Fatal(err)
	}
	r.f = open(t, dir)
	check("after a restart")
}

// TestLogAppendTimeStored (issue 27): on a LogAppendTime topic the stored
// batch is marked LogAppendTime with the block time as its max timestamp,
// which consumers read as every record's timestamp, and the produce answers
// that time; a producer that sets the LogAppendTime type itself is refused
// with INVALID_TIMESTAMP for every record, as Kafka's
// LogValidator.validateTimestamp refuses it (on a CreateTime topic only
// when its records have no timestamp; otherwise it is stored CreateTime);
// and a record without a timestamp (-1) is not held to
// message.timestamp.difference.max.ms, which Kafka checks only for others.
func TestLogAppendTimeStored(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	defer d.f.Close()
	d.block(0, topics.CreateTopic{Name: "lat", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "message.timestamp.type", Value: "LogAppendTime"}}},
		topics.CreateTopic{Name: "ct", Partitions: 1, ReplicationFactor: -1,
			Configs: []topics.ConfigEntry{{Name: "message.timestamp.difference.max.ms", Value: "1000"}}})
	build := func(h record.Header, n int) []byte {
		t.Helper()
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Value: []byte("v")}
		}
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = -1, -1, -1
		b, err := record.Build(h, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const latAttr = 0x08
	stored := func(topic string, off int64) record.Header {
		t.Helper()
		data, err := d.f.View().Partition(topic, 0).Read(off, math.MaxInt32)
		if err != nil {
			t.Fatal(err)
		}
		h, err := record.ValidateStored(data[:mustHeader(t, data).Size()])
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	r := d.block(10, topics.Produce{Topic: "lat", Partition: 0, Records: build(record.Header{FirstTimestamp: t0 - 86_400_000}, 3)})[0]
	if r.Code != 0 || r.LogAppendTime != d.now {
		t.Fatalf("produce to the LogAppendTime topic: %+v, want log_append_time %d", r, d.now)
	}
	if h := stored("lat", 0); !h.LogAppendTime() || h.MaxTimestamp != d.now || h.FirstTimestamp != d.now {
		t.Fatalf("stored batch: %+v; want LogAppendTime with max (and first) timestamp %d", h, d.now)
	}
	_, recs, err := record.Records(mustRead(t, d.f, "lat"))
	if err != nil || len(recs) != 3 || recs[2].Timestamp != d.now {
		t.Fatalf("records of the stored batch: %+v, %v; want every timestamp %d", recs, err, d.now)
	}
	lat := build(record.Header{Attributes: latAttr, FirstTimestamp: t0, MaxTimestamp: t0 + 5}, 2)
	if r := d.block(10, topics.Produce{Topic: "lat", Partition: 0, Records: lat})[0]; r.Code != kerr.InvalidTimestamp.Code || len(r.RecordErrors) != 2 {
		t.Fatalf("a producer's LogAppendTime batch to a LogAppendTime topic: code %d, %d record errors; want INVALID_TIMESTAMP for both records", r.Code, len(r.RecordErrors))
	}

	noTs := build(record.Header{FirstTimestamp: -1}, 1) // its record has timestamp -1 (delta 0)
	if r := d.block(10, topics.Produce{Topic: "ct", Partition: 0, Records: noTs})[0]; r.Code != 0 {
		t.Fatalf("a record without a timestamp on a topic bounding timestamps: %+v, want it written", r)
	}
	if r := d.block(10, topics.Produce{Topic: "ct", Partition: 0, Records: build(record.Header{FirstTimestamp: d.now - 5000}, 1)})[0]; r.Code != kerr.InvalidTimestamp.Code {
		t.Fatalf("a record 5 s before the block time with a 1 s bound: %+v, want INVALID_TIMESTAMP", r)
	}
	latNone := build(record.Header{Attributes: latAttr, FirstTimestamp: -1, MaxTimestamp: -1}, 1)
	if r := d.block(10, topics.Produce{Topic: "ct", Partition: 0, Records: latNone})[0]; r.Code != kerr.InvalidTimestamp.Code {
		t.Fatalf("a producer's LogAppendTime batch without a timestamp to a CreateTime topic: %+v, want INVALID_TIMESTAMP", r)
	}
	latTs := build(record.Header{Attributes: latAttr, FirstTimestamp: d.now, MaxTimestamp: d.now + 20}, 1)
	if r := d.block(10, topics.Produce{Topic: "ct", Partition: 0, Records: latTs})[0]; r.Code != 0 || r.BaseOffset != 1 {
		t.Fatalf("a producer's LogAppendTime batch with a timestamp to a CreateTime topic: %+v, want it written at 1", r)
	}
	if h := stored("ct", 1); h.LogAppendTime() || h.MaxTimestamp != d.now-10+20 {
		t.Fatalf("stored: %+v; want CreateTime with the timestamp its records were sent with (%d)", h, d.now-10+20)
	}
	d.replay()
}

func mustHeader(t *testing.T, b []byte) record.Header {
	t.Helper()
	h, err := record.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// mustRead returns the first stored batch of partition 0 of topic.
func mustRead(t *testing.T, f *FSM, topic string) []byte {
	t.Helper()
	data, err := f.View().Partition(topic, 0).Read(0, math.MaxInt32)
	if err != nil {
		t.Fatal(err)
	}
	return data[:mustHeader(t, data).Size()]
}
