package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
)

// BenchmarkCreateTenants (issue 18, docs/benchmarks.md "Tenants"): 1,000
// and 10,000 tenants created in one block (transactions of 100
// CreateTenant commands each), applied and committed on a state machine
// that has none. It reports the time per tenant and the state one empty
// tenant adds: the bytes of every store key and value after the commit
// less before (its leaf n/<tenant> and the state trie's nodes above it),
// per tenant (ns/op is one block's apply and commit). The peer, in the
// same run: as many one-partition topics created in one block the same
// way (topics/1000), the nearest thing Kafka has to making a namespace.
//
//	go test ./internal/fsm -run '^$' -bench BenchmarkCreateTenants -benchtime 3x
func BenchmarkCreateTenants(b *testing.B) {
	tenant := func(j int) core.Command { return CreateTenant{Name: fmt.Sprintf("tenant-%05d", j)} }
	topic := func(j int) core.Command {
		return CreateTopic{Name: fmt.Sprintf("topic-%05d", j), Partitions: 1, ReplicationFactor: -1}
	}
	for _, c := range []struct {
		name string
		n    int
		make func(int) core.Command
	}{{"tenants/1000", 1000, tenant}, {"tenants/10000", 10_000, tenant}, {"topics/1000", 1000, topic}} {
		n := c.n
		b.Run(c.name, func(b *testing.B) {
			var elapsed time.Duration
			var grew int64
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				f, err := Open(Options{Dir: b.TempDir(), GenesisAppVersion: cluster.MaxAppVersion})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0}); err != nil {
					b.Fatal(err)
				}
				if _, err := f.Commit(); err != nil {
					b.Fatal(err)
				}
				before := storeBytes(b, f)
				var txs [][]byte
				for t := 0; t < n; t += 100 {
					var cmds []core.Command
					for j := t; j < min(t+100, n); j++ {
						cmds = append(cmds, c.make(j))
					}
					txs = append(txs, tx(t, cmds...))
				}
				b.StartTimer()
				start := time.Now()
				out, err := f.ApplyBlock(core.Block{Height: 2, TimeMs: t0 + 1000, Txs: txs})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Commit(); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				for _, o := range out.Txs {
					for _, r := range o.Results {
						if r.Code != 0 {
							b.Fatalf("%s: %d %s", c.name, r.Code, r.Message)
						}
					}
				}
				if got := f.TenantsView().Len() + len(f.View().Topics()); got != n {
					b.Fatalf("%d tenants and topics, want %d", got, n)
				}
				grew += storeBytes(b, f) - before
				f.Close()
			}
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*n), "ns/each")
			b.ReportMetric(float64(grew)/float64(b.N*n), "state-B/each")
		})
	}
}

// storeBytes is the bytes of every key and value in f's store.
func storeBytes(tb testing.TB, f *FSM) int64 {
	var n int64
	if err := f.Store.Scan(nil, func(k, v []byte) error { n += int64(len(k) + len(v)); return nil }); err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkTenantStoredBytesQuota (docs/benchmarks.md "Tenants"): what the
// stored_bytes quota costs a tenant's produce in a cluster of many topics.
// Every produce of a tenant with the quota sums its partitions' bytes
// first; ns/op is one block of 100 one-record produces to the tenant's
// topic, applied and committed, with 0 and 5,000 other topics in the
// state (one partition each), and the peer in the same run: the same
// block from a tenant without the quota.
//
//	go test ./internal/fsm -run '^$' -bench BenchmarkTenantStoredBytesQuota -benchtime 200x
func BenchmarkTenantStoredBytesQuota(b *testing.B) {
	for _, others := range []int{0, 5000} {
		f, err := Open(Options{Dir: b.TempDir(), GenesisAppVersion: cluster.MaxAppVersion})
		if err != nil {
			b.Fatal(err)
		}
		height, now := int64(0), t0
		apply := func(cmds ...core.Command) {
			var txs [][]byte
			for i := 0; i < len(cmds); i += 100 {
				txs = append(txs, tx(i, cmds[i:min(i+100, len(cmds))]...))
			}
			height, now = height+1, now+10
			out, err := f.ApplyBlock(core.Block{Height: height, TimeMs: now, Txs: txs})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Commit(); err != nil {
				b.Fatal(err)
			}
			for _, o := range out.Txs {
				for _, r := range o.Results {
					if r.Code != 0 {
						b.Fatalf("%d %s", r.Code, r.Message)
					}
				}
			}
		}
		var setup []core.Command
		for j := 0; j < others; j++ {
			setup = append(setup, CreateTopic{Name: fmt.Sprintf("other-%05d", j), Partitions: 1, ReplicationFactor: -1})
		}
		setup = append(setup, CreateTenant{Name: "quota", Quotas: []TenantQuota{{Key: QuotaStoredBytesKey, Value: 1 << 40}}}, CreateTenant{Name: "free"})
		apply(setup...)
		apply(CreateTopic{Name: "quota~t", Partitions: 1, ReplicationFactor: -1}, CreateTopic{Name: "free~t", Partitions: 1, ReplicationFactor: -1})
		rec := batch(b, t0, record.CodecNone, "k", 1)
		for _, tenant := range []string{"quota", "free"} {
			b.Run(fmt.Sprintf("others=%d/%s", others, tenant), func(b *testing.B) {
				var cmds []core.Command
				for j := 0; j < 100; j++ {
					cmds = append(cmds, Produce{Topic: tenant + "~t", Partition: 0, Records: rec})
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					apply(cmds...)
				}
			})
		}
		f.Close()
	}
}
