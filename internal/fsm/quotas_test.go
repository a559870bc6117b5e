package fsm

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
)

// TestQuotaPrecedence: the quota applying to a (user, client id) is the
// most specific entity's, in Kafka's order (Reference: Kafka's
// ClientQuotaManager, DefaultQuotaCallback); quotas survive a restart
// under the same app hash; bad entities and values are refused.
func TestQuotaPrecedence(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion})
	if err != nil {
		t.Fatal(err)
	}
	n := func(s string) QuotaName { return QuotaName{Set: true, Name: s} }
	def := QuotaName{Set: true, Default: true}
	set := func(e QuotaEntity, v float64) AlterClientQuotas {
		return AlterClientQuotas{Entity: e, Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: v}}}
	}
	steps := []struct {
		cmd  AlterClientQuotas
		code int16
	}{
		{set(QuotaEntity{ClientID: def}, 8), 0},
		{set(QuotaEntity{ClientID: n("app")}, 7), 0},
		{set(QuotaEntity{User: def}, 6), 0},
		{set(QuotaEntity{User: def, ClientID: def}, 5), 0},
		{set(QuotaEntity{User: def, ClientID: n("app")}, 4), 0},
		{set(QuotaEntity{User: n("alice")}, 3), 0},
		{set(QuotaEntity{User: n("alice"), ClientID: def}, 2), 0},
		{set(QuotaEntity{User: n("alice"), ClientID: n("app")}, 1), 0},
		{set(QuotaEntity{}, 1), kerr.InvalidRequest.Code},
		{set(QuotaEntity{User: n("bob")}, 0), kerr.InvalidRequest.Code},
		{set(QuotaEntity{User: n("bob")}, 1.5), kerr.InvalidRequest.Code},
		{AlterClientQuotas{Entity: QuotaEntity{User: n("bob")}, Ops: []QuotaOp{{Key: "bananas_per_second", Value: 1}}}, kerr.InvalidRequest.Code},
	}
	var blocks []block
	for i, s := range steps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	for i, out := range applyOutcomes(t, f, blocks) {
		if r := out.Txs[0].Results[0]; r.Code != steps[i].code {
			t.Errorf("step %d: code %d (%s), want %d", i, r.Code, r.Message, steps[i].code)
		}
	}
	check := func(q *Quotas) {
		t.Helper()
		for _, c := range []struct {
			user, client string
			want         float64
		}{
			{"alice", "app", 1}, {"alice", "other", 2}, {"bob", "app", 4}, {"bob", "other", 5}, {"", "app", 7}, {"", "other", 8},
		} {
			if v, _, ok := q.Quota(c.user, c.client, QuotaProducerByteRate); !ok || v != c.want {
				t.Errorf("user %q client %q: %v %v, want %v", c.user, c.client, v, ok, c.want)
			}
		}
		if _, _, ok := q.Quota("alice", "app", QuotaConsumerByteRate); ok {
			t.Error("a consumer quota where none is set")
		}
	}
	check(f.Quotas())
	_, hash := f.Info()
	f.Close()
	g, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	check(g.Quotas())
	if _, h := g.Info(); !bytes.Equal(h, hash) {
		t.Fatal("the app hash changed across a restart")
	}
}
