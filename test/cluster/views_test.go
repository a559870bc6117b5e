package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

// TestViewsAgree: views (docs/subjects.md) on four brokers, one of them
// killed with SIGKILL and restarted while records are produced,
// idempotently and in committed and aborted transactions. A
// partition-order view read by an assigned franz-go consumer holds, per
// partition, exactly its source partition's matching committed records in
// the order a read_committed reader of the source reads them, each naming
// its source record; a global view read by a consumer group holds every
// committed record with a subject of both sources, once, each source
// partition's in order; an assigned consumer of the global view and a
// group on the partition-order one read the same as the others; and every
// broker serves the same views.
func TestViewsAgree(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	all := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, all, "orders", 3, nil)
	harness.CreateTopic(t, all, "audit", 1, nil)
	str := func(s string) *string { return &s }
	harness.CreateTopic(t, all, "fr", -1, map[string]*string{"stele.view.from": str("orders"), "stele.view.subject": str("orders.*.fr.>")})
	harness.CreateTopic(t, all, "everything", -1, map[string]*string{"stele.view.from": str("orders,audit"), "stele.view.order": str("global")})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	txn, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.TransactionalID("views-tx"), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	subjects := []string{"orders.eu.fr.created", "orders.eu.fr.paid", "orders.eu.de.created", "orders.us.ny.created", "audit.login", ""}
	rec := func(i int) *kgo.Record {
		s := subjects[i%len(subjects)]
		topic := "orders"
		if strings.HasPrefix(s, "audit") {
			topic = "audit"
		}
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i)}
		if s != "" {
			r.Headers = []kgo.RecordHeader{{Key: "stele-subject", Value: []byte(s)}}
		}
		return r
	}
	produce := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, rec(i))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %d..%d: %v", from, to, err)
		}
	}
	transaction := func(from, to int, commit bool) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			r := rec(i)
			r.Value = fmt.Appendf(r.Value, "-tx-%v", commit)
			txn.Produce(ctx, r, nil)
		}
		if err := txn.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		produce(to, to+12) // records after the open transaction's
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	produce(0, 120)
	transaction(120, 150, true)
	c.Kill9(3)
	produce(200, 320)
	transaction(320, 350, false)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "fr", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Fatalf("producing to a view: %v, want INVALID_TOPIC_EXCEPTION", err)
	}
	c.Restart(3)
	transaction(400, 430, true)
	produce(500, 560)
	c.WaitCaughtUp(2*time.Minute, 3, 0, 1, 2)
	c.CheckAppHashes(time.Minute, c.All()...)

	// What the views should hold: the sources read by read_committed
	// readers, by partition, as "value@topic/partition/offset".
	type entry struct{ subject, at string }
	sources := map[string][]entry{}
	for _, topic := range []string{"orders", "audit"} {
		for _, r := range readAll(t, ctx, all, topic, kgo.ReadCommitted()) {
			sources[fmt.Sprintf("%s/%d", topic, r.Partition)] = append(sources[fmt.Sprintf("%s/%d", topic, r.Partition)],
				entry{header(r, "stele-subject"), fmt.Sprintf("%s@%s/%d/%d", r.Value, topic, r.Partition, r.Offset)})
		}
	}
	for p := int32(0); p < 3; p++ {
		var want []string
		for _, e := range sources[fmt.Sprintf("orders/%d", p)] {
			if strings.HasPrefix(e.subject, "orders.") && strings.Contains(e.subject, ".fr.") {
				want = append(want, e.at)
			}
		}
		var got []string
		for _, r := range readAll(t, ctx, all, "fr", kgo.ReadUncommitted()) {
			if r.Partition == p {
				got = append(got, fmt.Sprintf("%s@%s", r.Value, header(r, "stele-source")))
			}
		}
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Fatalf("view fr-%d:\n got %q\nwant %q", p, got, want)
		}
		if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "-tx-false") }) {
			t.Fatalf("view fr-%d holds an aborted record: %q", p, got)
		}
		t.Logf("view fr-%d: %d records, as its source", p, len(got))
	}

	// The global view, read by a consumer group.
	wantCount := 0
	for _, es := range sources {
		for _, e := range es {
			if e.subject != "" {
				wantCount++
			}
		}
	}
	global := groupRead(t, ctx, all, "everything", "view-readers", wantCount)
	for src, es := range sources {
		var want, got []string
		for _, e := range es {
			if e.subject != "" {
				want = append(want, e.at)
			}
		}
		for _, r := range global {
			if s := fmt.Sprintf("%s@%s", r.Value, header(r, "stele-source")); strings.Contains(s, "@"+src+"/") {
				got = append(got, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the global view's records of %s:\n got %q\nwant %q", src, got, want)
		}
	}
	// Read without a group, the same records in the same order.
	var direct, grouped []string
	for _, r := range readAll(t, ctx, all, "everything", kgo.ReadCommitted()) {
		direct = append(direct, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	for _, r := range global {
		grouped = append(grouped, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	if !slices.Equal(direct, grouped) {
		t.Fatalf("the global view read by a group and by an assigned consumer differ:\n%q\n%q", grouped, direct)
	}
	t.Logf("the global view: %d records, every source partition's in order, by a group and by an assigned consumer", len(global))
	// The partition-order view read by a group: each partition as read by
	// an assigned consumer.
	frAll := readAll(t, ctx, all, "fr", kgo.ReadCommitted())
	byPart := func(rs []*kgo.Record) map[int32][]string {
		out := map[int32][]string{}
		for _, r := range rs {
			out[r.Partition] = append(out[r.Partition], fmt.Sprintf("%d:%s", r.Offset, r.Value))
		}
		return out
	}
	if a, b := byPart(groupRead(t, ctx, all, "fr", "fr-readers", len(frAll))), byPart(frAll); !maps.EqualFunc(a, b, slices.Equal) {
		t.Fatalf("view fr read by a group and by an assigned consumer differ:\n%v\n%v", a, b)
	}

	// Every broker serves the same views.
	get := func(node int, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + c.Nodes[node].HTTP + path)
		if err != nil {
			t.Fatalf("node%d GET %s: %v", node, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("node%d GET %s: %d %s", node, path, resp.StatusCode, body)
		}
		return string(body)
	}
	for _, path := range []string{"/v1/topics/everything/records?limit=10000&subject=%3E", "/v1/topics/fr/records?limit=10000&subject=*.*.fr.paid"} {
		var first string
		c.Eventually(30*time.Second, "every broker answers "+path+" alike", func() error {
			first = get(0, path)
			for _, i := range []int{1, 2, 3} {
				if got := get(i, path); got != first {
					return fmt.Errorf("node%d answers with %d bytes, node0 with %d", i, len(got), len(first))
				}
			}
			return nil
		})
		if strings.Count(first, `"offset":`) == 0 {
			t.Fatalf("%s: no records", path)
		}
	}
}

// groupRead reads n records of topic as a member of a consumer group
// (read_committed, from the start), and commits its offsets.
func groupRead(t *testing.T, ctx context.Context, seeds []string, topic, group string, n int) []*kgo.Record {
	t.Helper()
	g, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		fs := g.PollFetches(ctx)
		if err := fs.Err(); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) != n {
		t.Fatalf("group %s read %d records of %s, want %d", group, len(out), topic, n)
	}
	if err := g.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// readAll reads every record of topic from the start: until each
// partition's last record is at its high watermark's offset less one
// (a topic without transactions: a view), or else until nothing more
// arrives for five seconds (the records were produced before).
func readAll(t *testing.T, ctx context.Context, seeds []string, topic string, iso kgo.IsolationLevel) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for idle := time.Now(); time.Since(idle) < 5*time.Second && ctx.Err() == nil; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := fs.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			t.Fatal(err)
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n > 0 {
			idle = time.Now()
		}
	}
	return out
}

// header is a record's header's value ("" for none).
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
