package storage

import (
	"fmt"
	"testing"
)

// TestCleansSegment pins which segments a pass cleans: sealed ones ending
// at or below its bound and the oldest open transaction.
func TestCleansSegment(t *testing.T) {
	for _, c := range []struct {
		base, next, upTo, unstable int64
		want                       bool
	}{
		{0, 10, 20, -1, true},
		{10, 20, 20, -1, true},  // ends at the bound
		{20, 30, 20, -1, false}, // the active segment (base at the bound)
		{10, 21, 20, -1, false}, // reaches past the bound
		{0, 10, 20, 10, true},   // ends where the open transaction starts
		{0, 10, 20, 9, false},   // holds its first batch
		{10, 20, 30, 0, false},
	} {
		if got := CleansSegment(c.base, c.next, c.upTo, c.unstable); got != c.want {
			t.Errorf("CleansSegment(%d, %d, upTo %d, unstable %d) = %t, want %t", c.base, c.next, c.upTo, c.unstable, got, c.want)
		}
	}
	segs := []SegmentInfo{{BaseOffset: 0, NextOffset: 10}, {BaseOffset: 10, NextOffset: 20}, {BaseOffset: 20, NextOffset: 30}, {BaseOffset: 30, NextOffset: 35}}
	for _, c := range []struct{ upTo, unstable, bound int64 }{
		{30, -1, 30}, {30, 25, 20}, {30, 20, 20}, {30, 5, 0}, {20, -1, 20}, {0, -1, 0},
	} {
		r := NewTombstoneRule(segs, c.upTo, c.unstable, 100)
		if r.Bound != c.bound || r.Horizon != 100 {
			t.Errorf("NewTombstoneRule(upTo %d, unstable %d) = %+v, want bound %d", c.upTo, c.unstable, r, c.bound)
		}
	}
	r := TombstoneRule{Bound: 20, Horizon: 100}
	for _, c := range []struct {
		off, ts int64
		want    bool
	}{{19, 99, true}, {19, 100, false}, {20, 0, false}, {0, -1, true}} {
		if got := r.Removes(c.off, c.ts); got != c.want {
			t.Errorf("%+v.Removes(%d, ts %d) = %t, want %t", r, c.off, c.ts, got, c.want)
		}
	}
}

// TestTombstoneRuleIsWhatCompactionRemoves: on a log of tombstones of
// every age, in segments before, across and after an open transaction, a
// pass removes exactly the tombstones TombstoneRule says it does.
func TestTombstoneRuleIsWhatCompactionRemoves(t *testing.T) {
	l, _ := testLog(t, LogConfig{SegmentBytes: 150})
	tombs := map[int64]int64{} // offset -> batch MaxTimestamp
	for i := range 12 {
		if i == 8 { // an open transaction from here on
			if err := l.Append(mkBatch(t, l.NextOffset(), []rec{kv("txn", "open", 500)}, batchOpts{producerID: 9, transactional: true}), 0); err != nil {
				t.Fatal(err)
			}
		}
		ts := int64(100 * (i % 6)) // expired ones on both sides of the transaction
		tombs[l.NextOffset()] = ts
		appendRecs(t, l, 0, tombstone(fmt.Sprintf("k%d", i), ts))
	}
	segs := l.Segments()
	if len(segs) < 6 {
		t.Fatalf("want many segments, got %d", len(segs))
	}
	const horizon = 650
	var unstable int64 = -1
	for _, s := range segs {
		if s.BaseOffset <= 8 && 8 < s.NextOffset {
			unstable = 8
		}
	}
	if unstable < 0 {
		t.Fatal("the open transaction is not at offset 8")
	}
	upTo := segs[len(segs)-1].BaseOffset
	rule := NewTombstoneRule(segs, upTo, unstable, horizon)
	if _, err := l.CompactWith(CompactOptions{Latest: true, DeleteHorizon: horizon, UpTo: upTo}); err != nil {
		t.Fatal(err)
	}
	after := recordsByOffset(t, l)
	removed, kept := 0, 0
	for off, ts := range tombs {
		_, ok := after[off]
		if ok == rule.Removes(off, ts) {
			t.Errorf("tombstone at %d (ts %d): kept %t, but the rule %+v says removed %t", off, ts, ok, rule, rule.Removes(off, ts))
		}
		if ok {
			kept++
		} else {
			removed++
		}
	}
	if removed == 0 || kept == 0 {
		t.Fatalf("removed %d, kept %d: the log must exercise both", removed, kept)
	}
	if _, ok := after[10]; !ok || tombs[10] >= horizon { // past the horizon, kept behind the open transaction
		t.Fatalf("the tombstone at 10 (ts %d) behind the open transaction: kept %t", tombs[10], ok)
	}
}
