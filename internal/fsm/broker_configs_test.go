package fsm

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// brokerConfigSteps: dynamic connection limits on BROKER resources, one
// command a block, with the code each gets and the sets after it
// (Reference: Kafka's DynamicBrokerConfig and ConnectionQuotas; the
// checks are SocketServerConfigs' and KafkaConfig.validateValues').
var brokerConfigSteps = []struct {
	cmd  cluster.AlterBrokerConfigs
	code int16
	want map[string]map[string]string // nil: unchanged from the step before
}{
	{cluster.AlterBrokerConfigs{Broker: "0", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPConfig, Value: "2"}}}, 0,
		map[string]map[string]string{"0": {cluster.MaxConnectionsPerIPConfig: "2"}}},
	{cluster.AlterBrokerConfigs{Broker: "", Incremental: true, Changes: []topics.ConfigChange{
		{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "100"}, {Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPOverridesConfig, Value: "127.0.0.2:5, [::1]:0"}}}, 0,
		map[string]map[string]string{"0": {cluster.MaxConnectionsPerIPConfig: "2"},
			"": {cluster.MaxConnectionsConfig: "100", cluster.MaxConnectionsPerIPOverridesConfig: "127.0.0.2:5, [::1]:0"}}},
	// Kafka's errors: a bad number, 0 for max.connections, per-ip 0 with no
	// overrides anywhere, APPEND on an int, a config Stele does not keep,
	// a broker name that is not an id, a negative id.
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "many"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "0"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPConfig, Value: "-1"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpAppend, Name: cluster.MaxConnectionsConfig, Value: "1"}}}, kerr.InvalidConfig.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "listener.name.PLAINTEXT.max.connection.creation.rate", Value: "10"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionCreationRateConfig, Value: "-1"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "one", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "10"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "-1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "10"}}}, kerr.InvalidRequest.Code, nil},
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPOverridesConfig, Value: "127.0.0.1"}}}, kerr.InvalidRequest.Code, nil},
	// per-ip 0 is fine with the default's overrides under it...
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPConfig, Value: "0"}}}, 0,
		map[string]map[string]string{"0": {cluster.MaxConnectionsPerIPConfig: "2"}, "1": {cluster.MaxConnectionsPerIPConfig: "0"},
			"": {cluster.MaxConnectionsConfig: "100", cluster.MaxConnectionsPerIPOverridesConfig: "127.0.0.2:5, [::1]:0"}}},
	// ...so the default cannot drop them while broker 1 relies on them.
	{cluster.AlterBrokerConfigs{Broker: "", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpDelete, Name: cluster.MaxConnectionsPerIPOverridesConfig, Value: ""}}}, kerr.InvalidRequest.Code, nil},
	// DELETE, and the legacy AlterConfigs replacing a set whole.
	{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpDelete, Name: cluster.MaxConnectionsPerIPConfig, Value: ""}}}, 0,
		map[string]map[string]string{"0": {cluster.MaxConnectionsPerIPConfig: "2"},
			"": {cluster.MaxConnectionsConfig: "100", cluster.MaxConnectionsPerIPOverridesConfig: "127.0.0.2:5, [::1]:0"}}},
	{cluster.AlterBrokerConfigs{Broker: "", Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "50"}}}, 0,
		map[string]map[string]string{"0": {cluster.MaxConnectionsPerIPConfig: "2"}, "": {cluster.MaxConnectionsConfig: "50"}}},
	{cluster.AlterBrokerConfigs{Broker: "0"}, 0, map[string]map[string]string{"": {cluster.MaxConnectionsConfig: "50"}}},
	{cluster.AlterBrokerConfigs{Broker: "3", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPConfig, Value: "7"}}}, 0,
		map[string]map[string]string{"": {cluster.MaxConnectionsConfig: "50"}, "3": {cluster.MaxConnectionsPerIPConfig: "7"}}},
}

func brokerConfigBlocks() []block {
	var blocks []block
	for i, s := range brokerConfigSteps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	return blocks
}

func sameBrokerConfigs(got *cluster.BrokerConfigs, want map[string]map[string]string) bool {
	if got == nil || len(got.ByResource) != len(want) {
		return false
	}
	for res, m := range want {
		if !sameMap(got.Of(res), m) {
			return false
		}
	}
	return true
}

// TestBrokerConfigsApply: every step gets its code, and the committed
// configs after each are what it says.
func TestBrokerConfigsApply(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	if got := f.BrokerConfigs(); got == nil || len(got.ByResource) != 0 {
		t.Fatalf("fresh: %+v", got)
	}
	blocks := brokerConfigBlocks()
	for i, out := range applyOutcomes(t, f, blocks) {
		if r := out.Txs[0].Results[0]; r.Code != brokerConfigSteps[i].code {
			t.Errorf("step %d %+v: code %d (%s), want %d", i, brokerConfigSteps[i].cmd, r.Code, r.Message, brokerConfigSteps[i].code)
		}
	}
	// Each intermediate state, replayed one step at a time.
	g := open(t, t.TempDir())
	defer g.Close()
	var want map[string]map[string]string
	for i, s := range brokerConfigSteps {
		applyRange(t, g, blocks, i+1, i+1)
		if s.want != nil {
			want = s.want
		}
		if want != nil && !sameBrokerConfigs(g.BrokerConfigs(), want) {
			t.Errorf("after step %d: %v, want %v", i, g.BrokerConfigs().ByResource, want)
		}
	}
	bc := f.BrokerConfigs()
	if v, own, ok := bc.Effective(3, cluster.MaxConnectionsPerIPConfig); !ok || !own || v != "7" {
		t.Errorf("broker 3's own per-ip: %q %v %v", v, own, ok)
	}
	if v, own, ok := bc.Effective(3, cluster.MaxConnectionsConfig); !ok || own || v != "50" {
		t.Errorf("broker 3's max.connections from the default: %q %v %v", v, own, ok)
	}
	if _, _, ok := bc.Effective(2, cluster.MaxConnectionsPerIPConfig); ok {
		t.Errorf("broker 2 has a dynamic per-ip limit")
	}
	// Removing every set removes the leaf.
	h := open(t, t.TempDir())
	defer h.Close()
	applyAll(t, h, []block{
		{time: t0, txs: [][]byte{tx(1, cluster.AlterBrokerConfigs{Broker: "2", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsConfig, Value: "9"}}})}},
		{time: t0 + 1, txs: [][]byte{tx(2, cluster.AlterBrokerConfigs{Broker: "2", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpDelete, Name: cluster.MaxConnectionsConfig, Value: ""}}})}},
	})
	if _, ok, err := h.Store.Get(cluster.KeyBrokerConfigs); ok || err != nil {
		t.Fatalf("m/broker-configs still stored (%v) with no config left", err)
	}
}

// TestConnectionCreationRateConfig: max.connection.creation.rate is a
// dynamic broker config like the connection limits (Reference: Kafka's
// SocketServerConfigs, INT, default Int.MaxValue, atLeast(0); KIP-612):
// set for one broker and cluster-wide, the broker's own value first, 0
// valid broker-wide (only Kafka's listener-prefixed form must be above 0),
// a negative or non-number value refused with Kafka's words, and deleted.
func TestConnectionCreationRateConfig(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	set := func(res, v string) cluster.AlterBrokerConfigs {
		return cluster.AlterBrokerConfigs{Broker: res, Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionCreationRateConfig, Value: v}}}
	}
	steps := []struct {
		cmd    cluster.AlterBrokerConfigs
		code   int16
		substr string
	}{
		{set("", "20"), 0, ""},
		{set("0", "0"), 0, ""},
		{set("1", "-1"), kerr.InvalidRequest.Code, "Invalid value -1 for configuration max.connection.creation.rate: value must be at least 0"},
		{set("1", "fast"), kerr.InvalidRequest.Code, "not a number of type INT"},
		{set("1", "2147483648"), kerr.InvalidRequest.Code, "max.connection.creation.rate"},
		{cluster.AlterBrokerConfigs{Broker: "1", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpAppend, Name: cluster.MaxConnectionCreationRateConfig, Value: "1"}}},
			kerr.InvalidConfig.Code, "Config value append is not allowed for config key: max.connection.creation.rate"},
	}
	var blocks []block
	for i, s := range steps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	for i, out := range applyOutcomes(t, f, blocks) {
		r := out.Txs[0].Results[0]
		if r.Code != steps[i].code || !strings.Contains(strings.ToLower(r.Message), strings.ToLower(steps[i].substr)) {
			t.Errorf("step %d %+v: %d %q, want %d with %q", i, steps[i].cmd, r.Code, r.Message, steps[i].code, steps[i].substr)
		}
	}
	bc := f.BrokerConfigs()
	if v, own, ok := bc.Effective(0, cluster.MaxConnectionCreationRateConfig); !ok || !own || v != "0" {
		t.Errorf("broker 0's own rate: %q %v %v", v, own, ok)
	}
	if v, own, ok := bc.Effective(1, cluster.MaxConnectionCreationRateConfig); !ok || own || v != "20" {
		t.Errorf("broker 1's rate from the default: %q %v %v", v, own, ok)
	}
	if d, ok := cluster.LookupBrokerConfig(cluster.MaxConnectionCreationRateConfig); !ok || d.Default != "2147483647" || d.Type != topics.TypeInt {
		t.Errorf("definition: %+v %v", d, ok)
	}
	g := open(t, t.TempDir())
	defer g.Close()
	applyAll(t, g, append(blocks[:1:1], block{time: t0 + 1, txs: [][]byte{tx(2,
		cluster.AlterBrokerConfigs{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpDelete, Name: cluster.MaxConnectionCreationRateConfig, Value: ""}}})}}))
	if _, _, ok := g.BrokerConfigs().Effective(1, cluster.MaxConnectionCreationRateConfig); ok {
		t.Errorf("broker 1 still has a dynamic rate after the default's was deleted")
	}
}

// TestBrokerConfigsDeterministicAndReloaded: two brokers fed the same
// blocks agree on every app hash; a reopened broker and one restored from
// a snapshot hold the same configs (the leaf travels with the state), as
// Kafka's dynamic configs survive a restart in the metadata log.
func TestBrokerConfigsDeterministicAndReloaded(t *testing.T) {
	blocks := brokerConfigBlocks()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := open(t, dirA), open(t, dirB)
	ha, hb := applyAll(t, a, blocks), applyAll(t, b, blocks)
	for i := range ha {
		if !bytes.Equal(ha[i], hb[i]) {
			t.Fatalf("height %d: app hashes differ", i+1)
		}
	}
	want := brokerConfigSteps[len(brokerConfigSteps)-1].want
	s := takeSnapshot(t, a, filepath.Join(dirA, "snapshots", "last"), nil)
	a.Close()
	b.Close()

	r := open(t, dirA)
	defer r.Close()
	if got := r.BrokerConfigs(); !sameBrokerConfigs(got, want) {
		t.Fatalf("reopened: %v, want %v", got.ByResource, want)
	}
	dst := open(t, t.TempDir())
	defer dst.Close()
	restoreInto(t, dst, s)
	if !bytes.Equal(dst.AppHash, ha[len(ha)-1]) {
		t.Fatalf("restored app hash %x, want %x", dst.AppHash, ha[len(ha)-1])
	}
	if got := dst.BrokerConfigs(); !sameBrokerConfigs(got, want) {
		t.Fatalf("restored: %v, want %v", got.ByResource, want)
	}
}

// TestDecodeBrokerConfigs: a stored value the state machine could not have
// written is refused as malformed.
func TestDecodeBrokerConfigs(t *testing.T) {
	good := map[string]map[string]string{"": {cluster.MaxConnectionsConfig: "5"}, "2": {cluster.MaxConnectionsPerIPConfig: "3"}}
	if m, err := cluster.DecodeBrokerConfigs(cluster.EncodeBrokerConfigs(good)); err != nil || len(m) != 2 || !sameMap(m["2"], good["2"]) {
		t.Fatalf("round trip: %v %v", m, err)
	}
	for name, bad := range map[string]map[string]map[string]string{
		"unknown config": {"1": {"log.dirs": "/x"}},
		"bad value":      {"1": {cluster.MaxConnectionsConfig: "0"}},
		"bad resource":   {"01": {cluster.MaxConnectionsConfig: "3"}},
		"empty set":      {"1": {}},
		"per-ip 0 alone": {"1": {cluster.MaxConnectionsPerIPConfig: "0"}},
	} {
		if _, err := cluster.DecodeBrokerConfigs(cluster.EncodeBrokerConfigs(bad)); err == nil || !strings.Contains(err.Error(), "stele/fsm") {
			t.Errorf("%s: %v, want an error", name, err)
		}
	}
	if _, err := cluster.DecodeBrokerConfigs(append(cluster.EncodeBrokerConfigs(good), 0)); err == nil {
		t.Errorf("trailing byte accepted")
	}
}

// TestParseConnectionOverridesFSM: Kafka's form of the overrides.
func TestParseConnectionOverridesFSM(t *testing.T) {
	m, err := cluster.ParseConnectionOverrides(" 127.0.0.1:3 , ::1:0,[::2]:4,host-a:9")
	if err != nil || len(m) != 4 || m["127.0.0.1"] != 3 || m["::1"] != 0 || m["::2"] != 4 || m["host-a"] != 9 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:-1", "a b:1", "h:1,h:2", "h:x"} {
		if _, err := cluster.ParseConnectionOverrides(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
