package chaos

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
)

// The malformed-traffic test of issue 7 ("bad input at scale"): thousands
// of random, truncated and corrupted frames sent to a live broker while
// well-behaved clients produce and consume through it.
//
// Reference: DESIGN.md §6, "bad input of any kind ... never crashes a broker
// or loses data"; docs/kafka-api.md, "a frame over socket.request.max.bytes
// (100 MiB), a frame that does not decode, or an API or version that is not
// served closes the connection ... and is counted in
// stele_kafka_connections_closed_on_bad_input_total"; KIP-511, ApiVersions
// at an unknown version is answered with UNSUPPORTED_VERSION.
const (
	// malNodes is the cluster's size. One broker is what the issue asks
	// for, but harness.New refuses a one-node cluster (it requires every
	// node to be named in another's peers), so all four brokers of a
	// cluster are attacked at once.
	malNodes        = 4
	malTopic        = "malformed"
	malParts        = 4
	malAttackers    = 4
	malAttempts     = 1500             // connections (or HTTP requests) per attacker
	malAttackFor    = 50 * time.Second // the attack stops at this bound even if attempts remain
	maxRequestBytes = 100 << 20        // socket.request.max.bytes
	// mustWait is how long a connection the docs say must be closed (or
	// answered) may take: generous, since other tests may share the cores.
	mustWait = 10 * time.Second
	// ackGapLimit is the longest the well-behaved producers may go without
	// an acknowledgement while the attack runs.
	ackGapLimit = 30 * time.Second
)

// TestMalformedTraffic attacks every broker of a live cluster with
// malformed Kafka frames and bad HTTP requests (see attack) while the
// chaos run's clients (idempotent and transactional producers, assigned
// consumers, a consumer group) work through them, then requires: every
// broker is still running and healthy; every connection the docs say must
// be closed was closed, and every answer carries a correlation id that was
// sent, in order; the bad-input metric went up by at least those closures;
// the producers were acknowledged during and after the attack and never
// failed; the clients' history passes Check (nothing lost, duplicated,
// skipped or read out of order); every broker holds the same committed
// records and reaches the same app hash.
//
// Rerun a failure with STELE_CHAOS_SEED (the attack's frames) and
// STELE_FAULT_SEED (the ports); the last frames of each attacker are saved
// when it fails.
func TestMalformedTraffic(t *testing.T) {
	seed := runSeed(t)
	t.Logf("malformed-traffic seed %d (rerun: STELE_CHAOS_SEED=%d go test ./test/chaos -run TestMalformedTraffic -count=1 -v)", seed, seed)
	began := time.Now()

	c := harness.New(t, harness.Options{Nodes: malNodes})
	c.StartAll()
	seeds := c.KafkaAddrs(c.All()...)
	for topic, parts := range map[string]int32{sendTopic: sendParts, txnTopic: txnParts, malTopic: malParts} {
		harness.CreateTopic(t, seeds, topic, parts, nil)
	}
	closedBefore, _ := badInputClosures(t, c)

	// The well-behaved clients are the chaos run's (workload_test.go), and
	// so is the check of what they did (Check).
	rec := NewRecorder(seed, began)
	w := startWorkload(seeds, seed, rec)
	defer w.stopAll()
	c.Eventually(30*time.Second, "both producers acknowledged before the attack", func() error { return ackedBetween(rec, began, time.Time{}, time.Now(), 1) })

	a := newAttack(t, c, seed)
	a.holdShortFrames(t)
	start := time.Now()
	a.run()
	end := time.Now()
	t.Logf("%s attack over after %v", harness.Clock(), end.Sub(start).Round(time.Millisecond))

	for _, i := range c.All() {
		if err := c.Exited(i); err != nil {
			a.saveFrames(t)
			t.Fatalf("the broker did not survive the attack: %v (its stderr is printed below)", err)
		}
		if _, err := c.Health(i); err != nil {
			t.Errorf("after the attack node%d's /healthz: %v", i, err)
		}
	}
	for _, f := range a.failures() {
		t.Error(f)
	}
	checkAckedDuring(t, rec, began, start, end)
	c.Eventually(60*time.Second, "both producers acknowledged after the attack", func() error { return ackedBetween(rec, began, end, time.Now(), 20) })

	final := w.finish(t, c)
	h := rec.History()
	report := Check(h, final)
	if !report.OK() {
		t.Errorf("the well-behaved clients' history has anomalies:\n%s", report.Summary())
	}
	for _, op := range h.Ops {
		if op.Type == TypeSend && op.Outcome != OutcomeOK {
			t.Errorf("a well-behaved produce failed: %s (%s)", op.Records[0].Value, op.Error)
			break
		}
	}

	closedAfter, reasons := badInputClosures(t, c)
	if delta := closedAfter - closedBefore; delta < float64(a.mustClose.Load()) {
		t.Errorf("stele_kafka_connections_closed_on_bad_input_total went up by %v, but %d connections were closed for bad input the docs name",
			delta, a.mustClose.Load())
	}
	checkNoPanic(t, c)
	t.Logf("malformed-traffic summary (seed %d, %v in all)\n%s"+
		"bad-input metric: +%v (now %v)\n"+
		"brokers' peak resident memory: %s\n"+
		"well-behaved clients: %v; anomalies: none",
		seed, time.Since(began).Round(time.Second), a.summary(),
		closedAfter-closedBefore, reasons, peakMemory(c), report.Ops)
	if t.Failed() {
		a.saveFrames(t)
	}
}

// peakMemory reads each broker's peak resident set (VmHWM) from /proc.
func peakMemory(c *harness.Cluster) string {
	var out []string
	for _, n := range c.Nodes {
		hwm := "?"
		if n.Proc != nil {
			data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.Proc.Cmd.Process.Pid))
			for line := range strings.Lines(string(data)) {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					hwm = strings.Join(strings.Fields(v), " ")
				}
			}
		}
		out = append(out, fmt.Sprintf("node%d %s", n.Idx, hwm))
	}
	return strings.Join(out, ", ")
}

// badInputClosures sums stele_kafka_connections_closed_on_bad_input_total
// over every broker, and returns it by reason too.
func badInputClosures(t *testing.T, c *harness.Cluster) (float64, map[string]float64) {
	t.Helper()
	total, by := 0.0, map[string]float64{}
	for _, n := range c.Nodes {
		sum, series, err := brokerMetric(n.HTTP, "stele_kafka_connections_closed_on_bad_input_total")
		if err != nil {
			t.Fatalf("node%d: %v", n.Idx, err)
		}
		total += sum
		for labels, v := range series {
			by[strings.Trim(strings.TrimPrefix(labels, "{reason="), `"}`)] += v
		}
	}
	return total, by
}

// brokerMetric reads the series of metric name from a broker's /metrics (at its
// HTTP address addr): their sum, and each by its labels' text.
func brokerMetric(addr, name string) (float64, map[string]float64, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	total, series := 0.0, map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		cut := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[cut+1:], 64)
		if err != nil {
			return 0, nil, fmt.Errorf("/metrics: %q: %v", sc.Text(), err)
		}
		total += v
		series[rest[:cut]] += v
	}
	return total, series, sc.Err()
}

// checkNoPanic fails the test if a broker's stderr reports a panic or a
// fatal runtime error (one recovered by net/http in an HTTP handler does
// not stop the process, and is reported as "http: panic serving").
func checkNoPanic(t *testing.T, c *harness.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		data, err := os.ReadFile(n.LogPath)
		if err != nil {
			t.Errorf("node%d stderr: %v", n.Idx, err)
			continue
		}
		for line := range strings.Lines(string(data)) {
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.Contains(line, "http: panic serving") {
				t.Errorf("node%d's stderr reports a panic: %s", n.Idx, strings.TrimSpace(line))
			}
		}
	}
}

// ackedBetween requires at least n acknowledged sends from each of the two
// producers completed between from and to (zero from: since the start).
func ackedBetween(rec *Recorder, began, from, to time.Time, n int) error {
	var got [2]int
	for _, op := range rec.History().Ops {
		at := began.Add(time.Duration(op.Complete))
		if op.Type == TypeSend && op.Outcome == OutcomeOK && at.After(from) && at.Before(to) && op.Process-firstSender < 2 {
			got[op.Process-firstSender]++
		}
	}
	if got[0] < n || got[1] < n {
		return fmt.Errorf("acknowledgements after %s: %d and %d, want %d each", from.Format("15:04:05.000"), got[0], got[1], n)
	}
	return nil
}

// checkAckedDuring requires acknowledgements for both producers while the
// attack ran, with no pause longer than ackGapLimit.
func checkAckedDuring(t *testing.T, rec *Recorder, began, start, end time.Time) {
	t.Helper()
	var got [2]int
	times := []time.Time{start}
	for _, op := range rec.History().Ops {
		at := began.Add(time.Duration(op.Complete))
		if op.Type == TypeSend && op.Outcome == OutcomeOK && at.After(start) && at.Before(end) && op.Process-firstSender < 2 {
			got[op.Process-firstSender]++
			times = append(times, at)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	times = append(times, end)
	var gap time.Duration
	for i := 1; i < len(times); i++ {
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	t.Logf("during the attack: %d and %d acknowledgements, longest pause %v", got[0], got[1], gap.Round(time.Millisecond))
	if got[0] == 0 || got[1] == 0 {
		t.Errorf("a producer was never acknowledged during the attack (%d and %d)", got[0], got[1])
	}
	if gap > ackGapLimit {
		t.Errorf("the producers went %v without an acknowledgement during the attack (limit %v)", gap, ackGapLimit)
	}
}
