package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// passInput splits compactInput: the batches before a compaction is
// decided, and those appended while its pass runs.
func passInput(t *testing.T) (before, during [][]byte) {
	in := compactInput(t)
	return in[:40], in[40:]
}

// reference is the log compaction in the applier's lock would leave: the
// first batches, a pass bounded at that moment, then the later batches.
func reference(t *testing.T, before, during [][]byte) map[string][]byte {
	t.Helper()
	l, dir := testLog(t, compactCfg)
	feed(t, l, before)
	if _, err := l.Compact(1500); err != nil {
		t.Fatal(err)
	}
	feed(t, l, during)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return segmentFiles(t, dir)
}

// TestCompactionPassBesideAppendsAndReads: a prepared pass runs on its own
// goroutine while the applier goes on appending (rolling new segments) and
// readers read every offset. Readers always get the committed records
// (compacted or not: the value of every offset they get is the one
// appended), and the files end byte-identical to those of a pass that held
// the applier up: appends after the decision change nothing it writes.
func TestCompactionPassBesideAppendsAndReads(t *testing.T) {
	before, during := passInput(t)
	want := reference(t, before, during)

	l, dir := testLog(t, compactCfg)
	feed(t, l, before)
	orig := recordsByOffset(t, l)
	if err := l.Sync(); err != nil { // the applier syncs before Commit
		t.Fatal(err)
	}
	pass, err := l.PrepareCompaction(CompactOptions{Latest: true, DeleteHorizon: 1500, ID: 7})
	if err != nil {
		t.Fatal(err)
	}
	if opts, ok, err := l.PlannedCompaction(); err != nil || !ok || opts != pass.Options() {
		t.Fatalf("plan file: %+v %t %v; want %+v", opts, ok, err, pass.Options())
	}
	end := l.NextOffset()
	var (
		wg      sync.WaitGroup
		stats   CompactStats
		runErr  error
		runDone = make(chan struct{})
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(runDone)
		stats, runErr = pass.Run()
	}()
	go func() { // a reader, until the pass is done
		defer wg.Done()
		for done := false; !done; {
			select {
			case <-runDone:
				done = true // one last read, of the compacted log
			default:
			}
			if err := checkReads(l, end, orig); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for _, b := range during { // the applier
		if err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if runErr != nil {
		t.Fatal(runErr)
	}
	if stats.SegmentsCleaned == 0 {
		t.Fatal("the pass cleaned nothing")
	}
	if _, ok, _ := l.PlannedCompaction(); ok {
		t.Fatal("the plan file outlived its pass")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, want, segmentFiles(t, dir))
}

// TestCompactionPassInterrupted: a crash in the middle of a pass (some
// segments swapped in, one half written as .cleaned, or committed as .swap)
// leaves the plan; OpenLog tidies the files, and the pass planned again
// from the plan file ends with the files of a pass never interrupted.
func TestCompactionPassInterrupted(t *testing.T) {
	before, during := passInput(t)
	want := reference(t, before, during)
	for _, step := range []int{1, 3, 4, 7} {
		l, dir := testLog(t, compactCfg)
		feed(t, l, before)
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		pass, err := l.PrepareCompaction(CompactOptions{Latest: true, DeleteHorizon: 1500, ID: 3})
		if err != nil {
			t.Fatal(err)
		}
		feed(t, l, during[:5]) // appends go on meanwhile
		calls := 0
		l.swapHook = func(_ int64, s int) bool {
			calls++
			return calls > 10 && s == step // in the second segment's swap
		}
		if _, err := pass.Run(); !errors.Is(err, errSimulatedCrash) {
			t.Fatalf("step %d: %v, want the simulated crash", step, err)
		}
		// The process dies (what it appended was synced); the crash also
		// left a half-written copy of a later segment.
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		bases := segmentBases(t, dir)
		half := segmentFile(dir, bases[len(bases)/2], logSuffix+cleanedSuffix)
		if err := os.WriteFile(half, []byte("half a batch"), 0o644); err != nil {
			t.Fatal(err)
		}
		l2 := reopen(t, dir, compactCfg)
		opts, ok, err := l2.PlannedCompaction()
		if err != nil || !ok || opts.ID != 3 {
			t.Fatalf("step %d: plan after the crash %+v %t %v", step, opts, ok, err)
		}
		if _, err := os.Stat(half); !os.IsNotExist(err) {
			t.Fatalf("step %d: the half-written copy is still there (%v)", step, err)
		}
		again, err := l2.PrepareCompaction(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := again.Run(); err != nil {
			t.Fatal(err)
		}
		feed(t, l2, during[5:])
		l2.Close()
		sameFiles(t, want, segmentFiles(t, dir))
	}
}

// TestCompactionPassBesideDeletion: segments deleted below a new log start
// while a pass rewrites them are not resurrected, and the pass's plan and
// the others' files end as if the deletion came after the pass.
func TestCompactionPassBesideDeletion(t *testing.T) {
	before, _ := passInput(t)
	l, dir := testLog(t, compactCfg)
	feed(t, l, before)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	cut := segs[3].BaseOffset
	pass, err := l.PrepareCompaction(CompactOptions{Latest: true, DeleteHorizon: 1500})
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan struct{})
	l.swapHook = func(int64, int) bool {
		select {
		case <-deleted:
		default: // first swap: the deletion happens now, before it goes on
			l.swapHook = nil
			go func() {
				defer close(deleted)
				if _, err := l.DeleteSegmentsBefore(cut); err != nil {
					t.Error(err)
				}
			}()
		}
		return false
	}
	if _, err := pass.Run(); err != nil {
		t.Fatal(err)
	}
	<-deleted
	if got := l.BaseOffset(); got != cut {
		t.Fatalf("log starts at %d, want %d", got, cut)
	}
	for _, base := range segmentBases(t, dir) {
		if base < cut {
			t.Errorf("segment %d below the log start %d is back", base, cut)
		}
	}
	l.Close()
	l2 := reopen(t, dir, compactCfg)
	if l2.BaseOffset() != cut {
		t.Fatalf("reopened log starts at %d, want %d", l2.BaseOffset(), cut)
	}
}

// segmentBases lists the base offsets of the .log files in dir.
func segmentBases(t *testing.T, dir string) []int64 {
	t.Helper()
	var out []int64
	for name := range segmentFiles(t, dir) {
		var base int64
		if n, _ := fmt.Sscanf(name, "%020d.log", &base); n == 1 && filepath.Ext(name) == logSuffix {
			out = append(out, base)
		}
	}
	slices.Sort(out)
	return out
}

// checkReads reads the log below end and checks every record it gets
// against orig, the records as appended.
func checkReads(l *Log, end int64, orig map[int64]record.Record) error {
	for off := int64(0); off < end; {
		data, err := l.Read(off, 1<<20, end)
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		batches, err := record.Split(data)
		if err != nil || len(batches) == 0 {
			return fmt.Errorf("read at %d: %d batches, %v", off, len(batches), err)
		}
		for _, b := range batches {
			h, recs, err := record.Records(b)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if o, ok := orig[r.Offset]; !ok || !bytes.Equal(o.Value, r.Value) || !bytes.Equal(o.Key, r.Key) {
					return fmt.Errorf("offset %d read %q=%q, appended %q=%q", r.Offset, r.Key, r.Value, o.Key, o.Value)
				}
			}
			off = h.LastOffset() + 1
		}
	}
	return nil
}
