package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// subjectBatch builds a batch of records with the given subjects (""
// for none) in the stele-subject header, or in the JSON value's
// meta.subject when json is set.
func subjectBatch(t testing.TB, ts int64, codec record.Codec, json bool, subjects ...string) []byte {
	t.Helper()
	recs := make([]record.Record, len(subjects))
	for i, s := range subjects {
		recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte(fmt.Sprintf("k%d", i%4)), Value: []byte(fmt.Sprintf("value %d %s", i, s))}
		switch {
		case json && s != "":
			recs[i].Value = []byte(fmt.Sprintf(`{"n": %d, "meta": {"subject": %q}}`, i, s))
		case json:
			recs[i].Value = []byte(fmt.Sprintf(`{"n": %d}`, i))
		case s != "":
			recs[i].Headers = []record.RecordHeader{{Key: "h", Value: []byte("x")}, {Key: subject.Header, Value: []byte(s)}}
		}
	}
	b, err := record.Build(record.Header{FirstTimestamp: ts, Attributes: int16(codec), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// subjectRec is a record's place and subject, as a scan finds it.
type subjectRec struct {
	partition int32
	offset    int64
	subject   string
}

// matching is what a reader finds without the summaries: recs's records
// from offset from in each partition whose subject matches pat, as
// "partition/offset=subject".
func matching(recs []subjectRec, pat subject.Pattern, from int64) []string {
	var out []string
	for _, r := range recs {
		if r.offset >= from && pat.Match([]byte(r.subject)) {
			out = append(out, fmt.Sprintf("%d/%d=%s", r.partition, r.offset, r.subject))
		}
	}
	return out
}

// scanSubjects reads every committed record of topic with a subject
// (header, or JSON at /meta/subject), partition by partition.
func scanSubjects(t *testing.T, f *FSM, topic string, json bool) []subjectRec {
	t.Helper()
	tv := f.View().Topic(topic)
	ptr, _ := subject.ParsePointer("/meta/subject")
	var out []subjectRec
	for _, p := range tv.Partitions {
		for off := p.LogStartOffset(); off < p.LastStableOffset(); {
			data, err := p.Read(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			batches, err := record.Split(data)
			if err != nil || len(batches) == 0 {
				t.Fatalf("%s-%d@%d: %v", topic, p.Index, off, err)
			}
			for _, b := range batches {
				h, recs, err := record.Records(b)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if h.Control() || r.Offset < off {
						continue
					}
					var s []byte
					if json {
						s, _, _ = ptr.FromJSON(r.Value)
					} else {
						for _, hd := range r.Headers {
							if hd.Key == subject.Header {
								s = hd.Value
							}
						}
					}
					if s != nil {
						out = append(out, subjectRec{p.Index, r.Offset, string(s)})
					}
				}
				off = h.LastOffset() + 1
			}
		}
	}
	return out
}

// readSubjects reads every match of pat from offset from in each
// partition through the summaries, limit records at a time.
func readSubjects(t *testing.T, f *FSM, topic string, pat subject.Pattern, from int64, limit int) ([]string, SubjectReadStats) {
	t.Helper()
	pos := map[int32]int64{}
	for pi := range f.View().Topic(topic).Partitions {
		pos[int32(pi)] = from
	}
	var out []string
	var stats SubjectReadStats
	for range 10_000 {
		recs, next, st, err := f.SubjectRecords(topic, pat, pos, limit)
		if err != nil {
			t.Fatal(err)
		}
		stats.Add(st)
		for _, r := range recs {
			out = append(out, fmt.Sprintf("%d/%d=%s", r.Partition, r.Offset, r.Subject))
		}
		if len(recs) == 0 {
			slices.Sort(out) // partition by partition across pages
			return sortByPartition(out), stats
		}
		pos = next
	}
	t.Fatal("reading never ended")
	return nil, stats
}

// sortByPartition orders "p/o=s" entries by partition, then offset.
func sortByPartition(es []string) []string {
	slices.SortFunc(es, func(a, b string) int {
		var pa, oa, pb, ob int64
		fmt.Sscanf(a, "%d/%d", &pa, &oa)
		fmt.Sscanf(b, "%d/%d", &pb, &ob)
		if pa != pb {
			return int(pa - pb)
		}
		return int(oa - ob)
	})
	return es
}

// subjectBlocks is a run of blocks producing subjects: few per batch and
// many (a summary of first tokens), every codec, a JSON topic, records
// without subjects, refused batches, and a log start moved by
// DeleteRecords.
func subjectBlocks(t testing.TB) []block {
	rng := rand.New(rand.NewPCG(21, 21))
	regions := []string{"eu", "us", "ap"}
	countries := []string{"fr", "de", "uk", "us", "jp"}
	events := []string{"created", "paid", "shipped"}
	sub := func() string {
		if rng.IntN(5) == 0 {
			return "" // no subject
		}
		if rng.IntN(50) == 0 {
			return "audit.rare"
		}
		return strings.Join([]string{"orders", regions[rng.IntN(3)], countries[rng.IntN(5)], events[rng.IntN(3)]}, ".")
	}
	codecs := []record.Codec{record.CodecNone, record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd}
	blocks := []block{{time: t0, txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "orders", Partitions: 3, ReplicationFactor: -1}),
		tx(2, topics.CreateTopic{Name: "js", Partitions: 2, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.subject.from", Value: "json:/meta/subject"}}}),
		tx(3, topics.CreateTopic{Name: "strict", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.subject.required", Value: "true"}}}),
	}}}
	n := 10
	for h := 2; h <= 30; h++ {
		ts := t0 + int64(h)*1000
		var txs [][]byte
		for pi := range 3 {
			size := 1 + rng.IntN(8)
			if h%7 == 0 {
				size = 200 // many subjects: a summary of first tokens
			}
			subs := make([]string, size)
			for i := range subs {
				subs[i] = sub()
				if h%7 == 0 {
					subs[i] = fmt.Sprintf("orders.%s.c%d.x", regions[i%3], i)
				}
			}
			n++
			txs = append(txs, tx(n, topics.Produce{Topic: "orders", Partition: int32(pi), Records: subjectBatch(t, ts, codecs[(h+pi)%5], false, subs...)}))
		}
		n++
		txs = append(txs, tx(n, topics.Produce{Topic: "js", Partition: int32(h % 2), Records: subjectBatch(t, ts, codecs[h%5], true, sub(), sub(), sub())}))
		switch h {
		case 5: // an invalid subject refuses its batch
			n++
			txs = append(txs, tx(n, topics.Produce{Topic: "orders", Partition: 0, Records: subjectBatch(t, ts, record.CodecNone, false, "orders.eu.fr.paid", "orders..bad")}))
		case 6: // a record without a subject where one is required
			n++
			txs = append(txs, tx(n, topics.Produce{Topic: "strict", Partition: 0, Records: subjectBatch(t, ts, record.CodecNone, false, "a.b", "")}))
		case 8: // a JSON subject that is not a string
			b, err := record.Build(record.Header{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
				[]record.Record{{Value: []byte(`{"meta": {"subject": 7}}`)}})
			if err != nil {
				t.Fatal(err)
			}
			n++
			txs = append(txs, tx(n, topics.Produce{Topic: "js", Partition: 0, Records: b}))
		case 20:
			n++
			txs = append(txs, tx(n, topics.DeleteRecords{Topic: "orders", Partition: 1, Offset: 30}))
		}
		blocks = append(blocks, block{time: ts, txs: txs})
	}
	return blocks
}

// TestSubjects: records' subjects are checked on produce (a batch with
// an invalid or missing one is refused whole, naming the record), and a
// read by pattern through the summaries finds exactly what a scan of the
// partitions finds, from any offset and with any page size, skipping
// batches without a match; the same on a second state machine fed the
// same blocks (the same app hashes), after a restart, and restored from a
// snapshot. Subject counts are every record given each subject.
func TestSubjects(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion}
	f, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	blocks := subjectBlocks(t)
	outs := applyOutcomes(t, f, blocks)
	refused := map[int]string{5: "orders..bad", 6: "requires a subject", 8: "is a number, not a string"}
	for h, want := range refused {
		txs := outs[h-1].Txs
		r := txs[len(txs)-1].Results[0]
		if r.Code != kerr.InvalidRecord.Code || len(r.RecordErrors) != 1 || !strings.Contains(r.RecordErrors[0].Message, want) {
			t.Fatalf("block %d: code %d record errors %+v (%s); want INVALID_RECORD naming one record: %q", h, r.Code, r.RecordErrors, r.Message, want)
		}
	}
	g, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i, out := range applyOutcomes(t, g, blocks) {
		if !bytes.Equal(out.AppHash, outs[i].AppHash) {
			t.Fatalf("height %d: app hashes differ", i+1)
		}
	}
	patterns := []string{">", "orders.>", "orders.*.fr.>", "orders.eu.fr.paid", "orders.*.*.x", "audit.rare", "orders.us.c4.x", "nothing.here", "*"}
	// check compares reads with scans: every pattern from the start, and
	// (thorough) from later offsets and a page at a time too.
	check := func(f *FSM, what string, thorough bool) {
		t.Helper()
		scans := map[string][]subjectRec{"orders": scanSubjects(t, f, "orders", false), "js": scanSubjects(t, f, "js", true)}
		for i, p := range patterns {
			pat := subject.MustPattern(p)
			for _, topic := range []string{"orders", "js"} {
				froms, limits := []int64{0}, []int{10_000}
				if thorough {
					froms, limits = []int64{0, 40}, []int{10_000}
					if i%4 == 0 {
						limits = append(limits, 5)
					}
				}
				for _, from := range froms {
					want := matching(scans[topic], pat, from)
					for _, limit := range limits {
						got, _ := readSubjects(t, f, topic, pat, from, limit)
						if !slices.Equal(got, want) {
							t.Fatalf("%s: %s %q from %d limit %d:\n got %v\nwant %v", what, topic, p, from, limit, got, want)
						}
					}
				}
			}
		}
		for p, n := range map[string]int{"orders.>": 200, "orders.us.c4.x": 1, "audit.rare": 1, "orders.eu.fr.paid": 1} {
			if got := len(matching(scans["orders"], subject.MustPattern(p), 0)); got < n {
				t.Fatalf("%s: the scenario has %d records of %q, want at least %d", what, got, p, n)
			}
		}
		_, st := readSubjects(t, f, "orders", subject.MustPattern("audit.rare"), 0, 1000)
		if st.BatchesSkipped == 0 || st.BatchesRead >= st.BatchesSkipped {
			t.Fatalf("%s: a rare subject read %d batches and skipped %d", what, st.BatchesRead, st.BatchesSkipped)
		}
		counts, err := f.SubjectCounts("orders", []byte("orders.eu"), nil, 1000)
		if err != nil || len(counts) == 0 {
			t.Fatalf("%s: counts: %v %v", what, counts, err)
		}
		for _, c := range counts {
			if !subject.HasPrefix(c.Subject, []byte("orders.eu")) || c.Records == 0 {
				t.Fatalf("%s: count %q %d under orders.eu", what, c.Subject, c.Records)
			}
		}
	}
	check(f, "applied", true)
	check(g, "the second state machine", false)

	// The counts are every record produced with each subject, the
	// refused batch's aside, and include what DeleteRecords removed.
	want := map[string]uint64{}
	for h, b := range blocks {
		for _, raw := range b.txs {
			tx, _ := DecodeTx(raw)
			p, ok := tx.Commands[0].(topics.Produce)
			if !ok || p.Topic != "orders" {
				continue
			}
			if h+1 == 5 && p.Partition == 0 && bytes.Contains(p.Records, []byte("orders..bad")) {
				continue
			}
			_, recs, _ := record.Records(p.Records)
			for _, r := range recs {
				for _, hd := range r.Headers {
					if hd.Key == subject.Header {
						want[string(hd.Value)]++
					}
				}
			}
		}
	}
	all, err := f.SubjectCounts("orders", nil, nil, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, c := range all {
		got[string(c.Subject)] = c.Records
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts:\n got %v\nwant %v", got, want)
	}
	page, err := f.SubjectCounts("orders", nil, all[2].Subject, 2)
	if err != nil || len(page) != 2 || !bytes.Equal(page[0].Subject, all[3].Subject) {
		t.Fatalf("the page after %q: %v %v", all[2].Subject, page, err)
	}

	// After a restart, and on a state machine restored from a snapshot.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	check(f, "reopened", false)
	snap := takeSnapshot(t, f, filepath.Join(t.TempDir(), "snap"), nil)
	r, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	restoreInto(t, r, snap)
	check(r, "restored", false)

	// A deleted topic leaves no summary and no count behind.
	id := f.View().Topic("orders").ID
	if _, err := f.ApplyBlock(core.Block{Height: int64(len(blocks) + 1), TimeMs: t0 + 100_000, Txs: [][]byte{tx(9999, topics.DeleteTopic{Name: "orders"})}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	settle(t, f)
	for _, prefix := range [][]byte{append([]byte("j/b/"), id[:]...), append([]byte("j/c/"), id[:]...)} {
		left := 0
		f.Store.Scan(prefix, func(k, v []byte) error { left++; return nil })
		if left != 0 {
			t.Fatalf("%d keys left under %q after the topic's deletion", left, prefix)
		}
	}
}

// TestSubjectsBeforeVersion11: under app version 10 the subject configs
// are unknown, as to version 10's binaries (INVALID_CONFIG), also inside
// an AlterConfigs whose later change is otherwise refused, and a record's
// stele-subject header is a header like any other.
func TestSubjectsBeforeVersion11(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "a", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.subject.required", Value: "true"}}}),
		tx(2, topics.CreateTopic{Name: "b", Partitions: 1, ReplicationFactor: -1}),
		tx(3, topics.AlterConfigs{Topic: "b", Incremental: true, Changes: []topics.ConfigChange{{Name: "stele.subject.from", Value: "header", Op: topics.OpSet}, {Name: "retention.ms", Op: 9}}}),
		tx(4, topics.Produce{Topic: "b", Partition: 0, Records: subjectBatch(t, t0, record.CodecNone, false, "not..valid", "*")}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int16{kerr.InvalidConfig.Code, 0, kerr.InvalidConfig.Code, 0} {
		if r := out.Txs[i].Results[0]; r.Code != want || (want != 0 && !strings.Contains(r.Message, "unknown topic config name")) {
			t.Fatalf("tx %d: code %d (%s), want %d", i+1, r.Code, r.Message, want)
		}
	}
}

// TestSubjectErrorsPerRecord: a batch's record errors name each failing
// record once, with its first error (a bad expected version before its
// subject), and every failing record, as Kafka's record_errors does.
func TestSubjectErrorsPerRecord(t *testing.T) {
	f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sub := func(s string) record.RecordHeader { return record.RecordHeader{Key: subject.Header, Value: []byte(s)} }
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{
		{OffsetDelta: 0, Key: []byte("a"), Headers: []record.RecordHeader{sub("ok.one")}},
		{OffsetDelta: 1, Key: []byte("a"), Headers: []record.RecordHeader{{Key: topics.ExpectedVersionHeader, Value: []byte("x")}, sub("bad..one")}},
		{OffsetDelta: 2, Key: []byte("a"), Headers: []record.RecordHeader{sub("a.b"), sub("a.c")}},
		{OffsetDelta: 3, Key: []byte("a"), Headers: []record.RecordHeader{sub("wild.*")}},
		{OffsetDelta: 4, Key: []byte("a"), Headers: []record.RecordHeader{{Key: subject.Header}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}),
		tx(2, topics.Produce{Topic: "t", Partition: 0, Records: b}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	r := out.Txs[1].Results[0]
	var got []string
	for _, e := range r.RecordErrors {
		got = append(got, fmt.Sprintf("%d %s", e.Index, e.Message))
	}
	want := []string{"1 " + topics.ExpectedVersionHeader, "2 given twice", "3 wildcard", "4 the subject is empty"}
	if r.Code != kerr.InvalidRecord.Code || len(got) != len(want) {
		t.Fatalf("code %d, record errors %q; want INVALID_RECORD and %q", r.Code, got, want)
	}
	for i, w := range want {
		idx, text, _ := strings.Cut(w, " ")
		if !strings.HasPrefix(got[i], idx+" ") || !strings.Contains(got[i], text) {
			t.Fatalf("record error %d is %q, want record %s: %q", i, got[i], idx, text)
		}
	}
	if p := f.View().Partition("t", 0); p.HighWatermark() != 0 {
		t.Fatalf("the refused batch left %d records", p.HighWatermark())
	}
}

// TestSubjectRuleChange: a change of stele.subject.from applies to the
// batches written afterwards; each batch is read by the rule it was
// written under (docs/subjects.md).
func TestSubjectRuleChange(t *testing.T) {
	d := &groupDriver{t: t, f: openViews(t), now: t0}
	wantCode(t, "create", d.block(0, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})[0], 0)
	mixed := func(header, jsonType string) []byte {
		b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{
			{Value: []byte(fmt.Sprintf(`{"type": %q}`, jsonType)), Headers: []record.RecordHeader{{Key: subject.Header, Value: []byte(header)}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wantCode(t, "produce under header", d.block(10, topics.Produce{Topic: "t", Partition: 0, Records: mixed("h.one", "j.one")})[0], 0)
	wantCode(t, "alter", d.block(10, topics.AlterConfigs{Topic: "t", Incremental: true, Changes: []topics.ConfigChange{{Name: "stele.subject.from", Value: "json:/type"}}})[0], 0)
	wantCode(t, "produce under json", d.block(10, topics.Produce{Topic: "t", Partition: 0, Records: mixed("h.two", "j.two")})[0], 0)
	got, _ := readSubjects(t, d.f, "t", subject.MustPattern(">"), 0, 100)
	if want := []string{"0/0=h.one", "0/1=j.two"}; !slices.Equal(got, want) {
		t.Fatalf("read by >: %q, want %q (each batch by the rule it was written under)", got, want)
	}
}
