package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

// newCluster starts a one-broker kfake cluster with seed topics of
// partitions partitions, closed when the test ends.
func newCluster(t *testing.T, partitions int32, topics ...string) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// testConfig is a small, fast run of scenario s against brokers.
func testConfig(brokers []string, s Scenario) Config {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Brokers = s, brokers
	cfg.Topic = "bench"
	cfg.RecordSize = 100
	cfg.Producers, cfg.Consumers = 2, 2
	cfg.Warmup, cfg.Duration = 0, 0
	cfg.Timeout = 10 * time.Second
	return cfg
}

func run(t *testing.T, cfg Config) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	rep, err := Run(ctx, cfg)
	t.Logf("%s: %v", cfg.CommandLine(), time.Since(begin))
	if err != nil {
		t.Fatalf("Run(%s): %v", cfg.CommandLine(), err)
	}
	return rep
}

// Produce N records, then consume them: both reports count exactly N
// records of N*(key+value) bytes, with no errors.
func TestProduceThenConsume(t *testing.T) {
	brokers := newCluster(t, 0)
	cfg := testConfig(brokers, Produce)
	cfg.Create, cfg.Partitions = true, 4
	cfg.Records = 3000
	cfg.KeySize, cfg.Keys = 6, 50
	var progress bytes.Buffer
	cfg.Progress, cfg.ProgressInterval = &progress, time.Millisecond
	rep := run(t, cfg)
	if rep.Records != 3000 || rep.Bytes != 3000*106 || rep.Errors != 0 || rep.Partitions != 4 {
		t.Fatalf("produce report: records %d bytes %d errors %d (%s) partitions %d; want 3000, %d, 0, 4",
			rep.Records, rep.Bytes, rep.Errors, rep.FirstError, rep.Partitions, 3000*106)
	}
	if rep.Latency == nil || rep.Latency.P50 <= 0 || rep.Latency.P50 > rep.Latency.P99 || rep.Latency.P99 > rep.Latency.Max {
		t.Errorf("produce latency %+v", rep.Latency)
	}
	if rep.RecordsPerS <= 0 || rep.MBPerS <= 0 || rep.MiBPerS >= rep.MBPerS || rep.DurationS <= 0 {
		t.Errorf("rates: %v records/s, %v MB/s, %v MiB/s over %v s", rep.RecordsPerS, rep.MBPerS, rep.MiBPerS, rep.DurationS)
	}
	if !strings.Contains(progress.String(), "rec/s") {
		t.Errorf("no progress line written:\n%s", progress.String())
	}

	ccfg := testConfig(brokers, Consume)
	ccfg.Consumers = 3
	crep := run(t, ccfg)
	if crep.Records != 3000 || crep.Bytes != 3000*106 || crep.Errors != 0 || crep.Consumers != 3 {
		t.Fatalf("consume report: records %d bytes %d errors %d (%s) consumers %d", crep.Records, crep.Bytes,
			crep.Errors, crep.FirstError, crep.Consumers)
	}
	if crep.TimeToFirstRecordMS == nil || *crep.TimeToFirstRecordMS <= 0 || crep.RecordsPerS <= 0 {
		t.Errorf("consume: time to first record %v, %v records/s", crep.TimeToFirstRecordMS, crep.RecordsPerS)
	}

	// --records stops early; a wrong --record-size is an error on every
	// record; a group reads the whole topic too.
	ccfg.Records, ccfg.RecordSize = 500, 99
	crep = run(t, ccfg)
	if crep.Records != 500 || crep.Errors != 500 || !strings.Contains(crep.FirstError, "want --record-size 99") {
		t.Fatalf("consume 500 with the wrong size: records %d errors %d first %q", crep.Records, crep.Errors, crep.FirstError)
	}
	ccfg.Records, ccfg.RecordSize, ccfg.Group = 0, 100, "bench-group"
	crep = run(t, ccfg)
	if crep.Records != 3000 || crep.Errors != 0 {
		t.Fatalf("group consume: records %d errors %d (%s)", crep.Records, crep.Errors, crep.FirstError)
	}
}

// An empty topic is read at once: zero records, no first record.
func TestConsumeEmptyTopic(t *testing.T) {
	cfg := testConfig(newCluster(t, 2, "bench"), Consume)
	rep := run(t, cfg)
	if rep.Records != 0 || rep.TimeToFirstRecordMS != nil || rep.Partitions != 2 {
		t.Fatalf("empty topic: %+v", rep)
	}
}

// End to end at a fixed rate: the pacer sends exactly rate*duration
// records, every one is consumed, and the e2e latency is measured on them.
func TestEndToEndWithRate(t *testing.T) {
	cfg := testConfig(newCluster(t, 3, "bench"), EndToEnd)
	cfg.Rate, cfg.Duration, cfg.Warmup = 2000, 700*time.Millisecond, 300*time.Millisecond
	rep := run(t, cfg)
	// Records intended in [warmup, warmup+duration) at 2000/s: 1400.
	if rep.Records < 1399 || rep.Records > 1401 || rep.Errors != 0 {
		t.Fatalf("e2e at 2000/s for 0.7 s: %d records, %d errors (%s); want 1400", rep.Records, rep.Errors, rep.FirstError)
	}
	if rep.ConsumedRecords != rep.Records {
		t.Errorf("consumed %d of %d measured records", rep.ConsumedRecords, rep.Records)
	}
	if rep.RecordsPerS < 1500 || rep.RecordsPerS > 2100 {
		t.Errorf("records/s %v at a target of 2000", rep.RecordsPerS)
	}
	if l := rep.E2ELatency; l == nil || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P999 || l.Max > 5000 {
		t.Errorf("e2e latency %+v", l)
	}
	if rep.Latency == nil {
		t.Error("no produce latency")
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "topic", "record_size", "producers", "consumers", "partitions", "acks",
		"duration_s", "records", "bytes", "records_per_s", "mb_per_s", "latency_ms", "e2e_latency_ms", "errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report lacks %q: %s", k, b)
		}
	}
	if e2e, _ := m["e2e_latency_ms"].(map[string]any); e2e["p999"] == nil {
		t.Errorf("e2e_latency_ms lacks p999: %s", b)
	}
}

// With a consumer group, e2e waits for the group to hold every partition
// before it sends, and reads only this run's records.
func TestEndToEndGroup(t *testing.T) {
	brokers := newCluster(t, 2, "bench")
	pre := testConfig(brokers, Produce)
	pre.Records = 100
	run(t, pre) // older records that e2e must not read

	cfg := testConfig(brokers, EndToEnd)
	cfg.Group, cfg.Records, cfg.Acks, cfg.Compression = "e2e-group", 400, "1", "lz4"
	rep := run(t, cfg)
	if rep.Records != 400 || rep.ConsumedRecords != 400 || rep.Errors != 0 || rep.E2ELatency == nil {
		t.Fatalf("group e2e: records %d consumed %d errors %d (%s)", rep.Records, rep.ConsumedRecords, rep.Errors, rep.FirstError)
	}
}

// Cancelling the context stops the run early and still reports what was
// done, with Interrupted set and no error.
func TestInterruptReports(t *testing.T) {
	cfg := testConfig(newCluster(t, 2, "bench"), Produce)
	cfg.Duration, cfg.Rate = time.Minute, 5000
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Progress, cfg.ProgressInterval = writerFunc(func(p []byte) {
		if strings.Contains(string(p), "rec/s") {
			cancel() // after the first progress line
		}
	}), 200*time.Millisecond
	done := make(chan struct{})
	var (
		rep Report
		err error
	)
	go func() {
		defer close(done)
		rep, err = Run(ctx, cfg)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("Run did not return within 15 s of the interrupt")
	}
	if err != nil || !rep.Interrupted || rep.Records == 0 || rep.Errors != 0 {
		t.Fatalf("interrupted run: err %v, interrupted %v, records %d, errors %d (%s)",
			err, rep.Interrupted, rep.Records, rep.Errors, rep.FirstError)
	}
	if rep.DurationS > 30 {
		t.Fatalf("duration %v s: the run went on after the interrupt", rep.DurationS)
	}
}

// A missing topic fails without --create; --create with more partitions
// than the topic has fails clearly; a bad Config never reaches a broker.
func TestSetupErrors(t *testing.T) {
	brokers := newCluster(t, 2, "small")
	cfg := testConfig(brokers, Produce)
	cfg.Records = 1
	cfg.Topic = "absent"
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrTopicNotFound) || !strings.Contains(err.Error(), "--create") {
		t.Errorf("missing topic: %v", err)
	}
	cfg.Topic, cfg.Create, cfg.Partitions = "small", true, 8
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrTooFewPartitions) || !strings.Contains(err.Error(), "2 partitions") {
		t.Errorf("too few partitions: %v", err)
	}
	cfg.RecordSize = 0
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("record size 0: %v", err)
	}
}

// writerFunc is an io.Writer calling a function.
type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// Commit: a member commits each record it reads before the next, so the
// group's committed offsets add up to exactly the records the report
// counts; a second run goes on from them; a run that outlasts the topic
// stalls with what it committed reported.
func TestCommitEveryRecord(t *testing.T) {
	brokers := newCluster(t, 0)
	cfg := testConfig(brokers, Produce)
	cfg.Create, cfg.Partitions, cfg.Records = true, 3, 300
	run(t, cfg)

	committed := func() int64 {
		t.Helper()
		cl, err := newClient(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		or, err := kadm.NewClient(cl).FetchOffsets(ctx, DefaultCommitGroup)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		or.Each(func(o kadm.OffsetResponse) { sum += o.At })
		return sum
	}

	ccfg := testConfig(brokers, Commit)
	ccfg.Consumers, ccfg.Records = 1, 100
	var progress bytes.Buffer
	ccfg.Progress, ccfg.ProgressInterval = &progress, time.Millisecond
	rep := run(t, ccfg)
	if rep.Records != 100 || rep.Bytes != 100*100 || rep.Errors != 0 || rep.Group != DefaultCommitGroup {
		t.Fatalf("commit report: records %d bytes %d errors %d (%s) group %q", rep.Records, rep.Bytes, rep.Errors, rep.FirstError, rep.Group)
	}
	if l := rep.CommitLatency; l == nil || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max || rep.RecordsPerS <= 0 || rep.Latency != nil {
		t.Fatalf("commit figures: latency %+v, %v commits/s, produce latency %+v", l, rep.RecordsPerS, rep.Latency)
	}
	if got := committed(); got != 100 {
		t.Fatalf("the group committed offsets adding up to %d, want 100", got)
	}
	if !strings.Contains(progress.String(), "commit") {
		t.Errorf("no commit progress line:\n%s", progress.String())
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "commit latency") ||
		strings.Contains(table.String(), "producers") {
		t.Errorf("table (%v):\n%s", err, table.String())
	}

	ccfg.Progress, ccfg.Records = nil, 50
	if rep = run(t, ccfg); rep.Records != 50 || committed() != 150 {
		t.Fatalf("second run: %d records, the group at %d, want 50 and 150", rep.Records, committed())
	}

	// The stall clock runs from the start, group join included: kfake
	// takes up to about 5 s to let a new member in after the last run's
	// left, so the timeout is longer than that.
	ccfg.Records, ccfg.Timeout = 1000, 8*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	rep, err := Run(ctx, ccfg)
	if !errors.Is(err, ErrStalled) || rep.Records != 150 || committed() != 300 {
		t.Fatalf("a run past the end: err %v, %d records, the group at %d; want ErrStalled, 150, 300", err, rep.Records, committed())
	}
}
