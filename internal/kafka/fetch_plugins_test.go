package kafka

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/plugin/plugintest"
)

// TestFetchPlugins (docs/plugins.md "The fetch hook"): a plugin on a
// topic's fetch hook filters and transforms what franz-go consumers read,
// plain, compressed and transactional batches alike, offsets and the
// stored log unchanged, with the consumer's principal; it fails closed
// (UNKNOWN_SERVER_ERROR, never the stored records) when it refuses, breaks
// the offset rule or runs out of fuel, and the broker keeps serving;
// removed, the records are read as stored. A share group member reads
// through it too.
func TestFetchPlugins(t *testing.T) {
	var logs syncBuffer
	tb := startTestBrokerOrdered(t, local.Options{StartTime: time.Now(), Step: 20 * time.Millisecond, Interval: 20 * time.Millisecond},
		func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	submit := tb.submitter(t)
	ctx := context.Background()
	adm := kadm.NewClient(client(t, tb.addr))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "fp"); err != nil {
		t.Fatal(err)
	}
	produce := func(cl *kgo.Client, kv ...string) {
		t.Helper()
		var rs []*kgo.Record
		for i := 0; i < len(kv); i += 2 {
			rs = append(rs, &kgo.Record{Topic: "fp", Key: []byte(kv[i]), Value: []byte(kv[i+1])})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Offsets 0-2 (one batch), 3-4 (snappy), 5 in a transaction (its
	// marker at 6).
	produce(client(t, tb.addr, kgo.ProducerLinger(50*time.Millisecond)), "k1", "a", "drop", "b", "k2", "c")
	produce(client(t, tb.addr, kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerLinger(50*time.Millisecond)), "k3", "d", "drop", "e")
	tx := client(t, tb.addr, kgo.TransactionalID("fp-tx"))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(tx, "k4", "f")
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	type got struct {
		off       int64
		value     string
		principal string
	}
	read := func(level kgo.IsolationLevel) []got {
		t.Helper()
		cl := client(t, tb.addr, kgo.ConsumeTopics("fp"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond))
		var out []got
		for {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(cctx)
			cancel()
			n := 0
			fs.EachRecord(func(r *kgo.Record) {
				g := got{off: r.Offset, value: string(r.Value)}
				for _, h := range r.Headers {
					if h.Key == "principal" {
						g.principal = string(h.Value)
					}
				}
				out = append(out, g)
				n++
			})
			if n == 0 {
				return out
			}
		}
	}
	asStored := []got{{0, "a", ""}, {1, "b", ""}, {2, "c", ""}, {3, "d", ""}, {4, "e", ""}, {5, "f", ""}}
	if r := read(kgo.ReadUncommitted()); !slices.Equal(r, asStored) {
		t.Fatalf("without a plugin: %v", r)
	}

	fetchCode := func() int16 {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.MaxWaitMillis = 12, 1<<20, 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "fp"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, client(t, tb.addr))
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 && len(p.RecordBatches) != 0 {
			t.Fatalf("an error (%d) and %d bytes of records", p.ErrorCode, len(p.RecordBatches))
		}
		return p.ErrorCode
	}
	wasm := plugintest.Guest(t)
	deploy := func(mode string) {
		t.Helper()
		for i, c := range fsm.DeployPluginCommands("view", "fp", fsm.PluginHookFetch, []fsm.PluginConfig{{Key: "fetch", Value: mode}}, wasm) {
			r, err := tb.b.SubmitOne(ctx, c)
			if err != nil || r.Code != 0 {
				t.Fatalf("deploying (%s), command %d: %v %+v", mode, i, err, r)
			}
			if i == 0 && len(r.Counts) == 1 && r.Counts[0].What == fsm.PluginBytesNeeded && r.Counts[0].N == 0 {
				return // the module the name runs: in effect at once
			}
		}
	}
	deploy("filter")
	start := time.Now()
	if code := fetchCode(); code != 0 {
		t.Fatalf("the first fetch through the plugin: error %d", code)
	}
	t.Logf("the first fetch through the plugin (its module compiled and started) took %v", time.Since(start).Round(time.Millisecond))
	want := []got{{0, "A", "User:ANONYMOUS"}, {2, "C", "User:ANONYMOUS"}, {3, "D", "User:ANONYMOUS"}, {5, "F", "User:ANONYMOUS"}}
	for _, level := range []kgo.IsolationLevel{kgo.ReadUncommitted(), kgo.ReadCommitted()} {
		if r := read(level); !slices.Equal(r, want) {
			t.Fatalf("filtered (%v): %v, want %v", level, r, want)
		}
	}

	// Failing plugins: the partition's fetch fails, the broker goes on.
	for mode, why := range map[string]string{"reject": "refused the records: no fetch for you",
		"bogus": "returned a record at offset -1, which is not one it was given", "spin": "out of fuel"} {
		deploy(mode) // the same module: in effect at once
		start := time.Now()
		if code := fetchCode(); code != kerr.UnknownServerError.Code {
			t.Fatalf("%s: error %d, want UNKNOWN_SERVER_ERROR", mode, code)
		}
		t.Logf("%s: UNKNOWN_SERVER_ERROR after %v", mode, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(logs.String(), why) {
			t.Fatalf("%s: the broker's log does not say %q:\n%s", mode, why, logs.String())
		}
	}
	deploy("filter")
	if r := read(kgo.ReadUncommitted()); !slices.Equal(r, want) {
		t.Fatalf("filtered again: %v", r)
	}

	// A share group's member reads through the plugin too.
	setGroupConfigs(t, client(t, tb.addr), "fp-share", "share.auto.offset.reset", "earliest")
	member := shareClient(t, tb.addr, "fp-share", "fp")
	defer member.Close()
	var shared []got
	deadline := time.Now().Add(30 * time.Second)
	for len(shared) < len(want) && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := member.PollRecords(pctx, 10)
		cancel()
		for _, r := range fs.Records() {
			g := got{off: r.Offset, value: string(r.Value)}
			for _, h := range r.Headers {
				if h.Key == "principal" {
					g.principal = string(h.Value)
				}
			}
			shared = append(shared, g)
			r.Ack(kgo.AckAccept)
		}
	}
	slices.SortFunc(shared, func(a, b got) int { return int(a.off - b.off) })
	if !slices.Equal(shared, want) {
		t.Fatalf("a share group member read %v, want %v", shared, want)
	}

	submit("removing", fsm.RemovePlugin{Name: "view", Topic: "fp"})
	if r := read(kgo.ReadUncommitted()); !slices.Equal(r, asStored) {
		t.Fatalf("removed: %v", r)
	}
}
