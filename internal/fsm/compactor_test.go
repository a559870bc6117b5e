package fsm

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

func openWith(t testing.TB, dir string, hook func(string, int32)) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, passHookForTest: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Compactor.Wg.Wait)
	return f
}

// TestCompactionTimingIsNotHashed (DESIGN.md §1): two state machines fed
// the same blocks, one writing its compactions at once and the other
// late (each pass held back until well after the Commit that decided
// it), report the same app hash at every height, take the same snapshot
// in the middle of a pass, and hold byte-identical logs once their
// compactions are written.
func TestCompactionTimingIsNotHashed(t *testing.T) {
	blocks := scenario(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a := openWith(t, dirA, nil)
	b := openWith(t, dirB, func(string, int32) { time.Sleep(30 * time.Millisecond) })
	defer a.Close()
	defer b.Close()
	snapAt, late := len(blocks)/2, 0
	for i, blk := range blocks {
		var hashes [2][]byte
		for j, f := range []*FSM{a, b} {
			out, err := f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: blk.time, Txs: blk.txs})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Commit(); err != nil {
				t.Fatal(err)
			}
			hashes[j] = out.AppHash
		}
		if !bytes.Equal(hashes[0], hashes[1]) {
			t.Fatalf("height %d: app hashes differ", i+1)
		}
		if compactionPending(b) {
			late++
		}
		if i+1 == snapAt {
			sa := takeSnapshot(t, a, filepath.Join(t.TempDir(), "snap"), nil)
			sb := takeSnapshot(t, b, filepath.Join(t.TempDir(), "snap"), nil)
			if !bytes.Equal(sa.Hash(), sb.Hash()) {
				t.Fatalf("snapshots at height %d differ", snapAt)
			}
		}
	}
	if late == 0 {
		t.Fatal("no block was committed while a compaction was still being written: the test shows nothing")
	}
	settle(t, a)
	settle(t, b)
	fa, fb := logFiles(t, dirA), logFiles(t, dirB)
	if len(fa) != len(fb) {
		t.Fatalf("%d log files vs %d: %s", len(fa), len(fb), fileNames(fa, fb))
	}
	for n := range fa {
		if !bytes.Equal(fa[n], fb[n]) {
			t.Errorf("%s differs", n)
		}
	}
}

func fileNames(a, b map[string][]byte) string {
	var s string
	for n := range a {
		if _, ok := b[n]; !ok {
			s += " only in a: " + n
		}
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			s += " only in b: " + n
		}
	}
	return s
}

// TestChainGoesOnDuringCompaction: while a decided compaction is held back,
// blocks go on being applied and committed, produces are served, and reads
// return the records compaction will remove; once the pass is written, the
// same reads start after them. A restart in the middle of the pass runs it
// again from its plan (Open does not wait for it).
func TestChainGoesOnDuringCompaction(t *testing.T) {
	dir := t.TempDir()
	gate := make(chan struct{})
	f := openWith(t, dir, func(string, int32) { <-gate })
	height, now := int64(0), t0
	apply := func(txs ...[]byte) {
		t.Helper()
		height++
		if _, err := f.ApplyBlock(core.Block{Height: height, TimeMs: now, Txs: txs}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	apply(tx(1, topics.CreateTopic{Name: "table", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
		{Name: "cleanup.policy", Value: "compact"}, {Name: "segment.bytes", Value: "1500"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}}}))
	for i := range 20 { // within one housekeeping interval
		now++
		apply(tx(10+i, topics.Produce{Topic: "table", Partition: 0, Records: batch(t, now, record.CodecNone, "k", 6)}))
	}
	p := f.View().Partition("table", 0)
	first, err := p.Read(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	now += 1000 // the next block decides the compaction
	apply()
	if !compactionPending(f) {
		t.Fatal("no compaction in flight after the deciding block")
	}
	for i := range 10 { // the chain goes on meanwhile
		now++
		apply(tx(100+i, topics.Produce{Topic: "table", Partition: 0, Records: batch(t, now, record.CodecNone, "k", 6)}))
	}
	if got, err := p.Read(0, 1); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("before the pass is written, offset 0 reads %d bytes (%v); want the batch as appended", len(got), err)
	}

	// A restart before the pass is written: the plan brings it back. (The
	// logs close first, so the held pass finds them closed and stops.)
	f.CloseLogs()
	close(gate)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	gate2 := make(chan struct{})
	f = openWith(t, dir, func(string, int32) { <-gate2 })
	if !compactionPending(f) {
		t.Fatal("Open did not resume the planned compaction")
	}
	p = f.View().Partition("table", 0)
	if got, err := p.Read(0, 1); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("after the restart, before the pass, offset 0 reads %d bytes (%v)", len(got), err)
	}
	close(gate2)
	settle(t, f)
	got, err := p.Read(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, first) {
		t.Fatal("offset 0 reads the same batch once the pass is written: nothing was compacted")
	}
	f.Close()
	if entries := logFiles(t, dir); entries[fmt.Sprintf("table-0/%s", "compaction.plan")] != nil {
		t.Fatal("the plan file outlived its pass")
	}
}
