package cometbft

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkProduceToCommit measures how long a 1 KiB transaction takes from
// Submit to the application's Commit of its block on a single validator,
// for several TimeoutCommit values:
//
//	go test ./internal/consensus/cometbft -run '^$' -bench ProduceToCommit -benchtime 300x
//
// "closed" submits the next transaction as soon as the previous one
// committed (one producer waiting on each ack); "spaced" leaves 100 ms of
// idle between transactions (a producer arriving at a quiet node). Each
// reports the median and the 99th percentile.
func BenchmarkProduceToCommit(b *testing.B) {
	for _, tc := range []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond} {
		for _, mode := range []string{"closed", "spaced"} {
			b.Run(fmt.Sprintf("timeout_commit=%v/%s", tc, mode), func(b *testing.B) {
				benchLatency(b, tc, mode == "spaced")
			})
		}
	}
}

func benchLatency(b *testing.B, timeoutCommit time.Duration, spaced bool) {
	home := filepath.Join(b.TempDir(), "cometbft")
	if err := Init(home, InitOptions{}); err != nil {
		b.Fatal(err)
	}
	app, err := openDiskApp(filepath.Join(b.TempDir(), "app.json"), func(int64) bool { return false })
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig(b, home)
	cfg.TimeoutCommit = timeoutCommit
	o := startOrderer(b, cfg, app)
	ctx := context.Background()
	submitAndWait(b, o, app, "warm-up")

	lat := make([]time.Duration, 0, b.N)
	tx := make([]byte, 1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if spaced {
			b.StopTimer()
			time.Sleep(100 * time.Millisecond)
			b.StartTimer()
		}
		copy(tx, fmt.Sprintf("tx-%09d-", i))
		done := app.waitFor(tx)
		start := time.Now()
		if err := o.Submit(ctx, tx); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatalf("tx %d not committed within 10s", i)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
