package bench

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run. Its JSON form is stable: fields are only
// ever added, never renamed or removed.
//
// Records, Bytes and the rates count only measured records: for Produce and
// EndToEnd the records acknowledged by the broker whose intended send time
// fell after the warmup; for Consume the records read; for Commit the
// records whose offsets were committed, by a commit sent after the warmup.
// Bytes are key plus value bytes (not the wire size); MB is 10^6 bytes,
// MiB 2^20.
type Report struct {
	Scenario Scenario `json:"scenario"`
	// Command is the `stele bench` command line that reproduces the run.
	Command     string `json:"command"`
	Topic       string `json:"topic"`
	Partitions  int    `json:"partitions"`
	RecordSize  int    `json:"record_size"`
	KeySize     int    `json:"key_size"`
	Producers   int    `json:"producers"`
	Consumers   int    `json:"consumers"`
	Acks        string `json:"acks,omitempty"`
	Compression string `json:"compression,omitempty"`
	// TargetRate is the records/s asked for; 0 is open loop.
	TargetRate int64   `json:"target_rate"`
	WarmupS    float64 `json:"warmup_s"`
	// DurationS is the measured span: from the end of the warmup to the
	// last acknowledgement (Produce, EndToEnd) or the last commit's answer
	// (Commit), or from the start of reading to the last record read
	// (Consume).
	DurationS   float64 `json:"duration_s"`
	Records     int64   `json:"records"`
	Bytes       int64   `json:"bytes"`
	RecordsPerS float64 `json:"records_per_s"`
	MBPerS      float64 `json:"mb_per_s"`
	MiBPerS     float64 `json:"mib_per_s"`
	// Latency is the produce latency, from each record's intended send
	// time to its acknowledgement (Produce, EndToEnd).
	Latency *Latency `json:"latency_ms,omitempty"`
	// ConsumedRecords counts the measured records the consumers read
	// (EndToEnd; Consume reports them as Records).
	ConsumedRecords int64 `json:"consumed_records"`
	// E2ELatency is from each record's intended send time to its receipt
	// by a consumer (EndToEnd).
	E2ELatency *Latency `json:"e2e_latency_ms,omitempty"`
	// Group is the consumer group the Commit scenario commits in.
	Group string `json:"group,omitempty"`
	// CommitLatency is from sending each synchronous OffsetCommit to its
	// answer (Commit); Records then counts the records committed.
	CommitLatency *Latency `json:"commit_latency_ms,omitempty"`
	// TimeToFirstRecordMS is from the start of reading to the first record
	// (Consume; absent when nothing was read).
	TimeToFirstRecordMS *float64 `json:"time_to_first_record_ms,omitempty"`
	// Errors counts records not acknowledged, records read with the wrong
	// size, and fetch errors; FirstError is the first of them.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Interrupted is true when the run was cancelled before its end.
	Interrupted bool `json:"interrupted"`
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// latencyOf summarises a histogram of nanoseconds; nil when it is empty.
func latencyOf(h *Histogram) *Latency {
	if h.Count() == 0 {
		return nil
	}
	return &Latency{
		P50:  nanosToMillis(h.Quantile(0.50)),
		P99:  nanosToMillis(h.Quantile(0.99)),
		P999: nanosToMillis(h.Quantile(0.999)),
		Max:  nanosToMillis(h.Max()),
	}
}

// nanosToMillis converts to milliseconds rounded to the microsecond.
func nanosToMillis(ns int64) float64 {
	return math.Round(float64(ns)/1e3) / 1e3
}

// setRates fills the duration and the rates from Records, Bytes and d.
func (r *Report) setRates(d time.Duration) {
	r.DurationS = round3(d.Seconds())
	if d <= 0 {
		return
	}
	s := d.Seconds()
	r.RecordsPerS = round3(float64(r.Records) / s)
	r.MBPerS = round3(float64(r.Bytes) / s / 1e6)
	r.MiBPerS = round3(float64(r.Bytes) / s / (1 << 20))
}

func round3(f float64) float64 { return math.Round(f*1e3) / 1e3 }

// WriteTable writes r for people: one figure a line, the command line first.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...))
	}
	row("command", "%s", r.Command)
	row("scenario", "%s", r.Scenario)
	row("topic", "%s (%d partitions)", r.Topic, r.Partitions)
	row("record size", "%d B value, %d B key", r.RecordSize, r.KeySize)
	if r.Scenario != Consume && r.Scenario != Commit {
		row("producers", "%d (acks %s, compression %s)", r.Producers, r.Acks, r.Compression)
		if r.TargetRate > 0 {
			row("target rate", "%d records/s", r.TargetRate)
		} else {
			row("target rate", "open loop")
		}
	}
	if r.Scenario == Commit {
		row("consumers", "%d in group %s, each committing every record synchronously", r.Consumers, r.Group)
	} else if r.Scenario != Produce {
		row("consumers", "%d", r.Consumers)
	}
	if r.WarmupS > 0 {
		row("duration", "%.3f s measured, after %.3f s of warmup", r.DurationS, r.WarmupS)
	} else {
		row("duration", "%.3f s", r.DurationS)
	}
	row("records", "%d", r.Records)
	row("bytes", "%d", r.Bytes)
	row("throughput", "%.1f records/s, %.2f MB/s (%.2f MiB/s)", r.RecordsPerS, r.MBPerS, r.MiBPerS)
	if r.Latency != nil {
		row("produce latency", "%s", r.Latency)
	}
	if r.CommitLatency != nil {
		row("commit latency", "%s", r.CommitLatency)
	}
	if r.Scenario == EndToEnd {
		row("consumed", "%d records", r.ConsumedRecords)
		if r.E2ELatency != nil {
			row("e2e latency", "%s", r.E2ELatency)
		}
	}
	if r.TimeToFirstRecordMS != nil {
		row("first record", "after %.3f ms", *r.TimeToFirstRecordMS)
	}
	row("errors", "%d", r.Errors)
	if r.FirstError != "" {
		row("first error", "%s", r.FirstError)
	}
	if r.Interrupted {
		row("interrupted", "yes: the figures cover the run until it was stopped")
	}
	return tw.Flush()
}

// String formats l as "p50 1.234 ms  p99 ...".
func (l *Latency) String() string {
	return fmt.Sprintf("p50 %.3f ms  p99 %.3f ms  p99.9 %.3f ms  max %.3f ms", l.P50, l.P99, l.P999, l.Max)
}
