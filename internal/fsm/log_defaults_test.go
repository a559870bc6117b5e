package fsm

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// logDefaultBlocks: "before" is created, a record written to each of its
// partitions, then the cluster-wide default log.retention.ms is set to 10 s
// and log.segment.bytes to 200 (so each batch rolls a segment and the old
// ones can be deleted); "after" is created then, and "own" sets its own
// retention.ms. Reference: Kafka's DynamicLogConfig.reconfigure, which
// gives every log the new broker defaults under its own overrides.
func logDefaultBlocks(t testing.TB) []block {
	produce := func(topic string, ts int64, n int) core.Command {
		return topics.Produce{Topic: topic, Partition: 0, Records: batch(t, ts, record.CodecNone, "k", n)}
	}
	return []block{
		{time: t0, txs: [][]byte{tx(1, topics.CreateTopic{Name: "before", Partitions: 1, ReplicationFactor: -1})}},
		{time: t0 + 100, txs: [][]byte{tx(2, produce("before", t0+100, 3))}},
		{time: t0 + 200, txs: [][]byte{tx(3, topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{
			{Op: topics.OpSet, Name: "log.retention.ms", Value: "10000"}, {Op: topics.OpSet, Name: "log.segment.bytes", Value: "200"}}})}},
		{time: t0 + 300, txs: [][]byte{
			tx(4, topics.CreateTopic{Name: "after", Partitions: 1, ReplicationFactor: -1}),
			tx(5, topics.CreateTopic{Name: "own", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "retention.ms", Value: "-1"}}}),
		}},
		{time: t0 + 400, txs: [][]byte{tx(6, produce("before", t0+400, 3), produce("after", t0+400, 3), produce("own", t0+400, 3))}},
		{time: t0 + 500, txs: [][]byte{tx(7, produce("before", t0+500, 3), produce("after", t0+500, 3), produce("own", t0+500, 3))}},
		// 20 s on: retention has run, by the defaults.
		{time: t0 + 20_500, txs: [][]byte{tx(8, produce("before", t0+20_500, 1), produce("after", t0+20_500, 1), produce("own", t0+20_500, 1))}},
		{time: t0 + 22_000, txs: nil},
	}
}

// TestLogDefaultsApply: a topic created before the default changed and one
// created after both follow it (their old segments are deleted by the
// default retention.ms); a topic's own config wins over it.
func TestLogDefaultsApply(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	outs := applyOutcomes(t, f, logDefaultBlocks(t))
	if r := outs[2].Txs[0].Results[0]; r.Code != 0 {
		t.Fatalf("setting the defaults: %+v", r)
	}
	v := f.View()
	if got := v.LogDefaults(); len(got) != 2 || got["log.retention.ms"] != "10000" || got["log.segment.bytes"] != "200" {
		t.Fatalf("the view's log defaults: %v", got)
	}
	for _, name := range []string{"before", "after"} {
		tv := v.Topic(name)
		if tv.Config.RetentionMs != 10_000 || tv.Config.SegmentBytes != 200 || len(tv.Configs) != 0 {
			t.Fatalf("%s: config %+v explicit %v, want the defaults' retention and segment size", name, tv.Config, tv.Configs)
		}
		if lso := tv.Partitions[0].LogStartOffset(); lso == 0 {
			t.Errorf("%s: log start still 0: the default retention.ms deleted nothing", name)
		}
	}
	own := v.Topic("own")
	if own.Config.RetentionMs != -1 || own.Config.SegmentBytes != 200 {
		t.Fatalf("own: config %+v, want its own retention.ms over the default segment size", own.Config)
	}
	if lso := own.Partitions[0].LogStartOffset(); lso != 0 {
		t.Errorf("own: log start %d: the default retention.ms overrode the topic's own", lso)
	}
}

// TestLogDefaultsChanges: incremental SET, DELETE, APPEND and SUBTRACT,
// the legacy replacement of the whole set, and refusals with Kafka's codes.
func TestLogDefaultsChanges(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	steps := []struct {
		cmd  topics.AlterLogDefaults
		code int16
		want map[string]string
	}{
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpAppend, Name: "log.cleanup.policy", Value: "compact"}}}, 0,
			map[string]string{"log.cleanup.policy": "delete,compact"}},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSubtract, Name: "log.cleanup.policy", Value: "delete"}, {Op: topics.OpSet, Name: "message.max.bytes", Value: "5000"}}}, 0,
			map[string]string{"log.cleanup.policy": "compact", "message.max.bytes": "5000"}},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpAppend, Name: "message.max.bytes", Value: "1"}}}, kerr.InvalidConfig.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.segment.bytes", Value: "13"}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.cleanup.policy", Value: "sometimes"}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.retention.hours", Value: "1"}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.message.format.version", Value: "3.0"}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "retention.ms", Value: "1"}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.retention.ms", Value: "1"}, {Op: topics.OpDelete, Name: "log.retention.ms", Value: ""}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: 9, Name: "log.retention.ms", Value: "1"}}}, kerr.InvalidRequest.Code, nil},
		{topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpDelete, Name: "message.max.bytes", Value: ""}}}, 0,
			map[string]string{"log.cleanup.policy": "compact"}},
		{topics.AlterLogDefaults{Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.retention.bytes", Value: "1000"}, {Op: topics.OpSet, Name: "compression.type", Value: "zstd"}}}, 0,
			map[string]string{"log.retention.bytes": "1000", "compression.type": "zstd"}},
		{topics.AlterLogDefaults{}, 0, map[string]string{}},
	}
	var blocks []block
	for i, s := range steps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	for i, out := range applyOutcomes(t, f, blocks) {
		r := out.Txs[0].Results[0]
		if r.Code != steps[i].code {
			t.Errorf("step %d %+v: code %d (%s), want %d", i, steps[i].cmd, r.Code, r.Message, steps[i].code)
		}
	}
	if got := f.View().LogDefaults(); len(got) != 0 {
		t.Fatalf("after the empty legacy AlterConfigs: %v, want none", got)
	}
	if _, ok, err := f.Store.Get(topics.KeyLogDefaults); ok || err != nil {
		t.Fatalf("m/log-defaults still stored (%v) with no defaults left", err)
	}
	// And each intermediate state, replayed one step at a time.
	g := open(t, t.TempDir())
	defer g.Close()
	for i, s := range steps {
		applyRange(t, g, blocks, i+1, i+1)
		if s.want == nil {
			continue
		}
		if got := g.View().LogDefaults(); !sameMap(got, s.want) {
			t.Errorf("after step %d: %v, want %v", i, got, s.want)
		}
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestLogDefaultsDeterministicAndReloaded: two brokers fed the same blocks
// agree on every app hash; a broker reopened reads the defaults back and
// resolves every topic with them, and a broker restored from a snapshot
// holds them too (the leaf travels with the state).
func TestLogDefaultsDeterministicAndReloaded(t *testing.T) {
	blocks := logDefaultBlocks(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := open(t, dirA), open(t, dirB)
	ha, hb := applyAll(t, a, blocks), applyAll(t, b, blocks)
	for i := range ha {
		if !bytes.Equal(ha[i], hb[i]) {
			t.Fatalf("height %d: app hashes differ", i+1)
		}
	}
	want := a.View().Topic("before").Config
	s := takeSnapshot(t, a, filepath.Join(dirA, "snapshots", "last"), nil)
	a.Close()
	b.Close()

	r := open(t, dirA)
	defer r.Close()
	if got := r.View().LogDefaults(); got["log.retention.ms"] != "10000" || got["log.segment.bytes"] != "200" {
		t.Fatalf("reopened: log defaults %v", got)
	}
	if got := r.ByName["after"].Config; !topics.SameConfig(got, want) {
		t.Fatalf("reopened: after's config %+v, want %+v", got, want)
	}

	dst := open(t, t.TempDir())
	defer dst.Close()
	restoreInto(t, dst, s)
	if !bytes.Equal(dst.AppHash, ha[len(ha)-1]) {
		t.Fatalf("restored app hash %x, want %x", dst.AppHash, ha[len(ha)-1])
	}
	if got := dst.View().LogDefaults(); got["log.retention.ms"] != "10000" {
		t.Fatalf("restored: log defaults %v", got)
	}
	if got := dst.ByName["before"].Config; !topics.SameConfig(got, want) {
		t.Fatalf("restored: before's config %+v, want %+v", got, want)
	}
}

// TestDecodeLogDefaults: a stored value naming a default that cannot be
// set, or holding an invalid value, is refused as malformed.
func TestDecodeLogDefaults(t *testing.T) {
	good := map[string]string{"log.retention.ms": "5", "log.cleanup.policy": "compact"}
	if m, err := topics.DecodeLogDefaults(topics.EncodeLogDefaults(good)); err != nil || !sameMap(m, good) {
		t.Fatalf("round trip: %v %v", m, err)
	}
	for _, bad := range []map[string]string{{"log.retention.hours": "5"}, {"log.retention.ms": "x"}, {"": ""}} {
		if _, err := topics.DecodeLogDefaults(topics.EncodeLogDefaults(bad)); err == nil {
			t.Errorf("%v decoded", bad)
		}
	}
}
