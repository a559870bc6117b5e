package cli

import (
	"context"
	"strings"
	"testing"
	"time"
)

// benchJSON is the part of the bench report the tests read.
type benchJSON struct {
	Scenario    string  `json:"scenario"`
	Command     string  `json:"command"`
	Topic       string  `json:"topic"`
	RecordSize  int     `json:"record_size"`
	Producers   int     `json:"producers"`
	Consumers   int     `json:"consumers"`
	Partitions  int     `json:"partitions"`
	Acks        string  `json:"acks"`
	DurationS   float64 `json:"duration_s"`
	Records     int64   `json:"records"`
	Bytes       int64   `json:"bytes"`
	RecordsPerS float64 `json:"records_per_s"`
	MBPerS      float64 `json:"mb_per_s"`
	Latency     *struct {
		P50, P99, P999, Max *float64
	} `json:"latency_ms"`
	E2ELatency *struct {
		P50, P99, P999, Max *float64
	} `json:"e2e_latency_ms"`
	CommitLatency *struct {
		P50, P99, P999, Max *float64
	} `json:"commit_latency_ms"`
	Group               string   `json:"group"`
	ConsumedRecords     int64    `json:"consumed_records"`
	TimeToFirstRecordMS *float64 `json:"time_to_first_record_ms"`
	Errors              int64    `json:"errors"`
	Interrupted         bool     `json:"interrupted"`
}

// bench produce then bench consume through the CLI: the JSON reports
// count the 2000 records and their bytes, and the command line in the
// report runs again to the same report shape.
func TestBenchProduceConsume(t *testing.T) {
	c := newTestCluster(t)
	r := c.ok("", "bench", "produce", "--create", "--partitions", "3", "--records", "2000",
		"--warmup", "0s", "--acks", "-1", "--output", "json")
	var p benchJSON
	decodeJSON(t, r.stdout, &p)
	if p.Scenario != "produce" || p.Topic != "stele-bench" || p.Records != 2000 || p.Bytes != 2000*1024 ||
		p.Partitions != 3 || p.Producers != 4 || p.Acks != "all" || p.RecordSize != 1024 || p.Errors != 0 {
		t.Fatalf("produce report: %+v", p)
	}
	if p.Latency == nil || p.Latency.P50 == nil || p.Latency.P999 == nil || p.Latency.Max == nil ||
		p.RecordsPerS <= 0 || p.MBPerS <= 0 || p.E2ELatency != nil {
		t.Fatalf("produce figures: %s", r.stdout)
	}
	if !strings.HasPrefix(p.Command, "stele bench produce ") || !strings.Contains(p.Command, "--records 2000") ||
		!strings.Contains(p.Command, "--duration 0s") {
		t.Errorf("command %q", p.Command)
	}

	r = c.ok("", "bench", "consume", "--consumers", "2", "--output", "json")
	var co benchJSON
	decodeJSON(t, r.stdout, &co)
	if co.Scenario != "consume" || co.Records != 2000 || co.Bytes != 2000*1024 || co.Consumers != 2 ||
		co.Errors != 0 || co.TimeToFirstRecordMS == nil || co.Latency != nil {
		t.Fatalf("consume report: %s", r.stdout)
	}

	// The report's command line reproduces the run (here: 2000 more).
	args := strings.Fields(strings.TrimPrefix(p.Command, "stele "))
	r = c.ok("", append(args, "--output", "json", "--quiet")...)
	var again benchJSON
	decodeJSON(t, r.stdout, &again)
	if again.Command != p.Command || again.Records != 2000 {
		t.Errorf("rerun of %q gave %q, %d records", p.Command, again.Command, again.Records)
	}

	// bench commit: a member of the default group commits each record.
	r = c.ok("", "bench", "commit", "--records", "20", "--warmup", "0s", "--output", "json")
	var cm benchJSON
	decodeJSON(t, r.stdout, &cm)
	if cm.Scenario != "commit" || cm.Records != 20 || cm.Group != "stele-bench-commit" || cm.Errors != 0 ||
		cm.CommitLatency == nil || cm.CommitLatency.P50 == nil || cm.Latency != nil || cm.Producers != 0 ||
		!strings.Contains(cm.Command, "--group stele-bench-commit") {
		t.Fatalf("commit report: %s", r.stdout)
	}

	// The table names each figure.
	r = c.ok("", "bench", "consume", "--records", "10")
	for _, want := range []string{"throughput", "records/s", "MB/s", "MiB/s", "first record", "errors"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
}

// bench e2e at a rate: producers and consumers at once, the e2e latency
// reported, a progress line a second on a stderr that is not a terminal.
func TestBenchEndToEnd(t *testing.T) {
	c := newTestCluster(t, "lat")
	r := c.ok("", "bench", "e2e", "--topic", "lat", "--rate", "1000", "--duration", "1200ms", "--warmup", "0s",
		"--record-size", "100", "--producers", "2", "--output", "json")
	var e benchJSON
	decodeJSON(t, r.stdout, &e)
	if e.Scenario != "e2e" || e.Records < 1195 || e.Records > 1201 || e.ConsumedRecords != e.Records || e.Errors != 0 {
		t.Fatalf("e2e report: %s", r.stdout)
	}
	if e.E2ELatency == nil || e.E2ELatency.P99 == nil || *e.E2ELatency.P99 <= 0 {
		t.Fatalf("e2e latency missing: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "rec/s") || !strings.Contains(r.stderr, "e2e p99") || strings.Contains(r.stderr, "\r") {
		t.Errorf("progress on stderr: %q", r.stderr)
	}
}

// Usage errors: e2e without --rate, a bad --acks, a consume-only flag on
// produce; a missing topic is a failure naming --create.
func TestBenchErrors(t *testing.T) {
	c := newTestCluster(t)
	wantFailure(t, c.run("", "bench", "e2e"), ExitUsage, "e2e needs --rate")
	wantFailure(t, c.run("", "bench", "produce", "--acks", "2"), ExitUsage, "must be one of")
	wantFailure(t, c.run("", "bench", "produce", "--group", "g"), ExitUsage, "unknown flag: --group")
	wantFailure(t, c.run("", "bench", "produce", "--record-size", "0"), ExitUsage, "record size 0")
	wantFailure(t, c.run("", "bench", "commit", "--group", ""), ExitUsage, "commit needs a --group")
	wantFailure(t, c.run("", "bench", "commit", "--rate", "5"), ExitUsage, "unknown flag: --rate")
	wantFailure(t, c.run("", "bench", "produce", "--records", "5", "--quiet"), ExitFailure,
		`topic "stele-bench" does not exist`, "--create")
}

// Cancelling the command (Ctrl-C) stops the run and still prints the
// report of what was done, exit 0.
func TestBenchInterrupted(t *testing.T) {
	c := newTestCluster(t, "stele-bench")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r := c.runCtx(ctx, "", "bench", "produce", "--rate", "2000", "--duration", "1m", "--warmup", "0s",
		"--output", "json", "--quiet")
	if r.code != ExitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var p benchJSON
	decodeJSON(t, r.stdout, &p)
	if !p.Interrupted || p.Records == 0 || p.DurationS > 5 || !strings.Contains(r.stderr, "Interrupted") {
		t.Fatalf("interrupted report: %s\nstderr: %s", r.stdout, r.stderr)
	}
}
