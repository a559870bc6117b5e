package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// The key stream benchmarks (docs/benchmarks.md, "Key streams"). The
// defaults are small so that `go test -bench .` stays quick; the figures
// in the docs use -keybench.keys 1000000 -keybench.events 10000000.
var (
	benchKeys   = flag.Int("keybench.keys", 10_000, "distinct keys in BenchmarkKeyRead's topic")
	benchEvents = flag.Int("keybench.events", 100_000, "records in BenchmarkKeyRead's topic")
)

// keyBenchBlocks produces events records (100-byte values, keys
// key-00000000.. in turn) into topic kb as blocks of 100 batches of 100
// records, and returns the time the blocks took to apply and commit.
func keyBenchBlocks(tb testing.TB, f *FSM, keys, events int, height *int64) time.Duration {
	tb.Helper()
	value := bytes.Repeat([]byte("v"), 100)
	var took time.Duration
	for done := 0; done < events; {
		var txs [][]byte
		for range 100 {
			if done >= events {
				break
			}
			n := min(100, events-done)
			recs := make([]record.Record, n)
			for i := range recs {
				recs[i] = record.Record{OffsetDelta: int32(i), Key: fmt.Appendf(nil, "key-%08d", (done+i)%keys), Value: value}
			}
			b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
			if err != nil {
				tb.Fatal(err)
			}
			txs = append(txs, tx(len(txs), topics.Produce{Topic: "kb", Partition: 0, Records: b}))
			done += n
		}
		*height++
		start := time.Now()
		if _, err := f.ApplyBlock(core.Block{Height: *height, TimeMs: t0, Txs: txs}); err != nil {
			tb.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			tb.Fatal(err)
		}
		took += time.Since(start)
	}
	return took
}

func keyBenchFSM(tb testing.TB, opts Options, configs ...topics.ConfigEntry) (*FSM, int64) {
	tb.Helper()
	opts.Dir = tb.TempDir()
	f, err := Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	if _, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{tx(0, topics.CreateTopic{Name: "kb", Partitions: 1, ReplicationFactor: -1,
		Configs: append([]topics.ConfigEntry{{Name: "segment.bytes", Value: "1073741824"}}, configs...)})}}); err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		tb.Fatal(err)
	}
	return f, 1
}

// BenchmarkKeyRead: a topic of -keybench.events records over
// -keybench.keys keys; each op reads one random key's events through the
// index. Reported: p50 and p99 of one read, and the time to find the same
// events by scanning the partition.
func BenchmarkKeyRead(b *testing.B) {
	keys, events := *benchKeys, *benchEvents
	f, h := keyBenchFSM(b, Options{})
	took := keyBenchBlocks(b, f, keys, events, &h)
	b.Logf("built %d records over %d keys in %v (%.0f records/s applied and committed)", events, keys, took.Round(time.Millisecond), float64(events)/took.Seconds())
	want := events / keys
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		key := fmt.Appendf(nil, "key-%08d", rng.IntN(keys))
		start := time.Now()
		evs, err := f.KeyEvents("kb", key, 0, 1_000_000)
		lat = append(lat, time.Since(start))
		if err != nil || len(evs) < want {
			b.Fatalf("%s: %d events, %v; want %d", key, len(evs), err, want)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	// The same answer without the index: read the whole partition.
	p := f.View().Partition("kb", 0)
	key := []byte("key-00000000")
	start := time.Now()
	found := 0
	for off := int64(0); off < p.HighWatermark(); {
		data, err := p.Read(off, 8<<20)
		if err != nil {
			b.Fatal(err)
		}
		batches, err := record.Split(data)
		if err != nil {
			b.Fatal(err)
		}
		for _, bt := range batches {
			h, err := record.Each(bt, func(r *record.Record) error {
				if bytes.Equal(r.Key, key) {
					found++
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			off = h.LastOffset() + 1
		}
	}
	if found < want {
		b.Fatalf("the scan found %d events of %s, want %d", found, key, want)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "scan-ms")
}

// BenchmarkProduceKeyIndex: records applied and committed per second, 100
// per batch, with and without the key index (its cost on the produce path),
// and to a table topic (cleanup.policy=compact: each record also updates
// its key's authenticated leaf, tables.go).
func BenchmarkProduceKeyIndex(b *testing.B) {
	for _, c := range []struct {
		name    string
		opts    Options
		configs []topics.ConfigEntry
	}{{"with-index", Options{}, nil}, {"without-index", Options{WithoutKeyIndex: true}, nil},
		{"table", Options{}, []topics.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}}} {
		b.Run(c.name, func(b *testing.B) {
			f, h := keyBenchFSM(b, c.opts, c.configs...)
			events := 10_000 * b.N
			took := keyBenchBlocks(b, f, *benchKeys, events, &h)
			b.ReportMetric(float64(events)/took.Seconds(), "records/s")
		})
	}
}
