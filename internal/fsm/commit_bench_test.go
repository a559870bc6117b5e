package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// BenchmarkOffsetCommit: blocks of 1,000 OffsetCommit commands (each its
// own transaction) spread over 100 groups × 100 partitions, every one a
// new offset for an existing key once the first pass has run. Each op is a
// block applied and committed; reported: commits per second. It measures
// what a committed offset costs the apply path, the state trie included.
func BenchmarkOffsetCommit(b *testing.B) {
	f := open(b, b.TempDir())
	defer f.Close()
	const perBlock, nGroups, parts = 1000, 100, 100
	height := int64(1)
	if _, err := f.ApplyBlock(core.Block{Height: height, TimeMs: t0, Txs: [][]byte{tx(1, topics.CreateTopic{Name: "t", Partitions: parts, ReplicationFactor: -1})}}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		b.Fatal(err)
	}
	n := 0
	block := func() {
		txs := make([][]byte, perBlock)
		for i := range txs {
			n++
			txs[i] = tx(n, groups.OffsetCommit{Group: fmt.Sprintf("g%d", n%nGroups), Generation: -1, Topic: "t",
				Partition: int32((n / nGroups) % parts), Offset: int64(n), LeaderEpoch: -1})
		}
		height++
		if _, err := f.ApplyBlock(core.Block{Height: height, TimeMs: t0 + height, Txs: txs}); err != nil {
			b.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	for range nGroups * parts / perBlock { // every key exists
		block()
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		block()
	}
	b.ReportMetric(float64(b.N*perBlock)/time.Since(start).Seconds(), "commits/s")
}
