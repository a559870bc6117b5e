package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/pkg/plugin"
)

// TestRateLimit: each key's records are counted per second across
// batches; past the limit a batch is refused (over=reject) or the records
// past it left out (over=drop); keyless records pass unless counted; a new
// second starts afresh and deletes the last second's counts, so the state
// stays small; a bad config is refused.
func TestRateLimit(t *testing.T) {
	st := plugin.MapState{}
	t0 := time.UnixMilli(1_700_000_000_000)
	run := func(cfg map[string]string, at time.Time, keys ...string) ([]string, error) {
		b := &plugin.Batch{Config: cfg, Time: at, State: st}
		for _, k := range keys {
			r := plugin.Record{Value: []byte("v")}
			if k != "<null>" {
				r.Key = []byte(k)
			}
			b.Records = append(b.Records, r)
		}
		recs, err := limitBatch(b)
		var out []string
		for _, r := range recs {
			if r.Key == nil {
				out = append(out, "<null>")
				continue
			}
			out = append(out, string(r.Key))
		}
		return out, err
	}
	cfg := map[string]string{"records": "2"}
	if got, err := run(cfg, t0, "a", "b", "a", "<null>", "<null>", "<null>"); err != nil || len(got) != 6 {
		t.Fatalf("within the limit: %v %v", got, err)
	}
	if _, err := run(cfg, t0.Add(500*time.Millisecond), "b", "a"); err == nil || !strings.Contains(err.Error(), `key "a" has more than 2 records`) {
		t.Fatalf("past the limit, the same second: %v", err)
	}
	// A refused batch's state is dropped by the broker; here the map
	// keeps it, so the drop case runs on a state of its own.
	st = plugin.MapState{}
	drop := map[string]string{"records": "2", "over": "drop", "keyless": "count"}
	got, err := run(drop, t0, "a", "a", "a", "b", "<null>", "<null>", "<null>")
	if err != nil || strings.Join(got, ",") != "a,a,b,<null>,<null>" {
		t.Fatalf("over=drop, keyless=count: %v %v", got, err)
	}
	if got, err := run(drop, t0.Add(time.Second), "a", "a", "a"); err != nil || strings.Join(got, ",") != "a,a" {
		t.Fatalf("the next second: %v %v", got, err)
	}
	// Only the current second's keys (a) and the window and index stay.
	if len(st) != 3 || st["ka"] == nil {
		t.Fatalf("state after a new second: %d entries %v", len(st), st)
	}
	for name, c := range map[string]map[string]string{
		"no records": {}, "zero": {"records": "0"}, "not a number": {"records": "x"}, "bad over": {"records": "1", "over": "queue"},
	} {
		if _, err := run(c, t0, "a"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := limitBatch(&plugin.Batch{Config: cfg, Records: []plugin.Record{{Key: []byte("a")}}}); err == nil {
		t.Error("no state: no error")
	}
}
