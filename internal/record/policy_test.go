package record

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Policy.Apply adds the checks of LogValidator.validateRecord that depend on
// topic settings, and Kafka's timestamp rewrites.
func TestPolicyApply(t *testing.T) {
	const now = 1_700_000_000_000
	build := func(first int64, recs []Record, attrs int16) []byte {
		return mustBuild(t, Header{FirstTimestamp: first, Attributes: attrs}, recs)
	}
	recs := func() []Record { return testRecords(4) } // record 1 has a null key

	b := build(now, recs(), 0)
	if _, err := (Policy{MaxBatchBytes: len(b) - 1}).Apply(b); !errors.Is(err, ErrTooLarge) || ErrorCode(err) != kerr.MessageTooLarge.Code {
		t.Errorf("batch over max.message.bytes: %v", err)
	}
	if _, err := (Policy{MaxBatchBytes: len(b)}).Apply(b); err != nil {
		t.Errorf("batch at max.message.bytes: %v", err)
	}

	_, err := Policy{Compacted: true}.Apply(build(now, recs(), 0))
	var re *RecordError
	if !errors.As(err, &re) || re.Index != 1 || ErrorCode(err) != kerr.InvalidRecord.Code {
		t.Errorf("null key on a compacted topic: %v, want a RecordError for record 1", err)
	}

	early := Policy{Now: now, TimestampBeforeMaxMs: 1000}
	if _, err := early.Apply(build(now-1000, recs(), 0)); err != nil {
		t.Errorf("timestamp exactly before.max.ms early: %v", err)
	}
	_, err = early.Apply(build(now-1001, recs(), 0))
	if !errors.As(err, &re) || re.Index != 0 || ErrorCode(err) != kerr.InvalidTimestamp.Code {
		t.Errorf("timestamp too early: %v", err)
	}
	late := Policy{Now: now, TimestampAfterMaxMs: 5}
	// Record i is at first+3i: record 2 is 6 ms late.
	if _, err = late.Apply(build(now, recs(), 0)); !errors.As(err, &re) || re.Index != 2 || !errors.Is(err, ErrInvalidTimestamp) {
		t.Errorf("timestamp too late: %v", err)
	}
	extreme := Policy{Now: now, TimestampBeforeMaxMs: 1, TimestampAfterMaxMs: 1}
	if _, err := extreme.Apply(build(-1<<63, recs()[:1], 0)); !errors.Is(err, ErrInvalidTimestamp) {
		t.Errorf("timestamp MinInt64: %v", err)
	}
	noTime := recs()[:1]
	if _, err := extreme.Apply(build(-1, noTime, 0)); err != nil {
		t.Errorf("record without a timestamp (-1): %v", err)
	}

	// A producer may not set LogAppendTime, on a LogAppendTime topic or on
	// records without timestamps.
	lat := build(now, recs(), attrLogAppendTime)
	if _, err := (Policy{LogAppendTime: true, Now: now}).Apply(lat); !errors.Is(err, ErrInvalidTimestamp) {
		t.Errorf("producer LogAppendTime on a LogAppendTime topic: %v", err)
	}
	lat = build(now, recs(), attrLogAppendTime)
	SetLogAppendTime(lat, -1)
	if _, err := (Policy{Now: now}).Apply(lat); !errors.Is(err, ErrInvalidTimestamp) {
		t.Errorf("producer LogAppendTime, no timestamps: %v", err)
	}

	// On error the batch is unchanged.
	b = build(now-5000, recs(), 0)
	before := bytes.Clone(b)
	if _, err := early.Apply(b); err == nil || !bytes.Equal(b, before) {
		t.Errorf("a refused batch was changed (err %v)", err)
	}
}

func TestPolicyRewrites(t *testing.T) {
	const now = 1_700_000_000_000
	// LogAppendTime topic: stamped with Now.
	b := mustBuild(t, Header{FirstTimestamp: 5}, testRecords(3))
	h, err := Policy{LogAppendTime: true, Now: now}.Apply(b)
	if err != nil || !h.LogAppendTime() || h.MaxTimestamp != now {
		t.Fatalf("LogAppendTime topic: %+v, %v", h, err)
	}
	if _, recs, err := Records(b); err != nil || recs[2].Timestamp != now {
		t.Fatalf("after Apply: %v %v", recs, err)
	}

	// CreateTime topic: a wrong MaxTimestamp is corrected to the largest
	// record timestamp, as Kafka does.
	b = mustBuild(t, Header{FirstTimestamp: 100}, testRecords(3)) // records at 100, 103, 106
	SetMaxTimestamp(b, 99999)
	h, err = Policy{Now: now}.Apply(b)
	if err != nil || h.MaxTimestamp != 106 || h.LogAppendTime() {
		t.Fatalf("CreateTime topic: %+v, %v", h, err)
	}
	if _, err := Validate(b); err != nil {
		t.Fatal(err)
	}
	// A correct batch is left as it is.
	before := bytes.Clone(b)
	if _, err := (Policy{Now: now}).Apply(b); err != nil || !bytes.Equal(before, b) {
		t.Fatalf("a correct batch was rewritten (err %v)", err)
	}
}
