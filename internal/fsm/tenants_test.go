package fsm

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/plugin/wire"
)

// TestTenantDeletionLeavesNothing (issue 18): two tenants own the same
// local names (a topic orders with records, a group billing, an open
// transaction tx-1, a user with an ACL, a quota, a producer key, a
// schema, a share group and a plugin).
// Deleting acme removes every state key and every file of acme's, and
// nothing of globex's; restarted, the state machine has globex alone, at
// the same app hash.
func TestTenantDeletionLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion}
	f, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	n := 0
	run := func(cmds ...core.Command) []core.Result {
		t.Helper()
		now += 100
		var txs [][]byte
		for _, c := range cmds {
			n++
			txs = append(txs, tx(n, c))
		}
		h, _ := f.Info()
		o, err := f.ApplyBlock(core.Block{Height: h + 1, TimeMs: now, Txs: txs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		settle(t, f)
		var rs []core.Result
		for _, x := range o.Txs {
			rs = append(rs, x.Results...)
		}
		return rs
	}
	must := func(what string, r core.Result, code int16) core.Result {
		t.Helper()
		if r.Code != code {
			t.Fatalf("%s: code %d (%s), want %d", what, r.Code, r.Message, code)
		}
		return r
	}
	ids := map[string]core.TopicID{}
	for _, tenant := range []string{"acme", "globex"} {
		q := func(s string) string { return core.Qualify(tenant, s) }
		user := core.QualifyUser(tenant, "alice")
		must("tenant", run(CreateTenant{Name: tenant})[0], 0)
		ids[tenant] = must("topic", run(topics.CreateTopic{Name: q("orders"), Partitions: 2, ReplicationFactor: -1})[0], 0).TopicID
		for p := range int32(2) {
			must("produce", run(topics.Produce{Topic: q("orders"), Partition: p, Records: batch(t, now, record.CodecNone, tenant, 5)})[0], 0)
		}
		must("group", run(groups.OffsetCommit{Group: q("billing"), Generation: -1, Topic: q("orders"), Partition: 0, Offset: 3, LeaderEpoch: -1})[0], 0)
		p := must("init", run(producers.InitProducerID{TransactionalID: q("tx-1"), TimeoutMs: 60000})[0], 0)
		must("add partition", run(producers.AddPartitionsToTxn{TransactionalID: q("tx-1"), ProducerID: p.ProducerID, Epoch: p.ProducerEpoch, Topic: q("orders"), Partition: 1})[0], 0)
		must("user", run(AlterScramCredentials{User: user, Upserts: goldenCredentials(user, "pw")})[0], 0)
		must("acl", run(CreateACL{ACL: ACLBinding{ResourceType: ACLResourceTopic, ResourceName: q(""), PatternType: ACLPatternPrefixed,
			Principal: "User:" + user, Host: "*", Operation: ACLOpAll, Permission: ACLPermissionAllow}})[0], 0)
		must("quota", run(AlterClientQuotas{Entity: QuotaEntity{User: QuotaName{Set: true, Name: user}}, Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: 4096}}})[0], 0)
		must("key", run(newSigner(user, 3).register(nil))[0], 0)
		must("schema", run(RegisterSchema{Tenant: tenant, Subject: "orders-value", Text: avroV1})[0], 0)
		must("share group", run(ShareGroupHeartbeat{Group: q("workers"), MemberID: "m", TopicsSet: true, Topics: []string{q("orders")}})[0], 0)
		must("share acquisition", run(ShareAcquire{Group: q("workers"), MemberID: "m", MaxRecords: 2, Parts: []SharePart{{Topic: q("orders"), Partition: 0, Acquire: true}}})[0], 0)
		for _, r := range run(deployPlugin(q("stamp"), q("orders"), constPlugin(wire.Output{Records: []wire.Record{{Value: []byte(tenant)}}}))...) {
			must("plugin", r, 0)
		}
	}
	// The default tenant's topic of the same name is another topic.
	must("default topic", run(topics.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: -1})[0], 0)

	mentions := func(k []byte, tenant string) bool {
		id := ids[tenant]
		return bytes.Contains(k, []byte(tenant+"~")) || bytes.Contains(k, []byte("@"+tenant)) || bytes.Equal(k, []byte("n/"+tenant)) || bytes.Contains(k, id[:]) ||
			bytes.HasPrefix(k, []byte("h/m/"+tenant)) || bytes.HasPrefix(k, []byte("h/i/"+tenant+"\x00")) || bytes.HasPrefix(k, []byte("h/s/"+tenant+"\x00"))
	}
	countKeys := func(tenant string) (n int) {
		t.Helper()
		if err := f.Store.Scan(nil, func(k, _ []byte) error {
			if mentions(k, tenant) {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	countFiles := func(tenant string) (n int) {
		t.Helper()
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.Contains(p, tenant+"~") {
				n++
			}
			return nil
		})
		return n
	}
	if countKeys("acme") == 0 || countFiles("acme") == 0 || countKeys("globex") == 0 {
		t.Fatal("the tenants own no keys or files before the deletion: the test sees nothing")
	}
	globexKeys, globexFiles := countKeys("globex"), countFiles("globex")
	t.Logf("before: acme %d keys %d files; globex %d keys %d files", countKeys("acme"), countFiles("acme"), globexKeys, globexFiles)

	del := must("delete", run(DeleteTenant{Name: "acme"})[0], 0)
	for i := 0; i < 3; i++ { // housekeeping and settled deletions
		run(Tick{})
	}
	if got, want := del.Counts, []core.Count{{What: "transactional_ids", N: 1}, {What: "groups", N: 1}, {What: "topics", N: 1}, {What: "partitions", N: 2},
		{What: "users", N: 1}, {What: "acls", N: 1}, {What: "quotas", N: 1}, {What: "producer_keys", N: 1}, {What: "schemas", N: 1}, {What: "share_groups", N: 1}, {What: "plugins", N: 1}}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	if k, fl := countKeys("acme"), countFiles("acme"); k != 0 || fl != 0 {
		f.Store.Scan(nil, func(k, _ []byte) error {
			if mentions(k, "acme") {
				t.Logf("left: %q", k)
			}
			return nil
		})
		t.Fatalf("tenant acme deleted, but %d state keys and %d files of it are left", k, fl)
	}
	if k, fl := countKeys("globex"), countFiles("globex"); k != globexKeys || fl != globexFiles {
		t.Fatalf("globex had %d keys and %d files, has %d and %d after acme's deletion", globexKeys, globexFiles, k, fl)
	}
	check := func(f *FSM, when string) {
		t.Helper()
		v := f.View()
		if v.Topic("acme~orders") != nil || v.Topic("globex~orders") == nil || v.Topic("orders") == nil {
			t.Errorf("%s: topics wrong", when)
		}
		if hw := v.Topic("globex~orders").Partitions[1].HighWatermark(); hw != 5 {
			t.Errorf("%s: globex~orders-1 ends at %d, want 5", when, hw)
		}
		if f.Groups().Group("acme~billing") != nil || f.Groups().Group("globex~billing") == nil {
			t.Errorf("%s: groups", when)
		}
		if names := f.Users().Names(); !slices.Equal(names, []string{"alice@globex"}) {
			t.Errorf("%s: users %v", when, names)
		}
		if all := f.TenantsView().All(); len(all) != 1 || all[0].Name != "globex" {
			t.Errorf("%s: tenants %+v", when, all)
		}
		if _, err := f.ProducerKey("alice@acme"); err == nil {
			t.Errorf("%s: alice@acme's producer key outlived its tenant", when)
		}
		// The topics module's index of each tenant's topics agrees.
		tm := f.TopicsModule()
		if own := tm.TenantTopics("globex"); len(own) != 1 || own[0].Name != "globex~orders" || len(tm.TenantTopics("acme")) != 0 || len(tm.TenantTopics("")) != 0 {
			t.Errorf("%s: the tenants' topics %v, acme's %v", when, own, tm.TenantTopics("acme"))
		}
		if n, p := tm.TenantUsage("globex"); n != 1 || p != 2 {
			t.Errorf("%s: globex uses %d topics of %d partitions, want 1 of 2", when, n, p)
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
	if _, h := g.Info(); !bytes.Equal(h, hash) {
		t.Fatal("the app hash changed across a restart")
	}
	check(g, "restarted")
	// acme can be created again, empty; its old names are free.
	f = g
	must("tenant again", run(CreateTenant{Name: "acme"})[0], 0)
	must("topic again", run(topics.CreateTopic{Name: "acme~orders", Partitions: 1, ReplicationFactor: -1})[0], 0)
	if hw := f.View().Topic("acme~orders").Partitions[0].HighWatermark(); hw != 0 {
		t.Fatalf("the new acme~orders starts at %d", hw)
	}
	if n, p := f.TopicsModule().TenantUsage("acme"); n != 1 || p != 1 {
		t.Fatalf("the new acme uses %d topics of %d partitions, want 1 of 1", n, p)
	}
	must("acme's topic deleted", run(topics.DeleteTopic{Name: "acme~orders"})[0], 0)
	if n, _ := f.TopicsModule().TenantUsage("acme"); n != 0 {
		t.Fatalf("acme uses %d topics after its one was deleted", n)
	}
	must("unknown tenant", run(DeleteTenant{Name: "initech"})[0], kerr.ResourceNotFound.Code)
}

// TestTenantSignedRecords (issue 18, docs/signed-producers.md): from app
// version 5 a tenant's user signs its records over the topic's name as the
// tenant knows it (ledger, as its Kafka clients see it), and its records
// are taken on its tenant's topics only: a record alice@acme signed cannot
// be written to globex~ledger or to the default tenant's ledger, whatever
// name it was signed over. A default-tenant principal signs the full name.
// Under version 4 every signature names the full name, as before.
func TestTenantSignedRecords(t *testing.T) {
	for _, v := range []uint32{4, 5} {
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: v, ChainID: testChainID})
		if err != nil {
			t.Fatal(err)
		}
		run := oneCommandBlocks(t, f)
		must := func(what string, r core.Result, code int16, why string) {
			t.Helper()
			if r.Code != code || !strings.Contains(r.Message, why) {
				t.Fatalf("version %d: %s: code %d (%s), want %d saying %q", v, what, r.Code, r.Message, code, why)
			}
		}
		alice, ops := newSigner("alice@acme", 1), newSigner("ops", 2)
		for _, c := range []core.Command{CreateTenant{Name: "acme"}, CreateTenant{Name: "globex"}, alice.register(nil), ops.register(nil),
			topics.CreateTopic{Name: "acme~ledger", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "stele.signed.by", Value: "alice@acme,ops"}}},
			topics.CreateTopic{Name: "globex~ledger", Partitions: 1, ReplicationFactor: -1},
			topics.CreateTopic{Name: "ledger", Partitions: 1, ReplicationFactor: -1}} {
			must("setup", run(c), 0, "")
		}
		seq := uint64(0)
		produce := func(topic, signedOver string, by *signer) core.Result {
			seq++
			return run(topics.Produce{Topic: topic, Partition: 0, Records: signedBatchFor(t, testChainID, signedOver, -1, -1, signedRec{value: "v", by: by, seq: seq})})
		}
		if v < 5 {
			must("alice over the full name", produce("acme~ledger", "acme~ledger", &alice), 0, "")
			must("alice over the short name", produce("acme~ledger", "ledger", &alice), kerr.InvalidRecord.Code, "does not match")
			f.Close()
			continue
		}
		must("alice over the short name", produce("acme~ledger", "ledger", &alice), 0, "")
		must("alice over the full name", produce("acme~ledger", "acme~ledger", &alice), kerr.InvalidRecord.Code, "does not match")
		for _, moved := range []string{"globex~ledger", "ledger"} {
			for _, over := range []string{"ledger", moved} {
				must("alice's record in "+moved+" signed over "+over, produce(moved, over, &alice), kerr.InvalidRecord.Code, "signs its tenant's records only")
			}
		}
		must("ops over the full name", produce("acme~ledger", "acme~ledger", &ops), 0, "")
		must("ops over the short name", produce("acme~ledger", "ledger", &ops), kerr.InvalidRecord.Code, "does not match")
		must("ops in the default tenant", produce("ledger", "ledger", &ops), 0, "")
		f.Close()
	}
}

// TestTenantStoredBytes (issue 18, docs/tenants.md "Quotas"): a tenant's
// stored_bytes bounds the bytes of all its partitions' logs. Produces that
// fit are written; the one that would take the tenant past it is refused
// whole with POLICY_VIOLATION naming the quota, and nothing of it is
// written, while another tenant and a retry of a batch written before go
// on; raising the quota lets it in. Two state machines applying the same
// blocks give every command the same result and end at one app hash. Under
// app version 4 the key is refused.
func TestTenantStoredBytes(t *testing.T) {
	idem := func(pid int64, seq int32, n int) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{OffsetDelta: int32(i), Value: bytes.Repeat([]byte("x"), 100)}
		}
		b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: pid, ProducerEpoch: 0, BaseSequence: seq}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := batch(t, t0, record.CodecNone, "k", 10) // about 1.2 kB
	quota := int64(4*len(b) + len(b)/2)
	var machines []*FSM
	for range 2 {
		f, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		machines = append(machines, f)
	}
	run := oneCommandBlocks(t, machines...)
	must := func(what string, r core.Result, code int16, why string) core.Result {
		t.Helper()
		if r.Code != code || !strings.Contains(r.Message, why) {
			t.Fatalf("%s: code %d (%s), want %d saying %q", what, r.Code, r.Message, code, why)
		}
		return r
	}
	must("acme", run(CreateTenant{Name: "acme", Quotas: []TenantQuota{{Key: QuotaStoredBytesKey, Value: quota}}}), 0, "")
	must("globex", run(CreateTenant{Name: "globex", Quotas: []TenantQuota{{Key: QuotaStoredBytesKey, Value: quota}}}), 0, "")
	for _, name := range []string{"acme~t", "globex~t"} {
		must("topic", run(topics.CreateTopic{Name: name, Partitions: 2, ReplicationFactor: -1}), 0, "")
	}
	pid := must("producer id", run(producers.InitProducerID{}), 0, "").ProducerID
	must("idempotent batch", run(topics.Produce{Topic: "acme~t", Partition: 1, Records: idem(pid, 0, 10)}), 0, "")
	for i := range 3 {
		must("fits", run(topics.Produce{Topic: "acme~t", Partition: int32(i % 2), Records: b}), 0, "")
	}
	next := machines[0].ByName["acme~t"].Partitions[0].Next
	must("over the quota", run(topics.Produce{Topic: "acme~t", Partition: 0, Records: b}), kerr.PolicyViolation.Code, "quota of stored_bytes")
	if got := machines[0].ByName["acme~t"].Partitions[0].Next; got != next {
		t.Fatalf("a refused produce moved the log end from %d to %d", next, got)
	}
	must("a retry of a written batch", run(topics.Produce{Topic: "acme~t", Partition: 1, Records: idem(pid, 0, 10)}), 0, "")
	must("another tenant", run(topics.Produce{Topic: "globex~t", Partition: 0, Records: b}), 0, "")
	must("a larger quota", run(AlterTenantQuotas{Name: "acme", Ops: []TenantQuotaOp{{Key: QuotaStoredBytesKey, Value: 2 * quota}}}), 0, "")
	must("fits again", run(topics.Produce{Topic: "acme~t", Partition: 0, Records: b}), 0, "")
	h0, a0 := machines[0].Info()
	h1, a1 := machines[1].Info()
	if h0 != h1 || !bytes.Equal(a0, a1) {
		t.Fatalf("app hashes differ: %d %x, %d %x", h0, a0, h1, a1)
	}

	f4, err := Open(Options{Dir: t.TempDir(), HousekeepingIntervalMs: 1000, GenesisAppVersion: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer f4.Close()
	o, err := f4.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{tx(1, CreateTenant{Name: "acme", Quotas: []TenantQuota{{Key: QuotaStoredBytesKey, Value: 1}}})}})
	if err != nil {
		t.Fatal(err)
	}
	if r := o.Txs[0].Results[0]; r.Code != kerr.InvalidRequest.Code {
		t.Fatalf("stored_bytes under version 4: %+v", r)
	}
}

// oneCommandBlocks returns a function that applies and commits, on each of
// machines, a block of the one command it is given (100 ms of block time
// after the last), and returns its result, failing the test when the
// machines' results differ.
func oneCommandBlocks(t *testing.T, machines ...*FSM) func(core.Command) core.Result {
	now, n := t0, 0
	return func(c core.Command) core.Result {
		t.Helper()
		now += 100
		n++
		var rs []core.Result
		for _, f := range machines {
			h, _ := f.Info()
			o, err := f.ApplyBlock(core.Block{Height: h + 1, TimeMs: now, Txs: [][]byte{tx(n, c)}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Commit(); err != nil {
				t.Fatal(err)
			}
			settle(t, f)
			rs = append(rs, o.Txs[0].Results[0])
		}
		for _, r := range rs[1:] {
			if r.Code != rs[0].Code {
				t.Fatalf("the machines disagree: %+v and %+v", rs[0], r)
			}
		}
		return rs[0]
	}
}
