package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The tests of `stele group` (kafka-consumer-groups.sh) and `consume
// --group` run against kfake, which implements classic consumer groups and
// committed offsets (KIP-496 OffsetDelete, KIP-518 state filters included).

// forTest returns c for use in the subtest t.
func (c *testCluster) forTest(t *testing.T) *testCluster {
	sc := *c
	sc.t = t
	return &sc
}

// admin returns a kadm client on the cluster, closed when the test ends.
func (c *testCluster) admin() *kadm.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produceTo produces values to one partition of topic, in order, with the
// given timestamps (or now when ts is nil).
func (c *testCluster) produceTo(topic string, partition int32, ts []time.Time, values ...string) {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i, v := range values {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}
		if ts != nil {
			r.Timestamp = ts[i]
		}
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		c.t.Fatalf("produce to %s/%d: %v", topic, partition, err)
	}
}

// commit commits offsets for group as an admin would (generation -1),
// e.g. commit("g", "orders", 0, 5, "orders", 1, 2).
func (c *testCluster) commit(group string, tpo ...any) {
	c.t.Helper()
	os := make(kadm.Offsets)
	for i := 0; i+2 < len(tpo); i += 3 {
		os.AddOffset(tpo[i].(string), int32(tpo[i+1].(int)), int64(tpo[i+2].(int)), -1)
	}
	if err := c.admin().CommitAllOffsets(context.Background(), group, os); err != nil {
		c.t.Fatalf("commit offsets of %s: %v", group, err)
	}
}

// committed returns the committed offsets of group as "topic/partition=offset"
// strings joined by spaces, sorted.
func (c *testCluster) committed(group string) string {
	c.t.Helper()
	rs, err := c.admin().FetchOffsets(context.Background(), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return "" // kfake's answer for a group it does not know
	}
	if err != nil {
		c.t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	var parts []string
	for _, o := range rs.Offsets().Sorted() {
		if o.At >= 0 {
			parts = append(parts, fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.At))
		}
	}
	return strings.Join(parts, " ")
}

// joinGroup starts a member of group consuming topics and waits until the
// group is Stable with it as a member that has an assignment. The member
// leaves when stop is called or the test ends.
func (c *testCluster) joinGroup(group string, topics ...string) (stop func()) {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...), kgo.ClientID("test-member"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...))
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			cl.Close()
		})
	}
	c.t.Cleanup(stop)
	adm := c.admin()
	eventually(c.t, 10*time.Second, func() error {
		ds, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			return err
		}
		d := ds[group]
		if d.State != "Stable" || len(d.Members) != 1 || len(d.AssignedPartitions()) == 0 {
			return fmt.Errorf("group %s: state %q, %d members, assigned %v", group, d.State, len(d.Members), d.AssignedPartitions())
		}
		return nil
	})
	return stop
}

// consume --group reads from the committed offset, commits what it printed,
// and a second run resumes after the first one's commit; partitions without
// a committed offset start where --from-beginning says.
func TestConsumeGroupCommitsAndResumes(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.produceTo("orders", 0, nil, "a", "b", "c", "d", "e")

	r := c.ok("", "consume", "orders", "--group", "billing", "--from-beginning", "--max-messages", "2")
	if r.stdout != "a\nb\n" {
		t.Fatalf("first run printed %q", r.stdout)
	}
	if got := c.committed("billing"); got != "orders/0=2" {
		t.Fatalf("after the first run committed %q, want orders/0=2", got)
	}
	// No --from-beginning: the committed offset wins over the reset to the end.
	r = c.ok("", "consume", "orders", "--group", "billing", "--max-messages", "3", "--output", "json")
	if n := strings.Count(r.stdout, "\n"); n != 3 || !strings.Contains(r.stdout, `"offset":2,`) ||
		!strings.Contains(r.stdout, `"value":"e"`) {
		t.Fatalf("second run printed %q, want offsets 2 to 4", r.stdout)
	}
	if got := c.committed("billing"); got != "orders/0=5" {
		t.Fatalf("after the second run committed %q, want orders/0=5", got)
	}
	// Caught up: nothing more, and an interrupted run exits 0.
	r = c.ok("", "consume", "orders", "--group", "billing", "--timeout-idle", "500ms")
	if r.stdout != "" || !strings.Contains(r.stderr, "Processed a total of 0 messages") {
		t.Fatalf("third run: stdout %q stderr %q", r.stdout, r.stderr)
	}

	// A new group without --from-beginning starts at the end: it sees only
	// what is produced after it joined (so keep producing until it prints
	// something), and commits it.
	done := make(chan result, 1)
	go func() { done <- c.run("", "consume", "orders", "--group", "late", "--max-messages", "1") }()
	deadline := time.After(10 * time.Second)
	var got result
wait:
	for {
		c.produceTo("orders", 0, nil, "new")
		select {
		case got = <-done:
			break wait
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("consume --group late printed nothing")
		}
	}
	if got.code != ExitOK || got.stdout != "new\n" {
		t.Fatalf("late group: exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	if cm := c.committed("late"); !strings.HasPrefix(cm, "orders/0=") || cm == "orders/0=5" {
		t.Errorf("late group committed %q, want past offset 5", cm)
	}
}

// An interrupted consume --group (SIGINT cancels the context) commits what
// it printed before it exits 0: autocommit alone would wait up to 5s.
func TestConsumeGroupCommitsOnInterrupt(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.produceTo("orders", 0, nil, "a", "b", "c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &notifyWriter{want: "a\nb\nc\n", seen: make(chan struct{})}
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--brokers", c.brokers, "consume", "orders", "--group", "g", "--from-beginning"},
			strings.NewReader(""), out, &stderr)
	}()
	select {
	case <-out.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("consume --group did not print the three records")
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("interrupted consume --group: exit %d, stderr %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("consume --group did not exit after its context was cancelled")
	}
	if got := c.committed("g"); got != "orders/0=3" {
		t.Errorf("after the interrupt committed %q, want orders/0=3", got)
	}
}

// notifyWriter collects what is written and closes seen once it holds want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.buf.String() == w.want {
		close(w.seen)
	}
	return len(p), nil
}

// --timeout-idle counts from when the group has assigned the member its
// partitions: a slow join (Kafka delays a new group's first rebalance by 3s)
// does not end the command before it could read anything.
func TestConsumeGroupIdleCountsFromJoin(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.produceTo("orders", 0, nil, "a")
	const delay = 1500 * time.Millisecond
	var slowed atomic.Bool
	c.kc.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !slowed.Swap(true) {
			c.kc.SleepControl(func() { time.Sleep(delay) })
		}
		c.kc.DropControl()
		return nil, nil, false
	})
	start := time.Now()
	r := c.ok("", "consume", "orders", "--group", "g", "--from-beginning", "--timeout-idle", "500ms")
	if r.stdout != "a\n" || !slowed.Load() {
		t.Fatalf("slow join: printed %q (join slowed: %t), stderr %q", r.stdout, slowed.Load(), r.stderr)
	}
	if el := time.Since(start); el < delay+500*time.Millisecond {
		t.Errorf("exited after %v, before the join (%v) plus --timeout-idle", el, delay)
	}
}

// A partition whose committed offset carries a leader epoch (as every kgo
// commit does) is validated (KIP-320) before it is fetched, after the fetch
// of the other partitions has started; that fetch must not keep its records
// waiting past --timeout-idle.
func TestConsumeGroupEpochValidatedPartition(t *testing.T) {
	c := newTestCluster(t)
	c.ok("", "topic", "create", "orders", "--partitions", "2")
	c.produceTo("orders", 1, nil, "a", "b", "c", "d")
	offsets := make(kadm.Offsets)
	offsets.AddOffset("orders", 1, 2, 0) // leader epoch 0
	if err := c.admin().CommitAllOffsets(context.Background(), "g", offsets); err != nil {
		t.Fatal(err)
	}
	// Slow the validation so that partition 0 is always fetched first.
	c.kc.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.kc.SleepControl(func() { time.Sleep(200 * time.Millisecond) })
		c.kc.DropControl()
		return nil, nil, false
	})
	r := c.ok("", "consume", "orders", "--group", "g", "--timeout-idle", "1s")
	if r.stdout != "c\nd\n" {
		t.Fatalf("printed %q, want the records after the committed offset", r.stdout)
	}
}

// `group list` shows every group with its state and protocol type; --state
// filters (KIP-518) in any case, repeated or comma-separated.
func TestGroupList(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.produceTo("orders", 0, nil, "a")
	c.ok("", "consume", "orders", "--group", "idle", "--from-beginning", "--max-messages", "1")
	c.joinGroup("live", "orders")

	r := c.ok("", "group", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "GROUP STATE PROTOCOL-TYPE" ||
		strings.Join(strings.Fields(lines[1]), " ") != "idle Empty consumer" ||
		strings.Join(strings.Fields(lines[2]), " ") != "live Stable consumer" {
		t.Errorf("group list:\n%s", r.stdout)
	}

	var listed []groupListed
	decodeJSON(t, c.ok("", "group", "list", "--output", "json", "--state", "stable").stdout, &listed)
	if len(listed) != 1 || listed[0].Group != "live" || listed[0].State != "Stable" || listed[0].ProtocolType != "consumer" {
		t.Errorf("--state stable = %+v, want only live", listed)
	}
	listed = nil
	decodeJSON(t, c.ok("", "group", "list", "--output", "json", "--state", "Dead,EMPTY", "--state", "PreparingRebalance").stdout, &listed)
	if len(listed) != 1 || listed[0].Group != "idle" {
		t.Errorf("--state Dead,EMPTY = %+v, want only idle", listed)
	}
	listed = nil
	decodeJSON(t, c.ok("", "group", "list", "--output", "json", "--state", "Assigning").stdout, &listed)
	if len(listed) != 0 {
		t.Errorf("--state Assigning = %+v, want none", listed)
	}
}

// `group describe` is kafka-consumer-groups.sh --describe: members with
// their assignment, and per partition the committed offset, the log end
// offset, the lag and the member; partitions with a committed offset and no
// member still show.
func TestGroupDescribe(t *testing.T) {
	c := newTestCluster(t)
	c.ok("", "topic", "create", "orders", "--partitions", "2")
	c.ok("", "topic", "create", "audit")
	c.produceTo("orders", 0, nil, "a", "b", "c", "d", "e")
	c.produceTo("orders", 1, nil, "x", "y")
	c.produceTo("audit", 0, nil, "1", "2", "3")
	c.commit("billing", "orders", 0, 3, "orders", 1, 2, "audit", 0, 1)
	c.commit("live", "audit", 0, 2)
	c.joinGroup("live", "orders")

	var ds []groupDescribed
	r := c.run("", "group", "describe", "live", "billing", "missing", "--output", "json")
	wantFailure(t, r, ExitFailure, `group "missing" does not exist`)
	decodeJSON(t, r.stdout, &ds)
	if len(ds) != 2 || ds[0].Group != "billing" || ds[1].Group != "live" {
		t.Fatalf("described %+v, want billing and live", ds)
	}

	billing := ds[0]
	if billing.State != "Empty" || len(billing.Members) != 0 || billing.TotalLag != 2+0+2 {
		t.Errorf("billing = %+v, want Empty, no members, total lag 4", billing)
	}
	want := []groupPartitionDescribed{
		{Topic: "audit", Partition: 0, CommittedOffset: 1, LogEndOffset: 3, Lag: 2},
		{Topic: "orders", Partition: 0, CommittedOffset: 3, LogEndOffset: 5, Lag: 2},
		{Topic: "orders", Partition: 1, CommittedOffset: 2, LogEndOffset: 2, Lag: 0},
	}
	if fmt.Sprint(billing.Partitions) != fmt.Sprint(want) {
		t.Errorf("billing partitions:\n%+v\nwant\n%+v", billing.Partitions, want)
	}

	live := ds[1]
	if live.State != "Stable" || live.ProtocolType != "consumer" || live.Protocol == "" || len(live.Members) != 1 {
		t.Fatalf("live = %+v, want Stable consumer group with one member", live)
	}
	m := live.Members[0]
	if m.MemberID == "" || m.ClientID != "test-member" || m.Host == "" || m.InstanceID != nil ||
		fmt.Sprint(m.Assignment) != "[{orders [0 1]}]" {
		t.Errorf("live member = %+v, want test-member assigned orders 0 and 1", m)
	}
	// audit: committed, not assigned. orders: assigned, nothing committed.
	if len(live.Partitions) != 3 || live.TotalLag != 1 {
		t.Fatalf("live partitions = %+v, total lag %d", live.Partitions, live.TotalLag)
	}
	if p := live.Partitions[0]; p.Topic != "audit" || p.CommittedOffset != 2 || p.Lag != 1 || p.MemberID != "" {
		t.Errorf("live audit/0 = %+v", p)
	}
	for _, p := range live.Partitions[1:] {
		if p.Topic != "orders" || p.CommittedOffset != -1 || p.Lag != -1 || p.MemberID != m.MemberID ||
			p.ClientID != "test-member" || p.LogEndOffset < 0 {
			t.Errorf("live %s/%d = %+v", p.Topic, p.Partition, p)
		}
	}

	r = c.ok("", "group", "describe", "billing", "live")
	for _, want := range []string{
		"Group: billing", "State: Empty", "(no active members)", "Total lag: 4",
		"Group: live", "State: Stable", "Protocol: consumer/", "MEMBER-ID", "test-member", "orders:0,1",
		"TOPIC", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table describe lacks %q:\n%s", want, r.stdout)
		}
	}
	if !containsRow(r.stdout, "orders", "0", "3", "5", "2", "-", "-", "-", "-") {
		t.Errorf("table lacks billing's orders/0 row:\n%s", r.stdout)
	}
	if !containsRow(r.stdout, "orders", "1", "-", "2", "-", m.MemberID, "test-member") {
		t.Errorf("table lacks live's orders/1 row:\n%s", r.stdout)
	}
}

// containsRow reports whether some line of s starts with the given fields.
func containsRow(s string, fields ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

// Every mode of reset-offsets, as a dry run (nothing committed) and with
// --execute (the plan is committed), clamped to the log as Kafka does.
func TestGroupResetOffsets(t *testing.T) {
	c := newTestCluster(t)
	c.ok("", "topic", "create", "events", "--partitions", "2")
	c.ok("", "topic", "create", "other")
	base := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	minutes := func(n int) []time.Time {
		ts := make([]time.Time, n)
		for i := range ts {
			ts[i] = base.Add(time.Duration(i) * time.Minute)
		}
		return ts
	}
	c.produceTo("events", 0, minutes(10), "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
	c.produceTo("events", 1, minutes(4), "0", "1", "2", "3")
	c.produceTo("other", 0, nil, "0", "1", "2")
	const initial = "events/0=5 events/1=1 other/0=1"

	for _, tc := range []struct {
		name string
		args []string
		want string // committed after --execute
	}{
		{"to-earliest", []string{"--topic", "events", "--to-earliest"}, "events/0=0 events/1=0 other/0=1"},
		{"to-latest", []string{"--topic", "events", "--to-latest"}, "events/0=10 events/1=4 other/0=1"},
		{"to-offset clamped to the log end", []string{"--topic", "events", "--to-offset", "7"}, "events/0=7 events/1=4 other/0=1"},
		{"to-offset clamped to the log start", []string{"--topic", "events:1", "--to-offset=-3"}, "events/0=5 events/1=0 other/0=1"},
		{"to-datetime Kafka format", []string{"--topic", "events", "--to-datetime", "2024-05-01T12:03:00.000"}, "events/0=3 events/1=3 other/0=1"},
		{"to-datetime RFC 3339 with zone", []string{"--topic", "events:0", "--to-datetime", "2024-05-01T14:02:30+02:00"}, "events/0=3 events/1=1 other/0=1"},
		{"to-datetime after every record", []string{"--topic", "events", "--to-datetime", "2024-05-01T13:00:00Z"}, "events/0=10 events/1=4 other/0=1"},
		{"shift-by forward, clamped", []string{"--topic", "events", "--shift-by", "4"}, "events/0=9 events/1=4 other/0=1"},
		{"shift-by back, clamped", []string{"--topic", "events", "--topic", "other", "--shift-by=-2"}, "events/0=3 events/1=0 other/0=0"},
		{"all-topics", []string{"--all-topics", "--to-earliest"}, "events/0=0 events/1=0 other/0=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c.forTest(t)
			c.run("", "group", "delete", "r") // fails the first time: r does not exist yet
			c.commit("r", "events", 0, 5, "events", 1, 1, "other", 0, 1)

			args := append([]string{"group", "reset-offsets", "r"}, tc.args...)
			r := c.ok("", append(args, "--output", "json")...)
			var plan offsetResetPlan
			decodeJSON(t, r.stdout, &plan)
			if plan.Group != "r" || plan.Executed {
				t.Errorf("dry run plan = %+v", plan)
			}
			if got := c.committed("r"); got != initial {
				t.Fatalf("dry run committed something: %q", got)
			}
			// The plan names the current and the new offset of each partition.
			planned := c.committedWith(initial, plan.Partitions)
			if planned != tc.want {
				t.Errorf("plan %+v gives %q, want %q", plan.Partitions, planned, tc.want)
			}

			r = c.ok("", append(args, "--execute")...)
			if !strings.Contains(r.stdout, "CURRENT-OFFSET") || strings.Contains(r.stderr, "Dry run") {
				t.Errorf("--execute output: %q / %q", r.stdout, r.stderr)
			}
			if got := c.committed("r"); got != tc.want {
				t.Errorf("after --execute committed %q, want %q", got, tc.want)
			}
		})
	}

	// The table of a dry run, and the note that nothing was committed.
	c.commit("r", "events", 0, 5, "events", 1, 1, "other", 0, 1)
	r := c.ok("", "group", "reset-offsets", "r", "--topic", "events", "--shift-by", "1")
	if !containsRow(r.stdout, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET") ||
		!containsRow(r.stdout, "r", "events", "0", "5", "6") || !containsRow(r.stdout, "r", "events", "1", "1", "2") ||
		!strings.Contains(r.stderr, "Dry run: nothing was committed") {
		t.Errorf("dry run table:\n%s\nstderr: %s", r.stdout, r.stderr)
	}

	// A group that does not exist yet can be given offsets (Kafka allows it);
	// shifting needs a committed offset.
	c.ok("", "group", "reset-offsets", "fresh", "--topic", "other", "--to-offset", "2", "--execute")
	if got := c.committed("fresh"); got != "other/0=2" {
		t.Errorf("fresh group committed %q", got)
	}
	wantFailure(t, c.run("", "group", "reset-offsets", "fresh", "--topic", "events:1", "--shift-by", "1"), ExitFailure,
		`cannot shift the offset of topic "events" partition 1: the group has no committed offset there`)
	wantFailure(t, c.run("", "group", "reset-offsets", "empty", "--all-topics", "--to-latest"), ExitFailure,
		`group "empty" has no committed offsets`)
	wantFailure(t, c.run("", "group", "reset-offsets", "r", "--topic", "nope", "--to-latest"), ExitFailure,
		`topic "nope" does not exist`)
	wantFailure(t, c.run("", "group", "reset-offsets", "r", "--topic", "events:5", "--to-latest"), ExitFailure,
		`topic "events" has 2 partitions (0 to 1); partition 5 does not exist`)
}

// committedWith applies a reset plan to the committed offsets in base (as
// returned by committed) and returns the result in the same form, checking
// that the plan's current offsets are base's.
func (c *testCluster) committedWith(base string, plan []offsetReset) string {
	c.t.Helper()
	m := map[string]string{}
	var order []string
	for _, kv := range strings.Fields(base) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
		order = append(order, k)
	}
	for _, r := range plan {
		k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if cur := m[k]; cur != fmt.Sprint(r.CurrentOffset) {
			c.t.Errorf("plan says %s is at %d, committed is %s", k, r.CurrentOffset, cur)
		}
		m[k] = fmt.Sprint(r.NewOffset)
	}
	var out []string
	for _, k := range order {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, " ")
}

// Like kafka-consumer-groups.sh, reset-offsets refuses a group that has
// active members, dry run or not; once they leave, it works.
func TestGroupResetRefusedWhileActive(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.produceTo("orders", 0, nil, "a", "b", "c")
	c.commit("live", "orders", 0, 1)
	stop := c.joinGroup("live", "orders")
	for _, extra := range [][]string{nil, {"--execute"}} {
		args := append([]string{"group", "reset-offsets", "live", "--topic", "orders", "--to-latest"}, extra...)
		r := c.run("", args...)
		wantFailure(t, r, ExitFailure, `cannot reset the offsets of group "live": it has active members (state Stable)`,
			"stop its consumers first")
		if r.stdout != "" || strings.Contains(r.stderr, "stele/cli") {
			t.Errorf("refused reset printed %q, %q", r.stdout, r.stderr)
		}
	}
	if got := c.committed("live"); got != "orders/0=1" {
		t.Fatalf("refused reset changed the offsets: %q", got)
	}
	stop()
	adm := c.admin()
	eventually(t, 10*time.Second, func() error {
		ds, err := adm.DescribeGroups(context.Background(), "live")
		if err != nil {
			return err
		}
		if st := ds["live"].State; st != "Empty" {
			return fmt.Errorf("state %q", st)
		}
		return nil
	})
	c.ok("", "group", "reset-offsets", "live", "--topic", "orders", "--to-latest", "--execute")
	if got := c.committed("live"); got != "orders/0=3" {
		t.Errorf("after the members left, reset committed %q", got)
	}
}

// `group delete` deletes empty groups, reports each failure by its Kafka
// error, and exits 1 if any failed.
func TestGroupDelete(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.commit("old", "orders", 0, 0)
	c.commit("older", "orders", 0, 0)
	c.joinGroup("live", "orders")

	r := c.run("", "group", "delete", "old", "live", "missing")
	wantFailure(t, r, ExitFailure, `delete group "live": NON_EMPTY_GROUP`, "stop its consumers first",
		`group "missing" does not exist`)
	if r.stdout != "Deleted group \"old\".\n" {
		t.Errorf("stdout %q", r.stdout)
	}

	var out []groupDeleted
	r = c.run("", "group", "delete", "older", "missing", "--output", "json")
	wantFailure(t, r, ExitFailure, `group "missing" does not exist`)
	decodeJSON(t, r.stdout, &out)
	if len(out) != 2 || out[0] != (groupDeleted{Group: "missing", Error: out[0].Error}) || out[0].Error == "" ||
		out[1] != (groupDeleted{Group: "older", Deleted: true}) {
		t.Errorf("JSON = %+v", out)
	}

	var listed []groupListed
	decodeJSON(t, c.ok("", "group", "list", "--output", "json").stdout, &listed)
	if len(listed) != 1 || listed[0].Group != "live" {
		t.Errorf("after delete, groups = %+v, want only live", listed)
	}
	if got := c.committed("old"); got != "" {
		t.Errorf("deleted group still has offsets %q", got)
	}
}

// `group delete-offsets` (OffsetDelete, KIP-496) deletes the offsets of a
// topic or of some partitions; the broker refuses a topic an active member
// is subscribed to.
func TestGroupDeleteOffsets(t *testing.T) {
	c := newTestCluster(t)
	c.ok("", "topic", "create", "events", "--partitions", "3")
	c.ok("", "topic", "create", "other")
	c.commit("d", "events", 0, 1, "events", 1, 2, "events", 2, 3, "other", 0, 4)

	r := c.ok("", "group", "delete-offsets", "d", "--topic", "events:0,2")
	if !containsRow(r.stdout, "GROUP", "TOPIC", "PARTITION", "STATUS") || !containsRow(r.stdout, "d", "events", "0", "deleted") ||
		!containsRow(r.stdout, "d", "events", "2", "deleted") || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("table:\n%s", r.stdout)
	}
	if got := c.committed("d"); got != "events/1=2 other/0=4" {
		t.Fatalf("after deleting events:0,2 committed %q", got)
	}

	var out offsetsDeleted
	decodeJSON(t, c.ok("", "group", "delete-offsets", "d", "--topic", "other", "--output", "json").stdout, &out)
	if out.Group != "d" || fmt.Sprint(out.Partitions) != fmt.Sprint([]offsetDeleted{{Topic: "other", Deleted: true}}) {
		t.Errorf("JSON = %+v", out)
	}
	if got := c.committed("d"); got != "events/1=2" {
		t.Fatalf("after deleting other committed %q", got)
	}

	c.commit("live", "events", 0, 1, "other", 0, 1)
	c.joinGroup("live", "events")
	r = c.run("", "group", "delete-offsets", "live", "--topic", "events:0", "--topic", "other")
	wantFailure(t, r, ExitFailure, `delete offset of group "live" topic "events" partition 0: GROUP_SUBSCRIBED_TO_TOPIC`)
	if !containsRow(r.stdout, "live", "other", "0", "deleted") {
		t.Errorf("the unsubscribed topic's offset was not deleted:\n%s", r.stdout)
	}
	if got := c.committed("live"); got != "events/0=1" {
		t.Errorf("live committed %q, want only events/0=1", got)
	}

	wantFailure(t, c.run("", "group", "delete-offsets", "d", "--topic", "nope"), ExitFailure, `topic "nope" does not exist`)
	wantFailure(t, c.run("", "group", "delete-offsets", "missing", "--topic", "other"), ExitFailure,
		`group "missing" does not exist`)
}

func TestGroupUsageErrors(t *testing.T) {
	c := newTestCluster(t, "t")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"group", "lsit"}, `unknown command "lsit" for "stele group"; did you mean "list"?`},
		{[]string{"group", "list", "x"}, `unexpected argument "x"`},
		{[]string{"group", "list", "--state", "Sleeping"}, `invalid --state "Sleeping": valid states are`},
		{[]string{"group", "describe"}, "missing GROUP argument (one or more)"},
		{[]string{"group", "delete"}, "missing GROUP argument (one or more)"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t"}, "say where to move the offsets"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--shift-by", "1"}, "give only one of --to-earliest, --shift-by"},
		{[]string{"group", "reset-offsets", "g", "--to-latest"}, "--topic T[:P,...] or --all-topics"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--all-topics", "--to-latest"}, "either --topic or --all-topics"},
		{[]string{"group", "reset-offsets", "g", "--topic", "t:x", "--to-latest"}, `invalid --topic "t:x": partition "x"`},
		{[]string{"group", "reset-offsets", "g", "--topic", ":1", "--to-latest"}, `invalid --topic ":1"`},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"}, `invalid --to-datetime "yesterday"`},
		{[]string{"group", "reset-offsets", "g", "--topic", "t", "--to-offset", "x"}, `invalid argument "x"`},
		{[]string{"group", "reset-offsets", "--topic", "t", "--to-latest"}, "missing GROUP argument"},
		{[]string{"group", "delete-offsets", "g"}, "say which offsets to delete"},
		{[]string{"consume", "t", "--group", "g", "--partition", "0"}, "--partition cannot be used with --group"},
		{[]string{"consume", "t", "--group", ""}, "--group must not be empty"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			wantFailure(t, c.run("", tc.args...), ExitUsage, tc.want)
		})
	}
}

func TestParseDateTime(t *testing.T) {
	base := time.Date(2024, 5, 1, 12, 3, 4, 500_000_000, time.UTC).UnixMilli()
	for in, want := range map[string]int64{
		"2024-05-01T12:03:04.500":          base,
		"2024-05-01T12:03:04.5Z":           base,
		"2024-05-01T14:03:04.500+02:00":    base,
		"2024-05-01T14:03:04.500+0200":     base,
		"2024-05-01T14:03:04.500+02":       base,
		"2024-05-01T10:03:04.500-02:00":    base,
		"2024-05-01T12:03:04Z":             base - 500,
		"2024-05-01T12:03:04":              base - 500,
		"2024-05-01T12:03:04.500123456Z":   base,
		"2024-05-01T12:03:04.500123+00:00": base,
	} {
		got, err := parseDateTime(in)
		if err != nil || got != want {
			t.Errorf("parseDateTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "2024-05-01", "2024-05-01 12:03:04", "2024-13-01T12:03:04", "2024-05-01T12:03:04+5", "now"} {
		if _, err := parseDateTime(bad); err == nil {
			t.Errorf("parseDateTime(%q) succeeded", bad)
		}
	}
}

func TestParseTopicSpecs(t *testing.T) {
	specs, err := parseTopicSpecs([]string{"a:2,0", "b", "a:1,2", "b:3", "c:0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(specs); got != "[{a [2 0 1]} {b []} {c [0]}]" {
		t.Errorf("specs = %s", got)
	}
	if specs[1].partitions != nil {
		t.Errorf("b named without partitions must mean all of them: %v", specs[1].partitions)
	}
	for _, bad := range []string{"", ":", "a:", "a:-1", "a:1,,2", "a:99999999999"} {
		if _, err := parseTopicSpec(bad); err == nil {
			t.Errorf("parseTopicSpec(%q) succeeded", bad)
		} else if !errors.As(err, new(usageError)) {
			t.Errorf("parseTopicSpec(%q): %v is not a usage error", bad, err)
		}
	}
}

// FuzzParseTopicSpec checks that any --topic value either parses into a
// non-empty topic with partitions from 0, or is a usage error.
func FuzzParseTopicSpec(f *testing.F) {
	for _, s := range []string{"orders", "orders:0", "orders:0,1,2", "a:b:1", ":", "x:-1", "x:1,,", "x: 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := parseTopicSpec(s)
		if err != nil {
			if !errors.As(err, new(usageError)) {
				t.Fatalf("parseTopicSpec(%q): %v is not a usage error", s, err)
			}
			return
		}
		if strings.TrimSpace(spec.topic) == "" {
			t.Fatalf("parseTopicSpec(%q) gave an empty topic", s)
		}
		for _, p := range spec.partitions {
			if p < 0 {
				t.Fatalf("parseTopicSpec(%q) gave partition %d", s, p)
			}
		}
	})
}

// FuzzParseDateTime checks that --to-datetime never panics and that what
// it accepts in Kafka's zone-less format is UTC.
func FuzzParseDateTime(f *testing.F) {
	for _, s := range []string{"2024-05-01T12:03:04.500", "2024-05-01T12:03:04Z", "2024-05-01T12:03:04.5+02",
		"2024-05-01T12:03:04.500+0200", "9999-12-31T23:59:59.999", "2024-02-30T00:00:00", "T"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := parseDateTime(s)
		if err != nil {
			return
		}
		if kafkaDateTime.MatchString(s) && !strings.ContainsAny(s[19:], "Z+-") {
			u, err := time.Parse("2006-01-02T15:04:05", s[:19])
			if err != nil {
				t.Fatalf("parseDateTime(%q) accepted what time.Parse refuses: %v", s, err)
			}
			if want := u.UnixMilli(); ms < want || ms >= want+1000 {
				t.Fatalf("parseDateTime(%q) = %d, not UTC (%d)", s, ms, want)
			}
		}
	})
}
