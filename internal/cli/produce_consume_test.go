package cli

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Records produced from stdin with keys and headers come back exactly, in
// the --format template of kcat's -f.
func TestProduceConsumeRoundTrip(t *testing.T) {
	c := newTestCluster(t, "orders")
	r := c.ok("k1:hello\r\nk2:wor:ld\n:nokey\nk4:\n",
		"produce", "orders", "--key-separator", ":", "--header", "source=cli", "--header", "trace=a=b")
	if !strings.Contains(r.stderr, "Produced 4 records") || !strings.Contains(r.stderr, "0 failed") {
		t.Errorf("produce summary: %q", r.stderr)
	}

	r = c.ok("", "consume", "orders", "--from-beginning", "--max-messages", "4",
		"--format", `%T/%p/%o %k=%v [%h] %K/%V\n`)
	want := "orders/0/0 k1=hello [source=cli,trace=a=b] 2/5\n" +
		"orders/0/1 k2=wor:ld [source=cli,trace=a=b] 2/6\n" +
		"orders/0/2 =nokey [source=cli,trace=a=b] 0/5\n" +
		"orders/0/3 k4= [source=cli,trace=a=b] 2/0\n"
	if r.stdout != want {
		t.Errorf("consumed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if !strings.Contains(r.stderr, "Processed a total of 4 messages") {
		t.Errorf("consume stderr: %q", r.stderr)
	}

	// --max-messages stops early; the default format is the value and a newline.
	r = c.ok("", "consume", "orders", "--from-beginning", "--max-messages", "2")
	if r.stdout != "hello\nwor:ld\n" {
		t.Errorf("default format, 2 messages: %q", r.stdout)
	}
}

// Without --key-separator the line is the value and the key is null.
func TestProduceValuesOnly(t *testing.T) {
	c := newTestCluster(t, "logs")
	c.ok("a:b\n\nlast line without newline", "produce", "logs", "--acks", "1", "--compression", "zstd")
	r := c.ok("", "consume", "logs", "--from-beginning", "--max-messages", "3", "--format", `%K|%v|%t\n`)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("consumed %q", r.stdout)
	}
	now := time.Now().UnixMilli()
	for i, wantValue := range []string{"a:b", "", "last line without newline"} {
		parts := strings.Split(lines[i], "|")
		if len(parts) != 3 || parts[0] != "-1" || parts[1] != wantValue {
			t.Errorf("line %d = %q, want null key and value %q", i, lines[i], wantValue)
			continue
		}
		if ts := parseInt(t, parts[2]); ts < now-60_000 || ts > now+1000 {
			t.Errorf("line %d timestamp %d is not about now (%d)", i, ts, now)
		}
	}
}

// A line without the key separator stops the producer with an error naming
// the line, as kafka-console-producer.sh does; earlier lines are produced.
func TestProduceMissingKeySeparator(t *testing.T) {
	c := newTestCluster(t, "orders")
	r := c.run("k1:v1\nno separator here\nk3:v3\n", "produce", "orders", "--key-separator", ":")
	wantFailure(t, r, ExitFailure, `no key separator ":" found on line 2`, "Produced 1 record ")
	r = c.ok("", "consume", "orders", "--from-beginning", "--timeout-idle", "300ms", "--format", `%k=%v\n`)
	if r.stdout != "k1=v1\n" {
		t.Errorf("consumed %q, want only the first line", r.stdout)
	}
}

// --file, --partition and --output json on both sides.
func TestProduceFileToPartitionJSON(t *testing.T) {
	c := newTestCluster(t)
	c.ok("", "topic", "create", "events", "--partitions", "3")
	path := filepath.Join(t.TempDir(), "events.txt")
	if err := os.WriteFile(path, []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.ok("", "produce", "events", "--file", path, "--partition", "2", "--output", "json", "--linger", "0s")
	var sum produceSummary
	decodeJSON(t, r.stdout, &sum)
	if sum != (produceSummary{Topic: "events", Records: 3, Bytes: 11}) {
		t.Errorf("summary = %+v", sum)
	}

	r = c.ok("", "consume", "events", "--from-beginning", "--max-messages", "3", "--output", "json")
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	var got []string
	for sc.Scan() {
		var rec consumedRecord
		decodeJSON(t, sc.Text(), &rec)
		if rec.Topic != "events" || rec.Partition != 2 || rec.Key != nil || rec.Value == nil || rec.Encoding != "" {
			t.Errorf("record = %+v", rec)
			continue
		}
		got = append(got, *rec.Value)
	}
	if strings.Join(got, ",") != "one,two,three" {
		t.Errorf("values = %v", got)
	}

	// --partition with --offset starts there; an offset past the end is refused.
	r = c.ok("", "consume", "events", "--partition", "2", "--offset", "1", "--max-messages", "2")
	if r.stdout != "two\nthree\n" {
		t.Errorf("from offset 1: %q", r.stdout)
	}
	wantFailure(t, c.run("", "consume", "events", "--partition", "2", "--offset", "9"), ExitFailure,
		`offset 9 is out of range for topic "events" partition 2`)
	wantFailure(t, c.run("", "consume", "events", "--partition", "7"), ExitFailure,
		`topic "events" has 3 partitions (0 to 2); partition 7 does not exist`)
	wantFailure(t, c.run("x\n", "produce", "events", "--partition", "3"), ExitFailure,
		"partition 3 does not exist")
}

// Binary keys and values are printed as base64 in JSON.
func TestConsumeJSONBinary(t *testing.T) {
	c := newTestCluster(t, "bin")
	c.ok("k\xff:v\n", "produce", "bin", "--key-separator", ":")
	r := c.ok("", "consume", "bin", "--from-beginning", "--max-messages", "1", "--output", "json")
	var rec consumedRecord
	decodeJSON(t, r.stdout, &rec)
	if rec.Encoding != "base64" || rec.Key == nil || *rec.Key != "a/8=" || *rec.Value != "dg==" {
		t.Errorf("record = %+v", rec)
	}
}

// Consume runs until interrupted and then exits 0 cleanly.
func TestConsumeInterrupt(t *testing.T) {
	c := newTestCluster(t, "quiet")
	// The context ends while consume waits for records, as SIGINT does.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- c.runCtx(ctx, "", "consume", "quiet") }()
	select {
	case r := <-done:
		if r.code != ExitOK || !strings.Contains(r.stderr, "Processed a total of 0 messages") {
			t.Errorf("interrupted consume: exit %d, stderr %q", r.code, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("consume did not exit after its context was cancelled")
	}
}

// --timeout-idle ends a consume that receives nothing.
func TestConsumeIdleTimeout(t *testing.T) {
	c := newTestCluster(t, "quiet")
	start := time.Now()
	r := c.ok("", "consume", "quiet", "--from-beginning", "--timeout-idle", "300ms")
	if el := time.Since(start); el < 300*time.Millisecond || el > 8*time.Second {
		t.Errorf("idle consume took %v", el)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
}

func TestUnknownTopic(t *testing.T) {
	c := newTestCluster(t)
	for _, args := range [][]string{
		{"produce", "nope"},
		{"consume", "nope"},
		{"topic", "describe", "nope"},
		{"topic", "delete", "nope"},
		{"config", "describe", "--topic", "nope"},
		{"config", "alter", "--topic", "nope", "--set", "retention.ms=1"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			wantFailure(t, c.run("x\n", args...), ExitFailure, `topic "nope" does not exist`)
		})
	}
}

func TestProduceConsumeUsageErrors(t *testing.T) {
	c := newTestCluster(t, "t")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"produce"}, "missing TOPIC argument"},
		{[]string{"produce", "t", "--acks", "2"}, "must be one of -1|all|0|1"},
		{[]string{"produce", "t", "--compression", "brotli"}, "must be one of none|gzip|snappy|lz4|zstd"},
		{[]string{"produce", "t", "--key-separator", ""}, "--key-separator must not be empty"},
		{[]string{"produce", "t", "--header", "novalue"}, "invalid --header"},
		{[]string{"consume", "t", "--offset", "5"}, "--offset needs --partition"},
		{[]string{"consume", "t", "--partition", "0", "--offset", "soon"}, `invalid --offset "soon"`},
		{[]string{"consume", "t", "--partition", "0", "--offset", "1", "--from-beginning"}, "not both"},
		{[]string{"consume", "t", "--format", "%q"}, "unknown verb %q"},
		{[]string{"consume", "t", "--format", "%v", "--output", "json"}, "cannot be used together"},
		{[]string{"consume", "t", "--isolation", "serializable"}, "read_uncommitted|read_committed"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			wantFailure(t, c.run("", tc.args...), ExitUsage, tc.want)
		})
	}
}

// A broker that is not there gives a failure with a hint; one that never
// answers gives the same within --timeout.
func TestNoBroker(t *testing.T) {
	r := runCLI(t.Context(), "", "--brokers", "127.0.0.1:1", "--timeout", "1s", "topic", "list")
	wantFailure(t, r, ExitFailure, "connection refused", "hint: could not reach a broker at 127.0.0.1:1")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() { // accept and never answer, until ln is closed
		defer close(accepted)
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	defer func() { ln.Close(); <-accepted }()
	start := time.Now()
	r = runCLI(t.Context(), "", "--brokers", ln.Addr().String(), "--timeout", "500ms", "topic", "list")
	wantFailure(t, r, ExitFailure, "context deadline exceeded", "hint: could not reach a broker at "+ln.Addr().String())
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v with --timeout 500ms", el)
	}

	wantFailure(t, runCLI(t.Context(), "", "--brokers", "nonsense", "topic", "list"), ExitUsage,
		`invalid broker address "nonsense"`)
	wantFailure(t, runCLI(t.Context(), "", "--timeout", "0s", "topic", "list"), ExitUsage, "invalid --timeout")
}

// STELE_BROKERS is used when --brokers is not given.
func TestBrokersFromEnvironment(t *testing.T) {
	c := newTestCluster(t, "from-env")
	t.Setenv(brokersEnv, c.brokers)
	r := runCLI(t.Context(), "", "topic", "list")
	if r.code != ExitOK || !strings.Contains(r.stdout, "from-env") {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func parseInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}
