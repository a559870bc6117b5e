package fsm

import (
	"net/netip"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
)

// TestIPQuotas: connection_creation_rate per address and for the default,
// with Kafka's checks; an address's own quota wins over the default, an
// IPv4-mapped IPv6 address is the IPv4 one; removed, the default applies;
// restarted, the quotas stay.
func TestIPQuotas(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion}
	f, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	rate := func(v float64) []QuotaOp { return []QuotaOp{{Key: QuotaConnectionCreationRate, Value: v}} }
	steps := []struct {
		cmd  AlterIPQuotas
		code int16
	}{
		{AlterIPQuotas{Default: true, Ops: rate(50)}, 0},
		{AlterIPQuotas{IP: "10.0.0.1", Ops: rate(3)}, 0},
		{AlterIPQuotas{IP: "2001:db8::1", Ops: rate(0)}, 0},
		{AlterIPQuotas{IP: "::ffff:10.0.0.2", Ops: rate(3)}, kerr.InvalidRequest.Code}, // not canonical
		{AlterIPQuotas{IP: "example.com", Ops: rate(3)}, kerr.InvalidRequest.Code},
		{AlterIPQuotas{IP: "10.0.0.3", Ops: rate(2.5)}, kerr.InvalidRequest.Code},
		{AlterIPQuotas{IP: "10.0.0.3", Ops: rate(-1)}, kerr.InvalidRequest.Code},
		{AlterIPQuotas{IP: "10.0.0.3", Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: 1}}}, kerr.InvalidRequest.Code},
		{AlterIPQuotas{Default: true, IP: "10.0.0.3", Ops: rate(1)}, kerr.InvalidRequest.Code},
		{AlterIPQuotas{IP: "10.0.0.4", Ops: rate(7)}, 0},
		{AlterIPQuotas{IP: "10.0.0.4", Ops: []QuotaOp{{Key: QuotaConnectionCreationRate, Remove: true}}}, 0},
	}
	var blocks []block
	for i, s := range steps {
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(i+1, s.cmd)}})
	}
	for i, out := range applyOutcomes(t, f, blocks) {
		if r := out.Txs[0].Results[0]; r.Code != steps[i].code {
			t.Errorf("step %d %+v: code %d (%s), want %d", i, steps[i].cmd, r.Code, r.Message, steps[i].code)
		}
	}
	check := func(f *FSM, when string) {
		t.Helper()
		q := f.IPQuotas()
		for _, c := range []struct {
			ip   string
			want float64
		}{{"10.0.0.1", 3}, {"::ffff:10.0.0.1", 3}, {"2001:db8::1", 0}, {"10.0.0.4", 50}, {"192.168.1.1", 50}} {
			if got, ok := q.ConnectionCreationRate(netip.MustParseAddr(c.ip)); !ok || got != c.want {
				t.Errorf("%s: %s's rate %v %v, want %v", when, c.ip, got, ok, c.want)
			}
		}
		if all := q.All(); len(all) != 3 || !all[0].Default || all[1].IP != "10.0.0.1" {
			t.Errorf("%s: all %+v", when, all)
		}
	}
	check(f, "applied")
	_, hash := f.Info()
	f.Close()
	g, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, h := g.Info(); string(h) != string(hash) {
		t.Fatal("the app hash changed across a restart")
	}
	check(g, "restarted")
}
