package fsm

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/plugins"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/plugin/plugintest"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// redactPlugin builds examples/plugins/redact with the SDK, once.
func redactPlugin(t testing.TB) []byte { return plugintest.Example(t, "redact") }

// pluginRig is two state machines fed the same blocks, whose app hashes
// are compared at every height.
type pluginRig struct {
	t    *testing.T
	fs   [2]*FSM
	dirs [2]string
	now  int64
	n    int
}

func newPluginRig(t *testing.T) *pluginRig {
	r := &pluginRig{t: t, now: t0}
	for i := range r.fs {
		r.dirs[i] = t.TempDir()
		f, err := Open(Options{Dir: r.dirs[i], HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
		if err != nil {
			t.Fatal(err)
		}
		r.fs[i] = f
	}
	t.Cleanup(func() {
		for _, f := range r.fs {
			f.Close()
		}
	})
	return r
}

// restart closes both machines and opens them again on their state.
func (r *pluginRig) restart() {
	r.t.Helper()
	for i := range r.fs {
		r.fs[i].Close()
		f, err := Open(Options{Dir: r.dirs[i], HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
		if err != nil {
			r.t.Fatal(err)
		}
		r.fs[i] = f
	}
}

// run applies one block of one transaction per command to both machines.
func (r *pluginRig) run(cmds ...core.Command) []core.Result {
	r.t.Helper()
	r.now += 100
	var txs [][]byte
	for _, c := range cmds {
		r.n++
		txs = append(txs, tx(r.n, c))
	}
	var hashes [2][]byte
	var rs []core.Result
	for i, f := range r.fs {
		h, _ := f.Info()
		o, err := f.ApplyBlock(core.Block{Height: h + 1, TimeMs: r.now, Txs: txs})
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err = f.Commit(); err != nil {
			r.t.Fatal(err)
		}
		_, hashes[i] = f.Info()
		if i == 0 {
			for _, x := range o.Txs {
				rs = append(rs, x.Results...)
			}
		}
	}
	if !bytes.Equal(hashes[0], hashes[1]) {
		r.t.Fatalf("the two state machines' app hashes differ: %x, %x", hashes[0], hashes[1])
	}
	return rs
}

func (r *pluginRig) must(what string, res core.Result, code int16) core.Result {
	r.t.Helper()
	if res.Code != code {
		r.t.Fatalf("%s: code %d (%s), want %d", what, res.Code, res.Message, code)
	}
	return res
}

// deploy runs the commands of a deployment, each in a block, and answers
// the last's result.
func (r *pluginRig) deploy(name, topic string, wasm []byte, config ...PluginConfig) core.Result {
	r.t.Helper()
	var last core.Result
	for i, c := range deployPlugin(name, topic, wasm, config...) {
		last = r.run(c)[0]
		if last.Code != 0 {
			return last
		}
		if i == 0 && last.Counts[0].N == 0 {
			break // the module runs already
		}
	}
	return last
}

// stored is topic's partition 0 as stored: per batch, its header and
// "offset:key=value" of each record.
func (r *pluginRig) stored(topic string) (hs []record.Header, recs []string) {
	r.t.Helper()
	p := r.fs[0].View().Partition(topic, 0)
	for off := p.LogStartOffset(); off < p.LastStableOffset(); {
		data, err := p.ReadCommitted(off, 1<<20)
		if err != nil {
			r.t.Fatal(err)
		}
		batches, err := record.Split(data)
		if err != nil || len(batches) == 0 {
			r.t.Fatalf("%s@%d: %v", topic, off, err)
		}
		for _, b := range batches {
			h, rs, err := record.Records(b)
			if err != nil {
				r.t.Fatal(err)
			}
			if _, err := record.ValidateStored(b); err != nil {
				r.t.Fatalf("a stored batch: %v", err)
			}
			hs = append(hs, h)
			off = h.LastOffset() + 1
			for _, rec := range rs {
				recs = append(recs, string(rec.Key)+"@"+strconvI(rec.Offset)+"="+string(rec.Value))
			}
		}
	}
	return hs, recs
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }

func jsonBatch(t *testing.T, codec record.Codec, pid int64, seq int32, values ...string) []byte {
	t.Helper()
	var recs []record.Record
	for i, v := range values {
		recs = append(recs, record.Record{OffsetDelta: int32(i), Key: []byte{'k', byte('0' + i)}, Value: []byte(v)})
	}
	h := record.Header{FirstTimestamp: t0, ProducerID: pid, ProducerEpoch: -1, BaseSequence: -1, Attributes: int16(codec)}
	if pid >= 0 {
		h.ProducerEpoch, h.BaseSequence = 0, seq
	}
	b, err := record.Build(h, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProducePlugin (issue 24): the redact example, built with the SDK,
// deployed on a topic, rewrites each batch inside the apply: what is
// stored is its output, uncompressed, with the offsets of the batch as
// sent; two state machines fed the same blocks have the same app hash at
// every height and the same log files. A batch it rejects is refused
// whole with INVALID_RECORD and its message; an idempotent producer's
// retry is answered with the first offset and not run again; a new
// config of the same module takes effect in the block that deploys it;
// removing the plugin stores batches as sent again; and the machines,
// restarted, load the deployments and still agree.
func TestProducePlugin(t *testing.T) {
	r := newPluginRig(t)
	r.must("topic", r.run(topics.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: -1})[0], 0)
	wasm := redactPlugin(t)
	r.must("deploy redact", r.deploy("redact", "orders", wasm, PluginConfig{Key: "fields", Value: "card,customer.ssn"}), 0)
	infos := r.fs[0].PluginsView().All()
	if len(infos) != 1 || infos[0].State != plugins.StateActive || infos[0].Size != int64(len(wasm)) || infos[0].Topic != "orders" {
		t.Fatalf("deployments %+v", infos)
	}

	in := []string{`{"id":1,"card":"4111","customer":{"name":"a","ssn":"123"}}`, `{"id":2}`, `{"card":"x","id":3}`}
	res := r.must("produce through redact", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecGzip, -1, 0, in...)})[0], 0)
	if res.BaseOffset != 0 {
		t.Fatalf("base offset %d", res.BaseOffset)
	}
	hs, recs := r.stored("orders")
	want := []string{`k0@0={"id":1,"customer":{"name":"a"}}`, `k1@1={"id":2}`, `k2@2={"id":3}`}
	if !slices.Equal(recs, want) || hs[0].Codec() != record.CodecNone {
		t.Fatalf("stored %q (codec %v), want %q uncompressed", recs, hs[0].Codec(), want)
	}

	// A value that is not JSON: the plugin rejects the batch.
	bad := r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, -1, 0, `{"id":4}`, `not json`)})[0]
	if bad.Code != kerr.InvalidRecord.Code || !strings.Contains(bad.Message, "plugin redact rejected the batch: redact: record 1: not JSON") {
		t.Fatalf("a batch redact cannot read: code %d %q", bad.Code, bad.Message)
	}

	// An idempotent producer: its retry is answered from the producer
	// state, its next batch follows.
	first := r.must("idempotent", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, 7, 0, `{"card":1}`, `{"card":2}`)})[0], 0)
	retry := r.must("retry", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, 7, 0, `{"card":1}`, `{"card":2}`)})[0], 0)
	next := r.must("next", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, 7, 2, `{"card":3}`)})[0], 0)
	if first.BaseOffset != 3 || retry.BaseOffset != 3 || next.BaseOffset != 5 {
		t.Fatalf("idempotent offsets %d, retry %d, next %d; want 3, 3, 5", first.BaseOffset, retry.BaseOffset, next.BaseOffset)
	}

	// The same module with another config: at once, no upload.
	re := r.run(deployPlugin("redact", "orders", wasm, PluginConfig{Key: "fields", Value: "id"}, PluginConfig{Key: "mask", Value: "#"})[0])[0]
	if re.Code != 0 || re.Counts[0].N != 0 {
		t.Fatalf("redeploying the same module: %+v", re)
	}
	r.must("produce masked", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, -1, 0, `{"id":9,"card":"c"}`)})[0], 0)

	// Removed: batches are stored as sent.
	r.must("remove", r.run(RemovePlugin{Name: "redact", Topic: "orders"})[0], 0)
	r.must("remove again", r.run(RemovePlugin{Name: "redact", Topic: "orders"})[0], kerr.ResourceNotFound.Code)
	r.must("produce plain", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, -1, 0, `{"card":"kept"}`)})[0], 0)
	_, recs = r.stored("orders")
	want = append(want, `k0@3={}`, `k1@4={}`, `k0@5={}`, `k0@6={"id":"#","card":"c"}`, `k0@7={"card":"kept"}`)
	if !slices.Equal(recs, want) {
		t.Fatalf("stored %q, want %q", recs, want)
	}
	a, b := logFiles(t, r.dirs[0]), logFiles(t, r.dirs[1])
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("log files: %d and %d", len(a), len(b))
	}
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			t.Fatalf("log file %s differs between the state machines", name)
		}
	}

	// Restarted with a deployment in effect: the module is loaded from
	// the state, and runs as before.
	r.must("deploy again", r.deploy("redact", "orders", wasm, PluginConfig{Key: "fields", Value: "card"}), 0)
	r.restart()
	r.must("produce after a restart", r.run(topics.Produce{Topic: "orders", Partition: 0, Records: jsonBatch(t, record.CodecNone, -1, 0, `{"card":"gone","id":10}`)})[0], 0)
	_, recs = r.stored("orders")
	if got := recs[len(recs)-1]; got != `k0@8={"id":10}` {
		t.Fatalf("after a restart stored %q", got)
	}
}

// TestPluginRecordCounts: a plugin that returns no records stores an empty
// batch that keeps the offsets of the batch as sent; one that returns
// more records than it was given is refused for an idempotent producer's
// batch and stores them all for a batch without a producer id.
func TestPluginRecordCounts(t *testing.T) {
	r := newPluginRig(t)
	r.must("topic", r.run(topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})[0], 0)
	r.must("none", r.deploy("none", "t", constPlugin(wire.Output{Records: []wire.Record{}})), 0)
	r.must("filtered", r.run(topics.Produce{Topic: "t", Partition: 0, Records: jsonBatch(t, record.CodecNone, 3, 0, "a", "b")})[0], 0)
	after := r.must("after", r.run(topics.Produce{Topic: "t", Partition: 0, Records: jsonBatch(t, record.CodecNone, 3, 2, "c")})[0], 0)
	if after.BaseOffset != 2 {
		t.Fatalf("the batch after an emptied one of two records: offset %d", after.BaseOffset)
	}
	hs, recs := r.stored("t")
	if len(recs) != 0 || len(hs) != 2 || hs[0].NumRecords != 0 || hs[0].LastOffsetDelta != 1 {
		t.Fatalf("stored %q in %+v", recs, hs)
	}

	three := constPlugin(wire.Output{Records: []wire.Record{{Value: []byte("x")}, {Value: []byte("y")}, {Value: []byte("z")}}})
	r.must("three", r.deploy("none", "t", three), 0)
	many := r.run(topics.Produce{Topic: "t", Partition: 0, Records: jsonBatch(t, record.CodecNone, 3, 3, "d")})[0]
	if many.Code != kerr.InvalidRecord.Code || !strings.Contains(many.Message, "idempotent producer") {
		t.Fatalf("three records for one of an idempotent producer: %d %q", many.Code, many.Message)
	}
	r.must("three for one", r.run(topics.Produce{Topic: "t", Partition: 0, Records: jsonBatch(t, record.CodecNone, -1, 0, "d")})[0], 0)
	_, recs = r.stored("t")
	if !slices.Equal(recs, []string{"@3=x", "@4=y", "@5=z"}) {
		t.Fatalf("stored %q", recs)
	}
}

// TestHostilePlugins (issue 24): what cannot be a plugin is refused when
// its upload completes, the upload dropped; a module whose hook loops
// forever or allocates without bound rejects each batch with a clear
// message, on both machines alike; the chain goes on.
func TestHostilePlugins(t *testing.T) {
	r := newPluginRig(t)
	r.must("topic", r.run(topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})[0], 0)
	refused := func(what string, wasm []byte, msg string) {
		t.Helper()
		res := r.deploy("bad", "t", wasm)
		if res.Code != kerr.InvalidRequest.Code || !strings.Contains(res.Message, msg) {
			t.Fatalf("%s: code %d %q, want INVALID_REQUEST with %q", what, res.Code, res.Message, msg)
		}
		if got := r.fs[0].PluginsView().All(); len(got) != 0 {
			t.Fatalf("%s: deployments left %+v", what, got)
		}
	}
	refused("not WebAssembly", []byte("#!/bin/sh\nrm -rf /\n"), "not a plugin module")
	refused("a start that never ends", wasmPlugin(loopForever, []byte{0x42, 0, 0x0b}, 0, nil), "out of fuel")
	noExports := constPlugin(wire.Output{})
	noExports = bytes.Replace(noExports, []byte("stele_produce"), []byte("stele_xroduce"), 1)
	refused("without the SDK's exports", noExports, "exports no hook")
	refused("without the hook it is deployed to", constFetchPlugin(wire.FetchOutput{}), "has no produce hook")

	// A chunk that does not match the digest deployed.
	good := constPlugin(wire.Output{Records: []wire.Record{}})
	d, chunks := plugins.DeployCommands("bad", "t", plugins.HookProduce, nil, good)
	r.must("deploy", r.run(d)[0], 0)
	chunks[0].Data = append([]byte{good[0] ^ 1}, good[1:]...)
	if res := r.run(chunks[0])[0]; res.Code != kerr.InvalidRequest.Code || !strings.Contains(res.Message, "do not hash to the digest") {
		t.Fatalf("altered bytes: %d %q", res.Code, res.Message)
	}
	r.must("a chunk without an upload", r.run(chunks[0])[0], kerr.InvalidRequest.Code)
	r.must("a hook not built yet", r.run(DeployPlugin{Name: "f", Topic: "t", Hook: plugins.HookSnapshot, Size: 1})[0], kerr.InvalidRequest.Code)
	r.must("no such topic", r.run(DeployPlugin{Name: "f", Topic: "nope", Hook: plugins.HookProduce, Size: 1})[0], kerr.UnknownTopicOrPartition.Code)
	r.must("of another tenant", r.run(DeployPlugin{Name: "acme~f", Topic: "t", Hook: plugins.HookProduce, Size: 1})[0], kerr.InvalidRequest.Code)

	for _, c := range []struct {
		what, msg string
		body      []byte
	}{{"a hook that loops forever", "out of fuel", loopForever}, {"a hook that allocates without bound", "failed on the batch", growForever}} {
		r.must("deploy "+c.what, r.deploy("hostile", "t", wasmPlugin(nil, c.body, 0, nil)), 0)
		res := r.run(topics.Produce{Topic: "t", Partition: 0, Records: jsonBatch(t, record.CodecNone, -1, 0, "a")})[0]
		if res.Code != kerr.InvalidRecord.Code || !strings.Contains(res.Message, c.msg) {
			t.Fatalf("%s: code %d %q, want INVALID_RECORD with %q", c.what, res.Code, res.Message, c.msg)
		}
	}
	if hs, _ := r.stored("t"); len(hs) != 0 {
		t.Fatalf("stored %d batches", len(hs))
	}
}

// examplePlugin builds examples/plugins/name with the SDK.
func examplePlugin(t *testing.T, name string) []byte { return plugintest.Example(t, name) }

// TestPluginState (issue 24, app version 18): the ratelimit example,
// built with the SDK, counts each key's records per second of block time
// in its own state, across batches: two state machines agree at every
// height. A batch refused by the plugin, or by a check after it
// (max.message.bytes), leaves the state as it was; a new second starts
// afresh; the state survives a restart of the machines and goes with the
// plugin when it is removed.
func TestPluginState(t *testing.T) {
	r := newPluginRig(t)
	r.now = 1_700_000_000_000 // a second's start
	r.must("topic", r.run(topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "max.message.bytes", Value: "2000"}}})[0], 0)
	r.must("deploy ratelimit", r.deploy("limit", "t", examplePlugin(t, "ratelimit"), PluginConfig{Key: "records", Value: "2"}), 0)
	r.now = 1_700_000_010_000 - 100 // the next block opens second 1700000010
	produce := func(b []byte) core.Result {
		return r.run(topics.Produce{Topic: "t", Partition: 0, Records: b})[0]
	}
	keyed := func(keys ...string) []byte {
		var kv []string
		for _, k := range keys {
			kv = append(kv, k, "v")
		}
		return keyedBatch(t, t0, -1, -1, -1, false, kv...)
	}
	r.must("a, a", produce(keyed("a", "a")), 0)
	if res := produce(keyed("a")); res.Code != kerr.InvalidRecord.Code || !strings.Contains(res.Message, `key "a" has more than 2 records in the second 1700000010`) {
		t.Fatalf("a third a: %d %q", res.Code, res.Message)
	}
	// c, c counted, then a refused: c's counts are not kept.
	r.must("c, c, a", produce(keyed("c", "c", "a")), kerr.InvalidRecord.Code)
	r.must("c, c after the refusal", produce(keyed("c", "c")), 0)
	// d, d counted by the plugin, the batch refused by max.message.bytes.
	big := record.Record{Key: []byte("d"), Value: make([]byte, 3000)}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{big, {OffsetDelta: 1, Key: []byte("d"), Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	if res := produce(b); res.Code == 0 || res.Code == kerr.InvalidRecord.Code {
		t.Fatalf("a batch past max.message.bytes: %d %q", res.Code, res.Message)
	}
	r.must("d, d after the refusal", produce(keyed("d", "d")), 0)
	r.must("a third d", produce(keyed("d")), kerr.InvalidRecord.Code)

	// Restarted, the machines have the counts.
	r.restart()
	r.must("a third a after a restart", produce(keyed("a")), kerr.InvalidRecord.Code)

	r.now += 1000 // the next second
	r.must("a, a in the next second", produce(keyed("a", "a")), 0)
	if n := countState(t, r.fs[0], "limit"); n != 3 { // ka, the window, one index piece: nothing of the last second
		t.Fatalf("%d state keys in a new second, want 3", n)
	}
	r.must("remove", r.run(RemovePlugin{Name: "limit", Topic: "t"})[0], 0)
	if n := countState(t, r.fs[0], "limit"); n != 0 {
		t.Fatalf("%d state keys left after the removal", n)
	}
	r.must("redeploy", r.deploy("limit", "t", examplePlugin(t, "ratelimit"), PluginConfig{Key: "records", Value: "2"}), 0)
	r.must("a, a after the redeployment: counted afresh", produce(keyed("a", "a")), 0)
}

// countState counts the keys of plugin name's state in f's store.
func countState(t *testing.T, f *FSM, name string) int {
	t.Helper()
	n := 0
	if err := f.Store.Scan(append([]byte("d/s/"+name), 0), func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
