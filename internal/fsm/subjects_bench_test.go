package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// The subject benchmarks (docs/benchmarks.md, "Subjects"). The defaults
// are small so that `go test -bench .` stays quick; the figures in the
// docs use -subjbench.records 2000000.
var benchSubjectRecords = flag.Int("subjbench.records", 200_000, "records in BenchmarkSubjectRead's topic")

// subjectOf is record i's subject in the benchmarks: one of 60 busy
// subjects, or audit.rare for 1 record in 100 (rare: which ones).
func subjectOf(i int, rare func(int) bool) string {
	if rare(i) {
		return "audit.rare"
	}
	regions, countries, events := []string{"eu", "us", "ap", "sa"}, []string{"a", "b", "c", "d", "e"}, []string{"created", "paid", "shipped"}
	return "orders." + regions[i%4] + "." + countries[i/4%5] + "." + events[i/20%3]
}

// subjectBenchFSM is a state machine at the newest app version with topic
// sb (one partition, the given configs).
func subjectBenchFSM(tb testing.TB, configs ...topics.ConfigEntry) (*FSM, int64) {
	tb.Helper()
	f, err := Open(Options{Dir: tb.TempDir(), GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	if _, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{tx(0, topics.CreateTopic{Name: "sb", Partitions: 1, ReplicationFactor: -1,
		Configs: append([]topics.ConfigEntry{{Name: "segment.bytes", Value: "1073741824"}}, configs...)})}}); err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		tb.Fatal(err)
	}
	return f, 1
}

// benchView makes view NAME of sb over the pattern (views.go).
func benchView(tb testing.TB, f *FSM, height *int64, name, pattern string) {
	tb.Helper()
	*height++
	out, err := f.ApplyBlock(core.Block{Height: *height, TimeMs: t0, Txs: [][]byte{tx(0, topics.CreateTopic{Name: name, Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "stele.view.from", Value: "sb"}, {Name: "stele.view.subject", Value: pattern}, {Name: "segment.bytes", Value: "1073741824"}}})}})
	if err != nil {
		tb.Fatal(err)
	}
	if r := out.Txs[0].Results[0]; r.Code != 0 {
		tb.Fatalf("view %s: %d %s", name, r.Code, r.Message)
	}
	if _, err := f.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// readPartition reads a partition from its start to its high watermark
// as a consumer's fetches do (8 MiB at a time), calling fn for each
// record, and returns the bytes read.
func readPartition(tb testing.TB, p *Partition, fn func(r *record.Record)) int {
	size := 0
	for off := p.LogStartOffset(); off < p.HighWatermark(); {
		data, err := p.Read(off, 8<<20)
		if err != nil {
			tb.Fatal(err)
		}
		size += len(data)
		batches, err := record.Split(data)
		if err != nil {
			tb.Fatal(err)
		}
		for _, bt := range batches {
			h, err := record.Each(bt, func(r *record.Record) error { fn(r); return nil })
			if err != nil {
				tb.Fatal(err)
			}
			off = h.LastOffset() + 1
		}
	}
	return size
}

// subjectBenchBlocks produces n records to sb as blocks of 100 batches of
// 100 records (200-byte values), record i made by mk, and returns the time
// the blocks took to apply and commit.
func subjectBenchBlocks(tb testing.TB, f *FSM, n int, height *int64, mk func(i int) record.Record) time.Duration {
	tb.Helper()
	var took time.Duration
	for done := 0; done < n; {
		var txs [][]byte
		for range 100 {
			if done >= n {
				break
			}
			recs := make([]record.Record, min(100, n-done))
			for i := range recs {
				recs[i] = mk(done + i)
				recs[i].OffsetDelta = int32(i)
			}
			b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
			if err != nil {
				tb.Fatal(err)
			}
			txs = append(txs, tx(len(txs), topics.Produce{Topic: "sb", Partition: 0, Records: b}))
			done += len(recs)
		}
		*height++
		start := time.Now()
		out, err := f.ApplyBlock(core.Block{Height: *height, TimeMs: t0, Txs: txs})
		if err != nil {
			tb.Fatal(err)
		}
		for _, tx := range out.Txs {
			if r := tx.Results[0]; r.Code != 0 {
				tb.Fatalf("produce: %d %s", r.Code, r.Message)
			}
		}
		if _, err := f.Commit(); err != nil {
			tb.Fatal(err)
		}
		took += time.Since(start)
	}
	return took
}

// headerRecord is a record whose subject is s in the stele-subject header.
func headerRecord(i int, s string, value []byte) record.Record {
	return record.Record{Key: fmt.Appendf(nil, "k-%d", i%1000), Value: value, Headers: []record.RecordHeader{{Key: subject.Header, Value: []byte(s)}}}
}

// BenchmarkSubjectRead: a topic of -subjbench.records records, 1 in 100
// with the subject audit.rare; each op reads every audit.rare record
// through the summaries (SubjectRecords, what GET
// /v1/topics/{topic}/records?subject= serves). "clustered": the rare
// records come in batches of their own (a producer of their own);
// "spread": one in each batch of 100 (every batch holds a match).
// Reported: ms per read, and the bytes and batches the read touched;
// scan-ms is reading the whole partition and filtering by subject as a
// client reading everything would (without the network); view-ms reading
// a view of audit.rare (docs/subjects.md) whole, as a Kafka consumer of
// the view fetches it (without the network).
func BenchmarkSubjectRead(b *testing.B) {
	value := bytes.Repeat([]byte("v"), 200)
	for _, c := range []struct {
		name string
		rare func(int) bool
	}{{"clustered", func(i int) bool { return i/100%100 == 7 }}, {"spread", func(i int) bool { return i%100 == 42 }}} {
		b.Run(c.name, func(b *testing.B) {
			n := *benchSubjectRecords
			f, h := subjectBenchFSM(b)
			benchView(b, f, &h, "rare", "audit.rare")
			took := subjectBenchBlocks(b, f, n, &h, func(i int) record.Record { return headerRecord(i, subjectOf(i, c.rare), value) })
			b.Logf("built %d records in %v", n, took.Round(time.Millisecond))
			pat := subject.MustPattern("audit.rare")
			want := n / 100
			var stats SubjectReadStats
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				got := 0
				stats = SubjectReadStats{}
				pos := map[int32]int64{0: 0}
				for {
					recs, next, st, err := f.SubjectRecords("sb", pat, pos, 10_000)
					if err != nil {
						b.Fatal(err)
					}
					stats.Add(st)
					got += len(recs)
					if len(recs) == 0 {
						break
					}
					pos = next
				}
				lat = append(lat, time.Since(start))
				if got != want {
					b.Fatalf("%d audit.rare records, want %d", got, want)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "read-ms")
			b.ReportMetric(float64(stats.BytesRead)/1e6, "read-MB")
			b.ReportMetric(float64(stats.BatchesRead), "batches-read")
			b.ReportMetric(float64(stats.BatchesSkipped), "batches-skipped")
			// The same answer from reading everything.
			start := time.Now()
			found := 0
			size := readPartition(b, f.View().Partition("sb", 0), func(r *record.Record) {
				for _, hd := range r.Headers {
					if hd.Key == subject.Header && pat.Match(hd.Value) {
						found++
					}
				}
			})
			if found != want {
				b.Fatalf("the scan found %d, want %d", found, want)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "scan-ms")
			b.ReportMetric(float64(size)/1e6, "scan-MB")
			// And from the view.
			start = time.Now()
			found = 0
			size = readPartition(b, f.View().Partition("rare", 0), func(*record.Record) { found++ })
			if found != want {
				b.Fatalf("the view holds %d records, want %d", found, want)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "view-ms")
			b.ReportMetric(float64(size)/1e6, "view-MB")
		})
	}
}

// BenchmarkProduceSubjects: records applied and committed per second, 100
// per batch: without subjects, with a subject header (60 subjects), with a
// subject lifted from a JSON value (stele.subject.from=json:/type), and
// with a distinct subject per record (summaries of first tokens), and with
// subject headers copied into views (view-1pct: a view of 1 record in
// 100; view-all: a view of every record) — the cost of subjects and
// views on the produce path.
func BenchmarkProduceSubjects(b *testing.B) {
	value := bytes.Repeat([]byte("v"), 200)
	never := func(int) bool { return false }
	for _, c := range []struct {
		name    string
		configs []topics.ConfigEntry
		mk      func(i int) record.Record
		view    string // the pattern of a view of sb, if any
	}{
		{"none", nil, func(i int) record.Record { return record.Record{Key: fmt.Appendf(nil, "k-%d", i%1000), Value: value} }, ""},
		{"header", nil, func(i int) record.Record { return headerRecord(i, subjectOf(i, never), value) }, ""},
		{"json", []topics.ConfigEntry{{Name: "stele.subject.from", Value: "json:/type"}}, func(i int) record.Record {
			return record.Record{Key: fmt.Appendf(nil, "k-%d", i%1000), Value: fmt.Appendf(nil, `{"id": %d, "type": %q, "pad": "%s"}`, i, subjectOf(i, never), value[:150])}
		}, ""},
		{"distinct", nil, func(i int) record.Record { return headerRecord(i, fmt.Sprintf("orders.eu.c%d.created", i), value) }, ""},
		{"view-1pct", nil, func(i int) record.Record {
			return headerRecord(i, subjectOf(i, func(i int) bool { return i%100 == 42 }), value)
		}, "audit.rare"},
		{"view-all", nil, func(i int) record.Record { return headerRecord(i, subjectOf(i, never), value) }, ">"},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, h := subjectBenchFSM(b, c.configs...)
			if c.view != "" {
				benchView(b, f, &h, "v", c.view)
			}
			records := 10_000 * b.N
			took := subjectBenchBlocks(b, f, records, &h, c.mk)
			b.ReportMetric(float64(records)/took.Seconds(), "records/s")
		})
	}
}
