package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

var (
	compactBenchBytes = flag.Int64("compactbench.bytes", 16<<20, "bytes of records BenchmarkHeightDuringCompaction writes to its compacted topic before compaction is decided")
	compactBenchAfter = flag.Duration("compactbench.after", 2*time.Second, "how long BenchmarkHeightDuringCompaction keeps producing once the compaction has finished")
)

// BenchmarkHeightDuringCompaction: the chain's height time and produce
// latency while a compacted topic is being rewritten (issue 16, item 6).
//
// A compacted topic "table" (64 MiB segments, 4 KiB values over 4,096
// keys, so compaction removes nearly everything) is filled with
// -compactbench.bytes of records; then block time jumps past the
// housekeeping interval, so the next block decides its compaction. From
// that block on, produce requests to another topic "events" (one 1 KiB
// record each) arrive every 5 ms of wall time; each block takes the
// requests that arrived while the previous one was applied and committed.
// A request's latency is from its arrival to the Commit of its block: what
// a client of a one-broker chain waits, without the orderer's own time.
// Blocks go on until the compaction has finished and then for
// -compactbench.after. Reported: p50, p99 and max of the height time
// (ApplyBlock + Commit) and of the produce latency, and the seconds from
// the deciding block to the end of the compaction.
//
// Run it alone (it writes the topic with fsync): -benchtime=1x.
func BenchmarkHeightDuringCompaction(b *testing.B) {
	for range b.N {
		heightDuringCompaction(b)
	}
}

func heightDuringCompaction(b *testing.B) {
	b.StopTimer()
	f, err := Open(Options{Dir: b.TempDir(), HousekeepingIntervalMs: 30_000})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	height, now := int64(0), t0
	apply := func(txs [][]byte) time.Duration {
		height++
		start := time.Now()
		if _, err := f.ApplyBlock(core.Block{Height: height, TimeMs: now, Txs: txs}); err != nil {
			b.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	apply([][]byte{
		tx(1, topics.CreateTopic{Name: "table", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
			{Name: "cleanup.policy", Value: "compact"}, {Name: "segment.bytes", Value: fmt.Sprint(64 << 20)}, {Name: "max.message.bytes", Value: fmt.Sprint(4 << 20)}}}),
		tx(2, topics.CreateTopic{Name: "events", Partitions: 1, ReplicationFactor: -1}),
	})

	// Fill: blocks of 16 batches of 64 records, all within one housekeeping
	// interval of block time.
	value := bytes.Repeat([]byte("v"), 4096)
	n := 0
	for written := int64(0); written < *compactBenchBytes; {
		var txs [][]byte
		for range 16 {
			recs := make([]record.Record, 64)
			for i := range recs {
				recs[i] = record.Record{OffsetDelta: int32(i), Key: fmt.Appendf(nil, "key-%04d", n%4096), Value: value}
				n++
			}
			bt, err := record.Build(record.Header{FirstTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
			if err != nil {
				b.Fatal(err)
			}
			txs = append(txs, tx(len(txs), topics.Produce{Topic: "table", Partition: 0, Records: bt}))
			written += int64(len(bt))
		}
		now++
		apply(txs)
	}
	before := f.View().Partition("table", 0).Size()

	// Measure: the first block past the interval decides the compaction.
	now += 30_000
	const every = 5 * time.Millisecond
	event := bytes.Repeat([]byte("e"), 1024)
	var heights, latencies []time.Duration
	b.StartTimer()
	start := time.Now()
	arrived, sent := 0, 0
	var compactDone time.Duration
	for {
		elapsed := time.Since(start)
		if compactDone == 0 && !compactionPending(f) && len(heights) > 0 {
			compactDone = elapsed
		}
		if compactDone > 0 && elapsed > compactDone+*compactBenchAfter {
			break
		}
		arrived = int(elapsed / every)
		var txs [][]byte
		first := sent
		for ; sent < arrived; sent++ {
			bt, err := record.Build(record.Header{FirstTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
				[]record.Record{{Key: fmt.Appendf(nil, "e-%d", sent), Value: event}})
			if err != nil {
				b.Fatal(err)
			}
			txs = append(txs, tx(sent, topics.Produce{Topic: "events", Partition: 0, Records: bt}))
		}
		now += 100
		heights = append(heights, apply(txs))
		committed := time.Since(start)
		for i := first; i < sent; i++ {
			latencies = append(latencies, committed-time.Duration(i)*every)
		}
		if len(txs) == 0 {
			time.Sleep(every / 5) // wait for the next request, as an idle chain would
		}
	}
	b.StopTimer()
	after := f.View().Partition("table", 0).Size()
	if after >= before {
		b.Fatalf("the compacted topic went from %d to %d bytes: nothing was compacted", before, after)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"height", heights}, {"produce", latencies}} {
		slices.Sort(m.ds)
		b.ReportMetric(ms(m.ds[len(m.ds)/2]), m.name+"-p50-ms")
		b.ReportMetric(ms(m.ds[len(m.ds)*99/100]), m.name+"-p99-ms")
		b.ReportMetric(ms(m.ds[len(m.ds)-1]), m.name+"-max-ms")
	}
	b.ReportMetric(compactDone.Seconds(), "compaction-s")
	b.ReportMetric(float64(before)/(1<<20), "MiB-before")
	b.ReportMetric(float64(after)/(1<<20), "MiB-after")
	b.ReportMetric(float64(len(heights)), "heights")
}

// compactionPending reports whether a compaction decided by a committed
// block is still being written.
func compactionPending(f *FSM) bool {
	for _, name := range topics.SortedNames(f.ByName) {
		for _, p := range f.ByName[name].Partitions {
			if p.CompactionRunning() {
				return true
			}
		}
	}
	return false
}
