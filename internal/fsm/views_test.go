package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/views"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// openViews opens a state machine at the newest app version.
func openViews(t *testing.T) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, OffsetsRetentionMs: 60_000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// viewRec is one record of a partition as a test compares them:
// "subject value <- source" ("" for a record of a source).
func viewRecs(t *testing.T, f *FSM, topic string, pi int32) []string {
	t.Helper()
	p := f.View().Partition(topic, pi)
	if p == nil {
		t.Fatalf("%s-%d does not exist", topic, pi)
	}
	var out []string
	for off := p.LogStartOffset(); off < p.LastStableOffset(); {
		data, err := p.ReadCommitted(off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		batches, err := record.Split(data)
		if err != nil || len(batches) == 0 {
			t.Fatalf("%s-%d@%d: %v", topic, pi, off, err)
		}
		for _, b := range batches {
			h, recs, err := record.Records(b)
			if err != nil {
				t.Fatal(err)
			}
			off = h.LastOffset() + 1
			if h.Control() {
				continue
			}
			if h.Transactional() && p.InAbortedTxn(h.ProducerID, h.BaseOffset) {
				continue
			}
			for _, r := range recs {
				var sub, src string
				for _, hd := range r.Headers {
					switch hd.Key {
					case subject.Header:
						sub = string(hd.Value)
					case views.SourceHeader:
						src = string(hd.Value)
					}
				}
				s := fmt.Sprintf("%d:%s %s", r.Offset, sub, r.Value)
				if src != "" {
					s += " <- " + src
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// sourceMatches is what a view of topic's partition pi over pat should
// hold: its records that match, in order, each named by its source.
func sourceMatches(t *testing.T, f *FSM, topic string, pi int32, pat string, from int64) []string {
	t.Helper()
	var out []string
	for _, s := range viewRecs(t, f, topic, pi) {
		off, rest, _ := strings.Cut(s, ":")
		sub, value, _ := strings.Cut(rest, " ")
		var o int64
		fmt.Sscan(off, &o)
		if sub != "" && o >= from && subject.MustPattern(pat).Match([]byte(sub)) {
			out = append(out, sub+" "+value+" <- "+topic+"/"+fmt.Sprint(pi)+"/"+off)
		}
	}
	return out
}

// withoutOffsets drops the view offsets of viewRecs' entries.
func withoutOffsets(rs []string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		_, out[i], _ = strings.Cut(r, ":")
	}
	return out
}

func subjectRecords(t *testing.T, pid int64, seq int32, txn bool, subjects ...string) []byte {
	t.Helper()
	recs := make([]record.Record, len(subjects))
	for i, s := range subjects {
		recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte("k" + s), Value: []byte(fmt.Sprintf("v%d-%s", seq+int32(i), s))}
		if s != "" {
			recs[i].Headers = []record.RecordHeader{{Key: subject.Header, Value: []byte(s)}}
		}
	}
	h := record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	if pid >= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, 0, seq
	}
	if txn {
		h.Attributes = 0x10
	}
	b, err := record.Build(h, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestViews: a view holds, in its own dense offsets, exactly the records
// of its sources applied after it was made whose subjects match, each
// naming its source record; partition order keeps each source partition's
// order (and grows with the source), global order the chain's; a
// transaction's records arrive when it commits and never when it aborts;
// a view is read-only and its sources cannot be deleted before it; its log
// start follows its sources'; and a second state machine fed the same
// blocks has the same app hashes.
func TestViews(t *testing.T) {
	d := &groupDriver{t: t, f: openViews(t), now: t0}
	mk := func(name string, cfg ...string) topics.CreateTopic {
		c := topics.CreateTopic{Name: name, Partitions: 1, ReplicationFactor: -1}
		for i := 0; i < len(cfg); i += 2 {
			c.Configs = append(c.Configs, topics.ConfigEntry{Name: cfg[i], Value: cfg[i+1]})
		}
		return c
	}
	orders := mk("orders")
	orders.Partitions = 3
	rs := d.block(0, orders, mk("audit"),
		mk("fr", "stele.view.from", "orders", "stele.view.subject", "orders.*.fr.>"),
		mk("all", "stele.view.from", "orders, audit", "stele.view.order", "global"),
		mk("nosrc", "stele.view.from", "missing"),
		mk("ofview", "stele.view.from", "fr"),
		mk("self", "stele.view.from", "self"),
		mk("orphan", "stele.view.subject", "a.b"),
		mk("compacted", "stele.view.from", "orders", "cleanup.policy", "compact"),
		mk("badpat", "stele.view.from", "orders", "stele.view.subject", "a.>.b"),
		mk("twice", "stele.view.from", "orders,orders"))
	for i, want := range []int16{0, 0, 0, 0, kerr.UnknownTopicOrPartition.Code, kerr.InvalidConfig.Code, kerr.InvalidConfig.Code,
		kerr.InvalidConfig.Code, kerr.InvalidConfig.Code, kerr.InvalidConfig.Code, kerr.InvalidConfig.Code} {
		wantCode(t, fmt.Sprintf("create %d", i), rs[i], want)
	}
	if n := len(d.f.View().Topic("fr").Partitions); n != 3 {
		t.Fatalf("view fr has %d partitions, want its source's 3", n)
	}
	if n := len(d.f.View().Topic("all").Partitions); n != 1 {
		t.Fatalf("global view all has %d partitions, want 1", n)
	}
	for k, want := range map[string]string{"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete", "stele.view.subject": "orders.*.fr.>"} {
		if got := d.f.View().Topic("fr").Configs[k]; got != want {
			t.Fatalf("view fr: %s %q, want %q", k, got, want)
		}
	}

	// Plain, idempotent and transactional records.
	pid := d.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0].ProducerID
	idem := d.block(10, producers.InitProducerID{TimeoutMs: 60_000})[0].ProducerID
	for i, r := range d.block(10,
		topics.Produce{Topic: "orders", Partition: 0, Records: subjectRecords(t, -1, 0, false, "orders.eu.fr.created", "orders.us.us.created", "", "orders.eu.fr.paid")},
		topics.Produce{Topic: "audit", Partition: 0, Records: subjectRecords(t, -1, 0, false, "audit.login")},
		topics.Produce{Topic: "orders", Partition: 1, Records: subjectRecords(t, idem, 0, false, "orders.eu.de.created", "orders.ap.fr.created")},
		topics.Produce{Topic: "orders", Partition: 1, Records: subjectRecords(t, idem, 0, false, "orders.eu.de.created", "orders.ap.fr.created")}, // a retry: not copied twice
		topics.Produce{Topic: "orders", Partition: 2, Records: subjectRecords(t, -1, 0, false, "nothing", "else")},
	) {
		wantCode(t, fmt.Sprintf("produce %d", i), r, 0)
	}
	txn := func(seq int32, commit bool, subjects ...string) {
		wantCode(t, "add", d.block(10, producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Topic: "orders", Partition: 0})[0], 0)
		wantCode(t, "produce", d.block(10, topics.Produce{Topic: "orders", Partition: 0, Records: subjectRecords(t, pid, seq, true, subjects...)},
			topics.Produce{Topic: "orders", Partition: 0, Records: subjectRecords(t, -1, 100+seq, false, "orders.xx.fr.between")})[0], 0)
		if got := viewRecs(t, d.f, "fr", 0); slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, subjects[0]) }) {
			t.Fatalf("an undecided transaction's record is in the view: %v", got)
		}
		wantCode(t, "end", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Commit: commit})[0], 0)
	}
	txn(0, false, "orders.eu.fr.aborted")
	txn(1, true, "orders.eu.fr.committed", "orders.eu.de.committed")
	d.block(10, topics.Produce{Topic: "audit", Partition: 0, Records: subjectRecords(t, -1, 9, false, "audit.logout")})

	check := func(f *FSM, what string, froms map[int32]int64) {
		t.Helper()
		for pi := int32(0); pi < 3; pi++ {
			want := sourceMatches(t, f, "orders", pi, "orders.*.fr.>", froms[pi])
			if got := withoutOffsets(viewRecs(t, f, "fr", pi)); !slices.Equal(got, want) {
				t.Fatalf("%s: view fr-%d:\n got %q\nwant %q", what, pi, got, want)
			}
		}
	}
	check(d.f, "applied", nil)
	fr0 := viewRecs(t, d.f, "fr", 0)
	if len(fr0) != 5 || !strings.HasPrefix(fr0[0], "0:") || !strings.HasPrefix(fr0[4], "4:") || !strings.Contains(fr0[3], "fr.committed") || slices.ContainsFunc(fr0, func(s string) bool { return strings.Contains(s, "aborted") }) {
		t.Fatalf("view fr-0 is %q: want five records at dense offsets 0-4 in the source's read_committed order, the aborted transaction's nowhere", fr0)
	}
	// The global view: every record with a subject, in the chain's order.
	all := withoutOffsets(viewRecs(t, d.f, "all", 0))
	wantAll := []string{
		"orders.eu.fr.created v0-orders.eu.fr.created <- orders/0/0", "orders.us.us.created v1-orders.us.us.created <- orders/0/1",
		"orders.eu.fr.paid v3-orders.eu.fr.paid <- orders/0/3", "audit.login v0-audit.login <- audit/0/0",
		"orders.eu.de.created v0-orders.eu.de.created <- orders/1/0", "orders.ap.fr.created v1-orders.ap.fr.created <- orders/1/1",
		"nothing v0-nothing <- orders/2/0", "else v1-else <- orders/2/1",
		"orders.xx.fr.between v100-orders.xx.fr.between <- orders/0/5",
		"orders.eu.fr.committed v1-orders.eu.fr.committed <- orders/0/7", "orders.eu.de.committed v2-orders.eu.de.committed <- orders/0/8",
		"orders.xx.fr.between v101-orders.xx.fr.between <- orders/0/9",
		"audit.logout v9-audit.logout <- audit/0/1",
	}
	if !slices.Equal(all, wantAll) {
		t.Fatalf("global view:\n got %q\nwant %q", all, wantAll)
	}

	// Read by pattern through its own summaries.
	if got, _ := readSubjects(t, d.f, "all", subject.MustPattern("audit.>"), 0, 100); !slices.Equal(got, []string{"0/3=audit.login", "0/12=audit.logout"}) {
		t.Fatalf("the global view read by audit.>: %q", got)
	}
	if got, _ := readSubjects(t, d.f, "fr", subject.MustPattern("*.*.*.paid"), 0, 100); !slices.Equal(got, []string{"0/1=orders.eu.fr.paid"}) {
		t.Fatalf("view fr read by *.*.*.paid: %q", got)
	}

	// Read-only; its sources outlive it.
	for i, c := range []struct {
		cmd  core.Command
		code int16
		msg  string
	}{
		{topics.Produce{Topic: "fr", Partition: 0, Records: subjectRecords(t, -1, 0, false, "orders.eu.fr.x")}, kerr.InvalidTopicException.Code, "topic 'fr' is a view of orders"},
		{topics.DeleteRecords{Topic: "fr", Partition: 0, Offset: 1}, kerr.InvalidTopicException.Code, "read-only"},
		{topics.CreatePartitions{Name: "fr", Count: 5}, kerr.InvalidTopicException.Code, "read-only"},
		{topics.AlterConfigs{Topic: "fr", Incremental: true, Changes: []topics.ConfigChange{{Name: "retention.ms", Value: "1000"}}}, kerr.PolicyViolation.Code, "fixed when it is created"},
		{topics.AlterConfigs{Topic: "orders", Incremental: true, Changes: []topics.ConfigChange{{Name: "stele.view.from", Value: "audit"}}}, kerr.PolicyViolation.Code, "only when a view is created"},
		{topics.DeleteTopic{Name: "orders"}, kerr.PolicyViolation.Code, "source of the view(s) all, fr"},
		{topics.DeleteTopic{Name: "audit"}, kerr.PolicyViolation.Code, "source of the view(s) all"},
	} {
		r := d.block(10, c.cmd)[0]
		if r.Code != c.code || !strings.Contains(r.Message, c.msg) {
			t.Fatalf("refusal %d: code %d %q, want %d %q", i, r.Code, r.Message, c.code, c.msg)
		}
	}

	// A produced record may not name a source.
	forged, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{
		{Value: []byte("x"), Headers: []record.RecordHeader{{Key: subject.Header, Value: []byte("orders.eu.fr.x")}, {Key: views.SourceHeader, Value: []byte("orders/0/0")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := d.block(10, topics.Produce{Topic: "orders", Partition: 0, Records: forged})[0]; r.Code != kerr.InvalidRecord.Code ||
		len(r.RecordErrors) != 1 || !strings.Contains(r.RecordErrors[0].Message, "written by views only") {
		t.Fatalf("a record with a stele-source header: %d %q %+v", r.Code, r.Message, r.RecordErrors)
	}

	// A source growing past a partition-order view grows the view.
	wantCode(t, "grow", d.block(10, topics.CreatePartitions{Name: "orders", Count: 4})[0], 0)
	wantCode(t, "produce p3", d.block(10, topics.Produce{Topic: "orders", Partition: 3, Records: subjectRecords(t, -1, 0, false, "orders.eu.fr.p3")})[0], 0)
	if got := viewRecs(t, d.f, "fr", 3); len(got) != 1 || !strings.HasSuffix(got[0], "<- orders/3/0") {
		t.Fatalf("view fr-3: %q", got)
	}

	// A source whose subjects are in its JSON values, compressed: the
	// view's records carry their subjects in the header.
	wantCode(t, "create js", d.block(10, mk("js", "stele.subject.from", "json:/meta/subject"))[0], 0)
	wantCode(t, "create jsv", d.block(10, mk("jsv", "stele.view.from", "js", "stele.view.subject", "orders.eu.>"))[0], 0)
	wantCode(t, "produce js", d.block(10, topics.Produce{Topic: "js", Partition: 0, Records: subjectBatch(t, t0, record.CodecZstd, true, "orders.eu.fr.x", "", "orders.us.x.y", "orders.eu.de.z")})[0], 0)
	if got := viewRecs(t, d.f, "jsv", 0); len(got) != 2 || !strings.HasPrefix(got[0], "0:orders.eu.fr.x {") || !strings.HasSuffix(got[0], "<- js/0/0") ||
		!strings.HasPrefix(got[1], "1:orders.eu.de.z {") || !strings.HasSuffix(got[1], "<- js/0/3") {
		t.Fatalf("view jsv: %q", got)
	}

	// The log start follows the sources'.
	wantCode(t, "trim orders-0", d.block(10, topics.DeleteRecords{Topic: "orders", Partition: 0, Offset: 4})[0], 0)
	if p := d.f.View().Partition("fr", 0); p.LogStartOffset() != 2 {
		t.Fatalf("view fr-0 starts at %d after its source's records 0-3 left, want 2", p.LogStartOffset())
	}
	if p := d.f.View().Partition("all", 0); p.LogStartOffset() != 3 {
		t.Fatalf("global view starts at %d, want 3: its first batch (orders/0/0-3) left, audit/0/0 (its offset 3) is still in its source", p.LogStartOffset())
	}
	wantCode(t, "trim audit", d.block(10, topics.DeleteRecords{Topic: "audit", Partition: 0, Offset: 1})[0], 0)
	if p := d.f.View().Partition("all", 0); p.LogStartOffset() != 4 {
		t.Fatalf("global view starts at %d, want 4 (its first batch still in a source is orders/1's)", p.LogStartOffset())
	}
	check(d.f, "trimmed", map[int32]int64{0: 4})

	// Replayed: the same app hashes, the same views.
	g := d.replayInto(openViews(t))
	check(g, "replayed", map[int32]int64{0: 4})
	if a, b := viewRecs(t, g, "all", 0), viewRecs(t, d.f, "all", 0); !slices.Equal(a, b) {
		t.Fatalf("global views differ:\n%q\n%q", a, b)
	}

	// Deleted with its views first, in one transaction (--cascade), a
	// source goes.
	out, err := d.f.ApplyBlock(core.Block{Height: int64(len(d.blocks) + 1), TimeMs: d.now + 10, Txs: [][]byte{
		tx(900, topics.DeleteTopic{Name: "fr"}, topics.DeleteTopic{Name: "all"}, topics.DeleteTopic{Name: "orders"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out.Txs[0].Results {
		wantCode(t, fmt.Sprintf("cascade %d", i), r, 0)
	}
}

// TestViewsBeforeVersion12: under app version 11 the stele.view.* configs
// are unknown, as to the binaries before views.
func TestViewsBeforeVersion12(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 11})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "a", Partitions: 1, ReplicationFactor: -1}),
		tx(2, topics.CreateTopic{Name: "v", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.view.from", Value: "a"}}}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := out.Txs[1].Results[0]; r.Code != kerr.InvalidConfig.Code || !strings.Contains(r.Message, "unknown topic config name") {
		t.Fatalf("a view under version 11: code %d %q", r.Code, r.Message)
	}
}

// TestViewsInATenant: a tenant's view names its sources as the tenant
// does, and reads its own tenant's topic of that name, never the default
// tenant's; its records name their sources by the tenant's names.
func TestViewsInATenant(t *testing.T) {
	d := &groupDriver{t: t, f: openViews(t), now: t0}
	wantCode(t, "tenant", d.block(0, CreateTenant{Name: "acme"})[0], 0)
	for i, r := range d.block(10,
		topics.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: -1},
		topics.CreateTopic{Name: "acme~orders", Partitions: 2, ReplicationFactor: -1},
		topics.CreateTopic{Name: "acme~v", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.view.from", Value: "orders"}}},
		topics.CreateTopic{Name: "acme~w", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.view.from", Value: "acme~orders"}}},
	) {
		want := int16(0)
		if i == 3 {
			want = kerr.InvalidConfig.Code // not a topic name: the tenant's names have no prefix
		}
		wantCode(t, fmt.Sprintf("create %d", i), r, want)
	}
	if n := len(d.f.View().Topic("acme~v").Partitions); n != 2 {
		t.Fatalf("acme~v has %d partitions, want acme~orders' 2", n)
	}
	d.block(10, topics.Produce{Topic: "orders", Partition: 0, Records: subjectRecords(t, -1, 0, false, "a.default")},
		topics.Produce{Topic: "acme~orders", Partition: 1, Records: subjectRecords(t, -1, 0, false, "a.acme")})
	if got := viewRecs(t, d.f, "acme~v", 1); len(got) != 1 || got[0] != "0:a.acme v0-a.acme <- orders/1/0" {
		t.Fatalf("acme~v-1: %q", got)
	}
	if got := viewRecs(t, d.f, "acme~v", 0); len(got) != 0 {
		t.Fatalf("acme~v-0 holds the default tenant's record: %q", got)
	}
	if r := d.block(10, topics.DeleteTopic{Name: "orders"})[0]; r.Code != 0 {
		t.Fatalf("the default tenant's orders is no source of acme's view: %d %s", r.Code, r.Message)
	}
	if r := d.block(10, topics.DeleteTopic{Name: "acme~orders"})[0]; r.Code != kerr.PolicyViolation.Code || !strings.Contains(r.Message, "view(s) v:") {
		t.Fatalf("deleting acme~orders: %d %s", r.Code, r.Message)
	}
}

// TestViewsRandom: random runs of plain, idempotent and transactional
// produces (two transactional producers, their transactions open across
// blocks, committed or aborted), growing partitions and DeleteRecords on
// two sources, with a partition-order view and a global one over both.
// After every block: each source partition's records in the partition
// view are exactly its matching records as a read_committed reader reads
// them, in order; the global view holds each record with a subject of
// both sources once, each source partition's in order; and a second state
// machine fed the same blocks has the same app hashes.
func TestViewsRandom(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { viewsRandomRun(t, seed) })
	}
}

func viewsRandomRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 57))
	d := &groupDriver{t: t, f: openViews(t), now: t0}
	mk := func(name string, parts int32, cfg ...string) topics.CreateTopic {
		c := topics.CreateTopic{Name: name, Partitions: parts, ReplicationFactor: -1}
		for i := 0; i < len(cfg); i += 2 {
			c.Configs = append(c.Configs, topics.ConfigEntry{Name: cfg[i], Value: cfg[i+1]})
		}
		return c
	}
	for i, r := range d.block(0, mk("a", 2), mk("b", 1),
		mk("pv", 1, "stele.view.from", "a,b", "stele.view.subject", "x.*.>"),
		mk("gv", 1, "stele.view.from", "a,b", "stele.view.order", "global")) {
		wantCode(t, fmt.Sprint("create ", i), r, 0)
	}
	type txnState struct {
		id    string
		pid   int64
		seq   map[string]int32 // by topic/partition
		open  bool
		added map[string]bool
	}
	txns := []*txnState{{id: "t1"}, {id: "t2"}}
	for _, x := range txns {
		x.pid = d.block(10, producers.InitProducerID{TransactionalID: x.id, TimeoutMs: 600_000})[0].ProducerID
		x.seq = map[string]int32{}
	}
	idem := d.block(10, producers.InitProducerID{TimeoutMs: 600_000})[0].ProducerID
	idemSeq := map[string]int32{}
	parts := map[string]int32{"a": 2, "b": 1}
	n := 0
	subjectsOf := []string{"x.a.1", "x.b.2", "y.a", "x.c", ""}
	batch := func(pid int64, seq int32, txn bool) []byte {
		k := 1 + rng.IntN(3)
		subs := make([]string, k)
		for i := range subs {
			subs[i] = subjectsOf[rng.IntN(len(subjectsOf))]
		}
		n++
		recs := make([]record.Record, k)
		for i, s := range subs {
			recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte(fmt.Sprintf("k%d", rng.IntN(5))), Value: []byte(fmt.Sprintf("r%d-%d", n, i))}
			if s != "" {
				recs[i].Headers = []record.RecordHeader{{Key: subject.Header, Value: []byte(s)}}
			}
		}
		h := record.Header{FirstTimestamp: t0 + int64(n), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
		if pid >= 0 {
			h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, 0, seq
		}
		if txn {
			h.Attributes = 0x10
		}
		b, err := record.Build(h, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for step := 0; step < 60; step++ {
		var cmds []core.Command
		for range 1 + rng.IntN(4) {
			topic := []string{"a", "b"}[rng.IntN(2)]
			p := int32(rng.IntN(int(parts[topic])))
			tp := fmt.Sprintf("%s/%d", topic, p)
			switch r := rng.IntN(10); {
			case r < 3:
				cmds = append(cmds, topics.Produce{Topic: topic, Partition: p, Records: batch(-1, 0, false)})
			case r < 5:
				b := batch(idem, idemSeq[tp], false)
				h, _ := record.ParseHeader(b)
				idemSeq[tp] += h.LastOffsetDelta + 1
				cmds = append(cmds, topics.Produce{Topic: topic, Partition: p, Records: b})
			case r < 8:
				x := txns[rng.IntN(2)]
				x.open = true
				if x.added == nil {
					x.added = map[string]bool{}
				}
				if !x.added[tp] {
					x.added[tp] = true
					cmds = append(cmds, producers.AddPartitionsToTxn{TransactionalID: x.id, ProducerID: x.pid, Topic: topic, Partition: p})
				}
				b := batch(x.pid, x.seq[tp], true)
				h, _ := record.ParseHeader(b)
				x.seq[tp] += h.LastOffsetDelta + 1
				cmds = append(cmds, topics.Produce{Topic: topic, Partition: p, Records: b})
			case r < 9:
				x := txns[rng.IntN(2)]
				if x.open {
					cmds = append(cmds, producers.EndTxn{TransactionalID: x.id, ProducerID: x.pid, Commit: rng.IntN(3) > 0})
					x.open, x.added = false, nil
				}
			default:
				if rng.IntN(3) == 0 && parts[topic] < 4 {
					parts[topic]++
					cmds = append(cmds, topics.CreatePartitions{Name: topic, Count: parts[topic]})
				} else if tv := d.f.View().Partition(topic, p); tv != nil && tv.LastStableOffset() > tv.LogStartOffset() {
					cmds = append(cmds, topics.DeleteRecords{Topic: topic, Partition: p, Offset: tv.LogStartOffset() + 1 + rng.Int64N(tv.LastStableOffset()-tv.LogStartOffset())})
				}
			}
		}
		for i, r := range d.block(10, cmds...) {
			if r.Code != 0 {
				t.Fatalf("step %d command %d (%T): %d %s", step, i, cmds[i], r.Code, r.Message)
			}
		}
		checkViewsAgainstSources(t, d.f, parts, fmt.Sprintf("seed %d step %d", seed, step))
	}
	d.replayInto(openViews(t))
}

// checkViewsAgainstSources checks views pv (partition order, x.*.>) and gv
// (global, >) of a and b against the sources' read_committed records from
// the views' first surviving record of each source partition on.
func checkViewsAgainstSources(t *testing.T, f *FSM, parts map[string]int32, what string) {
	t.Helper()
	type rec struct{ sub, value, src string }
	split := func(s string) rec {
		_, rest, _ := strings.Cut(s, ":")
		body, src, _ := strings.Cut(rest, " <- ")
		sub, value, _ := strings.Cut(body, " ")
		return rec{sub, value, src}
	}
	for _, view := range []struct {
		name, pat string
		global    bool
	}{{"pv", "x.*.>", false}, {"gv", ">", true}} {
		got := map[string][]rec{} // by source topic/partition
		seen := map[string]bool{}
		vparts := len(f.View().Topic(view.name).Partitions)
		for vp := 0; vp < vparts; vp++ {
			for _, s := range viewRecs(t, f, view.name, int32(vp)) {
				r := split(s)
				if seen[r.src] {
					t.Fatalf("%s: view %s holds %s twice", what, view.name, r.src)
				}
				seen[r.src] = true
				st, sp, _, err := ParseViewSource([]byte(r.src))
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if !view.global && sp != int32(vp) {
					t.Fatalf("%s: view %s-%d holds %s", what, view.name, vp, r.src)
				}
				key := fmt.Sprintf("%s/%d", st, sp)
				got[key] = append(got[key], r)
			}
		}
		for _, topic := range []string{"a", "b"} {
			for p := int32(0); p < parts[topic]; p++ {
				key := fmt.Sprintf("%s/%d", topic, p)
				var want []rec
				for _, s := range sourceMatches(t, f, topic, p, view.pat, f.View().Partition(topic, p).LogStartOffset()) {
					want = append(want, split("0:"+s))
				}
				// The view holds a suffix of every matching record that
				// became stable, the source (from its log start) another:
				// the view's is the longer, as it drops a batch only once
				// all of it left the source.
				have := got[key]
				if len(have) < len(want) || !slices.Equal(have[len(have)-len(want):], want) {
					t.Fatalf("%s: view %s's records of %s:\n got %v\nwant a suffix %v", what, view.name, key, have, want)
				}
			}
		}
	}
}
