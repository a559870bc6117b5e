package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/sasl"
)

// TestTenantNamesAreNotTheDefaultTenants (issue 18, docs/tenants.md): with
// tenant acme owning a topic, a group, a transactional id, a user, an ACL
// and a quota, a client of the default tenant (franz-go, ANONYMOUS, every
// ACL check passing as allow.everyone.if.no.acl.found) sees none of them
// in Metadata, ListGroups, DescribeLogDirs, DescribeAcls,
// DescribeUserScramCredentials or DescribeClientQuotas, is refused
// acme's group and transactional id by name, and cannot reach into acme
// with a group id of its own that reads as acme's; a name that reads as a
// tenant that does not exist stays the default tenant's. A super user sees
// all of it.
func TestTenantNamesAreNotTheDefaultTenants(t *testing.T) {
	tb := startTestBroker(t, nil)
	ctx := context.Background()
	submit := tb.submitter(t)
	cred, err := sasl.NewCredential(sasl.SHA256, []byte("pw"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	submit("tenant", fsm.CreateTenant{Name: "acme"})
	submit("topic", fsm.CreateTopic{Name: "acme~orders", Partitions: 1, ReplicationFactor: -1})
	submit("group", fsm.OffsetCommit{Group: "acme~billing", Generation: -1, Topic: "acme~orders", Offset: 1, LeaderEpoch: -1})
	submit("user", fsm.AlterScramCredentials{User: "alice@acme", Upserts: []sasl.Credential{cred}})
	submit("acl", fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: fsm.ACLResourceTopic, ResourceName: "acme~orders", PatternType: fsm.ACLPatternLiteral,
		Principal: "User:alice@acme", Host: "*", Operation: fsm.ACLOpRead, Permission: fsm.ACLPermissionAllow}})
	submit("quota", fsm.AlterClientQuotas{Entity: fsm.QuotaEntity{User: fsm.QuotaName{Set: true, Name: "alice@acme"}}, Ops: []fsm.QuotaOp{{Key: fsm.QuotaProducerByteRate, Value: 1024}}})
	submit("default topic", fsm.CreateTopic{Name: "orders", Partitions: 1, ReplicationFactor: -1})
	submit("default user", fsm.AlterScramCredentials{User: "bob", Upserts: []sasl.Credential{cred}})
	submit("default acl", fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: fsm.ACLResourceTopic, ResourceName: "bobs", PatternType: fsm.ACLPatternLiteral,
		Principal: "User:bob", Host: "*", Operation: fsm.ACLOpRead, Permission: fsm.ACLPermissionAllow}})

	sees := func(addr string) (topics, groups, dirs, acls, users, quotas []string) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		md, err := adm.Metadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		topics = md.Topics.Names()
		lg, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups = lg.Groups()
		ld, err := adm.DescribeAllLogDirs(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ld.Each(func(d kadm.DescribedLogDir) {
			d.Topics.Each(func(p kadm.DescribedLogDirPartition) { dirs = append(dirs, p.Topic) })
		})
		dreq := kmsg.NewPtrDescribeACLsRequest()
		dreq.ResourceType, dreq.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		dreq.Operation, dreq.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		dresp, err := dreq.RequestWith(ctx, cl)
		if err != nil || dresp.ErrorCode != 0 {
			t.Fatalf("DescribeAcls: %v %+v", err, dresp)
		}
		for _, r := range dresp.Resources {
			for _, a := range r.ACLs {
				acls = append(acls, r.ResourceName+" "+a.Principal)
			}
		}
		us, err := adm.DescribeUserSCRAMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for u := range us {
			users = append(users, u)
		}
		qs, err := adm.DescribeClientQuotas(ctx, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			for _, e := range q.Entity {
				if e.Name != nil {
					quotas = append(quotas, *e.Name)
				}
			}
		}
		return
	}
	topics, groups, dirs, acls, users, quotas := sees(tb.addr)
	for what, names := range map[string][]string{"Metadata": topics, "ListGroups": groups, "DescribeLogDirs": dirs, "DescribeAcls": acls, "DescribeUserScramCredentials": users, "DescribeClientQuotas": quotas} {
		for _, n := range names {
			if n == "acme~orders" || n == "acme~billing" || n == "alice@acme" || n == "acme~orders User:alice@acme" {
				t.Errorf("%s shows acme's %q to the default tenant", what, n)
			}
		}
	}
	if !slices.Contains(topics, "orders") || !slices.Contains(dirs, "orders") || !slices.Contains(acls, "bobs User:bob") || !slices.Contains(users, "bob") {
		t.Errorf("the default tenant lost its own: topics %v, log dirs %v, acls %v, users %v", topics, dirs, acls, users)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// acme's group by name: refused, as a group the principal may not see.
	if of, err := adm.FetchOffsets(ctx, "acme~billing"); !errors.Is(err, kerr.GroupAuthorizationFailed) && !errors.Is(of.Error(), kerr.GroupAuthorizationFailed) {
		t.Errorf("OffsetFetch of acme~billing: %v %v", err, of.Error())
	}
	// A commit under a group id that reads as acme's is refused, and
	// nothing reaches acme; one that reads as no tenant is the default's.
	commit := func(group string) error {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 0, LeaderEpoch: -1})
		r, err := adm.CommitOffsets(ctx, group, os)
		if err != nil {
			return err
		}
		return r.Error()
	}
	if err := commit("acme~mine"); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Errorf("commit as acme~mine: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	if tb.b.Groups().Group("acme~mine") != nil {
		t.Error("a default-tenant client created a group in acme")
	}
	if err := commit("ghost~mine"); err != nil {
		t.Errorf("commit as ghost~mine (no such tenant): %v", err)
	}
	// acme's transactional id.
	txn, err := kgo.NewClient(kgo.SeedBrokers(tb.addr), kgo.TransactionalID("acme~tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	err = txn.BeginTransaction() // franz-go asks for its producer id here
	if err == nil {
		err = txn.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}).FirstErr()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Errorf("a transaction with transactional id acme~tx: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}

	// A super user administers the whole cluster, tenants included.
	super := startTestBrokerOn(t, tb, func(o *Options) { o.SuperUsers = []string{"User:ANONYMOUS"} })
	topics, groups, _, acls, users, _ = sees(super)
	if !slices.Contains(topics, "acme~orders") || !slices.Contains(groups, "acme~billing") || !slices.Contains(users, "alice@acme") || !slices.Contains(acls, "acme~orders User:alice@acme") {
		t.Errorf("a super user sees topics %v, groups %v, users %v, acls %v", topics, groups, users, acls)
	}
}

// startTestBrokerOn serves tb's broker on a second listener whose options
// tweak changes, and returns its address.
func startTestBrokerOn(t *testing.T, tb *testBroker, tweak func(*Options)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{NodeID: 0, ClusterID: "stele-test", AutoCreateTopics: true, DefaultPartitions: 1, DataDir: "/tmp",
		AdvertisedHost: "127.0.0.1", AdvertisedPort: int32(ln.Addr().(*net.TCPAddr).Port)}
	tweak(&opts)
	srv := New(tb.b, opts)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestTenantsOwnClients (issue 18, docs/tenants.md): two tenants' users,
// alice@acme and bob@globex, logged in with SASL SCRAM through franz-go,
// each create a topic orders, produce to it, consume it in a group billing
// and commit, and run a transaction under transactional id tx-1, at the
// same time: each sees its own names unprefixed and reads exactly its own
// records, offsets and transactions; the listings show nothing of the
// other tenant; an error message names the topic as its client knows it;
// the cluster-wide APIs answer CLUSTER_AUTHORIZATION_FAILED; in the state
// the names are acme~orders and globex~orders.
func TestTenantsOwnClients(t *testing.T) {
	tb, addr := startSASLBrokerOrdered(t, local.Options{StartTime: time.Now(), Step: 20 * time.Millisecond, Interval: 20 * time.Millisecond}, nil)
	submit := tb.submitter(t)
	type tenantUser struct{ tenant, user, pass string }
	users := []tenantUser{{"acme", "alice@acme", "alice-pw"}, {"globex", "bob@globex", "bob-pw"}}
	for _, u := range users {
		submit("tenant", fsm.CreateTenant{Name: u.tenant})
		cred, err := sasl.NewCredential(sasl.SHA256, []byte(u.pass), 4096)
		if err != nil {
			t.Fatal(err)
		}
		submit("user", fsm.AlterScramCredentials{User: u.user, Upserts: []sasl.Credential{cred}})
		for _, rt := range []int8{fsm.ACLResourceTopic, fsm.ACLResourceGroup, fsm.ACLResourceTransactionalID} {
			submit("acl", fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: rt, ResourceName: u.tenant + "~", PatternType: fsm.ACLPatternPrefixed,
				Principal: "User:" + u.user, Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}})
		}
	}
	type seen struct {
		records, topics, groups, txns []string
		committed                     int64
	}
	run := func(u tenantUser) seen {
		t.Helper()
		var s seen
		cl := scramClient(t, addr, u.user, u.pass, false)
		adm := kadm.NewClient(cl)
		if r, err := adm.CreateTopics(ctx(t), 1, -1, nil, "orders"); err != nil || r.Error() != nil {
			t.Errorf("%s: create orders: %v %v", u.user, err, r.Error())
			return s
		}
		// Creating it again: the message names orders as the client knows it.
		r, _ := adm.CreateTopics(ctx(t), 1, -1, nil, "orders")
		if tr := r["orders"]; !errors.Is(tr.Err, kerr.TopicAlreadyExists) || strings.Contains(tr.ErrMessage, "~") || !strings.Contains(tr.ErrMessage, "orders") {
			t.Errorf("%s: create orders again: %v %q", u.user, tr.Err, tr.ErrMessage)
		}
		for i := range 3 {
			if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "orders", Value: []byte(fmt.Sprintf("%s-%d", u.tenant, i))}).FirstErr(); err != nil {
				t.Errorf("%s: produce: %v", u.user, err)
				return s
			}
		}
		txn := scramClient(t, addr, u.user, u.pass, false, kgo.TransactionalID("tx-1"))
		if err := txn.BeginTransaction(); err != nil {
			t.Errorf("%s: begin: %v", u.user, err)
			return s
		}
		if err := txn.ProduceSync(ctx(t), &kgo.Record{Topic: "orders", Value: []byte(u.tenant + "-txn")}).FirstErr(); err != nil {
			t.Errorf("%s: transactional produce: %v", u.user, err)
		}
		if err := txn.EndTransaction(ctx(t), kgo.TryCommit); err != nil {
			t.Errorf("%s: commit: %v", u.user, err)
		}
		cons := scramClient(t, addr, u.user, u.pass, false, kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("billing"),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
		for len(s.records) < 4 {
			fs := cons.PollFetches(ctx(t))
			if err := fs.Err0(); err != nil {
				t.Errorf("%s: fetch: %v", u.user, err)
				return s
			}
			fs.EachRecord(func(r *kgo.Record) { s.records = append(s.records, string(r.Value)) })
		}
		if err := cons.CommitUncommittedOffsets(ctx(t)); err != nil {
			t.Errorf("%s: commit offsets: %v", u.user, err)
		}
		md, err := adm.Metadata(ctx(t))
		if err != nil {
			t.Errorf("%s: metadata: %v", u.user, err)
		}
		s.topics = md.Topics.Names()
		if lg, err := adm.ListGroups(ctx(t)); err == nil {
			s.groups = lg.Groups()
		} else {
			t.Errorf("%s: list groups: %v", u.user, err)
		}
		if lt, err := adm.ListTransactions(ctx(t), nil, nil); err == nil {
			s.txns = lt.TransactionalIDs()
		} else {
			t.Errorf("%s: list transactions: %v", u.user, err)
		}
		of, err := adm.FetchOffsets(ctx(t), "billing")
		if err != nil {
			t.Errorf("%s: fetch offsets: %v", u.user, err)
		} else if o, ok := of.Lookup("orders", 0); ok {
			s.committed = o.At
		}
		if _, err := adm.DescribeAllLogDirs(ctx(t), nil); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("%s: DescribeLogDirs: %v, want CLUSTER_AUTHORIZATION_FAILED", u.user, err)
		}
		if rc, err := adm.DescribeTopicConfigs(ctx(t), "orders"); err != nil || len(rc) != 1 || rc[0].Name != "orders" || rc[0].Err != nil {
			t.Errorf("%s: describe orders' configs: %v %+v", u.user, err, rc)
		}
		if rs, err := adm.AlterTopicConfigs(ctx(t), []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("86400000")}}, "orders"); err != nil || len(rs) != 1 || rs[0].Name != "orders" || rs[0].Err != nil {
			t.Errorf("%s: alter orders' configs: %v %+v", u.user, err, rs)
		}
		if _, err := adm.DescribeUserSCRAMs(ctx(t)); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("%s: DescribeUserScramCredentials: %v, want CLUSTER_AUTHORIZATION_FAILED", u.user, err)
		}
		if _, err := adm.DescribeBrokerConfigs(ctx(t)); err == nil {
			t.Errorf("%s: described the broker's configs", u.user)
		}
		return s
	}
	var wg sync.WaitGroup
	got := make([]seen, len(users))
	for i, u := range users {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = run(u) }()
	}
	wg.Wait()
	for i, u := range users {
		s := got[i]
		slices.Sort(s.records)
		want := []string{u.tenant + "-0", u.tenant + "-1", u.tenant + "-2", u.tenant + "-txn"}
		if !slices.Equal(s.records, want) {
			t.Errorf("%s read %v, want %v", u.user, s.records, want)
		}
		if !slices.Equal(s.topics, []string{"orders"}) || !slices.Equal(s.groups, []string{"billing"}) || !slices.Equal(s.txns, []string{"tx-1"}) {
			t.Errorf("%s sees topics %v, groups %v, transactions %v", u.user, s.topics, s.groups, s.txns)
		}
		if s.committed != 4 { // after the three records and the transaction's
			t.Errorf("%s committed %d in billing, want 4", u.user, s.committed)
		}
	}
	// Per-tenant metrics: each tenant's own traffic and holdings; a share
	// group is one of globex's groups (app version 16).
	if r, err := tb.b.SubmitOne(context.Background(), fsm.SetShareGroupConfigs{Group: "globex~queue", Configs: []fsm.ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}); err != nil || r.Code != 0 {
		t.Fatalf("a share group: %v %+v", err, r)
	}
	mfs, err := tb.srv.opts.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	got2 := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "tenant" {
					v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
					got2[mf.GetName()+"/"+lp.GetValue()] = v
				}
			}
		}
	}
	for _, tn := range []string{"acme", "globex"} {
		for _, name := range []string{"stele_tenant_requests_total", "stele_tenant_produce_bytes_total", "stele_tenant_fetch_bytes_total", "stele_tenant_stored_bytes"} {
			if got2[name+"/"+tn] <= 0 {
				t.Errorf("%s{tenant=%q} = %v, want more than 0", name, tn, got2[name+"/"+tn])
			}
		}
		for _, name := range []string{"stele_tenant_topics", "stele_tenant_partitions", "stele_tenant_groups"} {
			want := 1.0
			if name == "stele_tenant_groups" && tn == "globex" {
				want = 2 // billing and the share group
			}
			if got2[name+"/"+tn] != want {
				t.Errorf("%s{tenant=%q} = %v, want %v", name, tn, got2[name+"/"+tn], want)
			}
		}
	}
	v := tb.b.View()
	if v.Topic("acme~orders") == nil || v.Topic("globex~orders") == nil || v.Topic("orders") != nil {
		t.Error("the state does not hold the tenants' topics under their full names")
	}
	if tb.b.Groups().Group("acme~billing") == nil || tb.b.Groups().Group("globex~billing") == nil {
		t.Error("the state does not hold the tenants' groups under their full names")
	}
	// A deleted tenant's series go with it.
	submit("delete acme", fsm.DeleteTenant{Name: "acme"})
	mfs, err = tb.srv.opts.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "tenant" && lp.GetValue() == "acme" {
					t.Errorf("%s{tenant=\"acme\"} outlived the tenant", mf.GetName())
				}
			}
		}
	}
}

// FuzzTenantLens: whatever request a tenant's client sends (any served
// API, any version, any body that decodes), renaming it and a response of
// its kind neither panics nor leaves a name of the request unqualified.
func FuzzTenantLens(f *testing.F) {
	for _, key := range []int16{0, 1, 3, 8, 9, 10, 11, 15, 16, 19, 22, 24, 32, 68} {
		f.Add(key, int16(0), []byte{})
		f.Add(key, int16(4), []byte{0, 0, 0, 1, 0, 6, 'o', 'r', 'd', 'e', 'r', 's'})
	}
	l := newTenantLens("acme")
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		req := kmsg.RequestForKey(key)
		if req == nil || version < 0 || version > req.MaxVersion() {
			return
		}
		req.SetVersion(version)
		if err := req.ReadFrom(body); err != nil {
			return
		}
		l.in(req)
		if r, ok := req.(*kmsg.ProduceRequest); ok {
			for _, tp := range r.Topics {
				if !strings.HasPrefix(tp.Topic, "acme~") {
					t.Fatalf("produce topic %q left unqualified", tp.Topic)
				}
			}
		}
		resp := req.ResponseKind()
		resp.SetVersion(version)
		l.out(resp)
	})
}

// TestTenantLensRegex: a tenant's KIP-848 subscription regular expression
// matches, as the groups module matches it (the whole name), the tenant's
// topics by their full names and no other tenant's or the default tenant's;
// ConsumerGroupDescribe shows it as the client wrote it.
func TestTenantLensRegex(t *testing.T) {
	l := newTenantLens("acme")
	re := "orders.*"
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.SubscribedTopicRegex, req.SubscribedTopicNames = "billing", &re, []string{"orders"}
	l.in(req)
	if req.Group != "acme~billing" || !slices.Equal(req.SubscribedTopicNames, []string{"acme~orders"}) {
		t.Fatalf("qualified %q %v", req.Group, req.SubscribedTopicNames)
	}
	m := regexp.MustCompile("^(?:" + *req.SubscribedTopicRegex + ")$") // as fsm/groups/group848.go
	for name, want := range map[string]bool{"acme~orders": true, "acme~orders-eu": true, "globex~orders": false, "orders": false, "xacme~orders": false} {
		if m.MatchString(name) != want {
			t.Errorf("%q matches %q: %v, want %v", *req.SubscribedTopicRegex, name, !want, want)
		}
	}
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	g := kmsg.NewConsumerGroupDescribeResponseGroup()
	g.Group = "acme~billing"
	mem := kmsg.NewConsumerGroupDescribeResponseGroupMember()
	mem.SubscribedTopicRegex, mem.SubscribedTopics = req.SubscribedTopicRegex, []string{"acme~orders"}
	g.Members = append(g.Members, mem)
	resp.Groups = append(resp.Groups, g)
	l.out(resp)
	if got := resp.Groups[0]; got.Group != "billing" || *got.Members[0].SubscribedTopicRegex != re || !slices.Equal(got.Members[0].SubscribedTopics, []string{"orders"}) {
		t.Errorf("described as %q %q %v", got.Group, *got.Members[0].SubscribedTopicRegex, got.Members[0].SubscribedTopics)
	}
}

// TestTenantAdministrator (issue 18, docs/tenants.md "Tenant
// administrators"): root@acme, allowed ALL on acme's own cluster resource
// and its names (what stele user create --tenant-admin grants), manages
// acme with the ordinary Kafka admin APIs through franz-go, in acme's
// names: it creates a topic, a user carol (carol@acme in the state) and
// ACLs for her (a literal * becomes every name of acme's), lists exactly
// acme's ACLs and users as acme's clients name them, and deletes only
// acme's ACLs with a filter that matches everything; carol then produces.
// Neither carol nor globex's user may use those APIs, and root may not the
// cluster's quotas.
func TestTenantAdministrator(t *testing.T) {
	tb, addr := startSASLBroker(t, nil)
	submit := tb.submitter(t)
	allow := func(rt int8, name string, pt int8, principal string) fsm.ACLBinding {
		return fsm.ACLBinding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}
	}
	for _, u := range []string{"root@acme", "bob@globex"} {
		tenant, _ := fsm.SplitUser(u)
		submit("tenant", fsm.CreateTenant{Name: tenant})
		cred, err := sasl.NewCredential(sasl.SHA256, []byte("pw"), 4096)
		if err != nil {
			t.Fatal(err)
		}
		submit("user", fsm.AlterScramCredentials{User: u, Upserts: []sasl.Credential{cred}})
	}
	submit("root's cluster", fsm.CreateACL{ACL: allow(fsm.ACLResourceCluster, fsm.TenantCluster("acme"), fsm.ACLPatternLiteral, "User:root@acme")})
	for _, rt := range []int8{fsm.ACLResourceTopic, fsm.ACLResourceGroup, fsm.ACLResourceTransactionalID} {
		submit("root's names", fsm.CreateACL{ACL: allow(rt, "acme~", fsm.ACLPatternPrefixed, "User:root@acme")})
	}
	submit("bob's topic", fsm.CreateACL{ACL: allow(fsm.ACLResourceTopic, "globex~", fsm.ACLPatternPrefixed, "User:bob@globex")})
	submit("a default tenant's acl", fsm.CreateACL{ACL: allow(fsm.ACLResourceTopic, "shared", fsm.ACLPatternLiteral, "User:*")})

	root := scramClient(t, addr, "root@acme", "pw", false)
	adm := kadm.NewClient(root)
	if r, err := adm.CreateTopics(ctx(t), 1, -1, nil, "orders"); err != nil || r.Error() != nil {
		t.Fatalf("root creates orders: %v %v", err, r.Error())
	}
	if r, err := adm.AlterUserSCRAMs(ctx(t), nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "carol-pw"}}); err != nil || r.Error() != nil {
		t.Fatalf("root creates carol: %v %v", err, r.Error())
	}
	if !slices.Contains(tb.b.Users().Names(), "carol@acme") {
		t.Fatalf("users in the state: %v, want carol@acme", tb.b.Users().Names())
	}
	create := kmsg.NewPtrCreateACLsRequest()
	for _, c := range []struct {
		rt   kmsg.ACLResourceType
		name string
		op   kmsg.ACLOperation
	}{{kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLOperationWrite}, {kmsg.ACLResourceTypeTopic, "*", kmsg.ACLOperationDescribe}} {
		cr := kmsg.NewCreateACLsRequestCreation()
		cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = c.rt, c.name, kmsg.ACLResourcePatternTypeLiteral
		cr.Principal, cr.Host, cr.Operation, cr.PermissionType = "User:carol", "*", c.op, kmsg.ACLPermissionTypeAllow
		create.Creations = append(create.Creations, cr)
	}
	if resp, err := create.RequestWith(ctx(t), root); err != nil || resp.Results[0].ErrorCode != 0 || resp.Results[1].ErrorCode != 0 {
		t.Fatalf("root creates carol's ACLs: %v %+v", err, resp)
	}
	if !tb.b.ACLs().Authorize(fsm.AuthorizeRequest{Principal: "User:carol@acme", Host: "127.0.0.1", Operation: fsm.ACLOpDescribe, ResourceType: fsm.ACLResourceTopic, ResourceName: "acme~anything"}) {
		t.Error("carol's literal * on topics does not reach acme's topics")
	}
	describe := func(cl *kgo.Client) (int16, []string) {
		t.Helper()
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range resp.Resources {
			for _, a := range r.ACLs {
				out = append(out, fmt.Sprintf("%s:%s:%s:%s:%s", r.ResourceType, r.ResourcePatternType, r.ResourceName, a.Principal, a.Operation))
			}
		}
		slices.Sort(out)
		return resp.ErrorCode, out
	}
	want := []string{
		"CLUSTER:LITERAL:kafka-cluster:User:root:ALL",
		"GROUP:LITERAL:*:User:root:ALL",
		"TOPIC:LITERAL:*:User:carol:DESCRIBE",
		"TOPIC:LITERAL:*:User:root:ALL",
		"TOPIC:LITERAL:orders:User:carol:WRITE",
		"TRANSACTIONAL_ID:LITERAL:*:User:root:ALL",
	}
	if code, got := describe(root); code != 0 || !slices.Equal(got, want) {
		t.Errorf("root's DescribeAcls: code %d\n%s\nwant\n%s", code, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	users, err := adm.DescribeUserSCRAMs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for u := range users {
		names = append(names, u)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"carol", "root"}) {
		t.Errorf("root's DescribeUserScramCredentials: %v, want carol and root", names)
	}

	carol := scramClient(t, addr, "carol@acme", "carol-pw", false)
	if err := carol.ProduceSync(ctx(t), &kgo.Record{Topic: "orders", Value: []byte("by carol")}).FirstErr(); err != nil {
		t.Errorf("carol produces to orders: %v", err)
	}
	bob := scramClient(t, addr, "bob@globex", "pw", false)
	for who, cl := range map[string]*kgo.Client{"carol": carol, "bob": bob} {
		if code, _ := describe(cl); code != kerr.ClusterAuthorizationFailed.Code {
			t.Errorf("%s's DescribeAcls: code %d, want CLUSTER_AUTHORIZATION_FAILED", who, code)
		}
		if r, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx(t), nil, []kadm.UpsertSCRAM{{User: "eve", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "x"}}); err == nil && r.Error() == nil {
			t.Errorf("%s created a user", who)
		}
	}
	// Client quotas: root sets and sees acme's users' only, by their
	// short names; the default user, client ids and addresses are the
	// cluster's, and globex's users are not acme's to see.
	rate := func(v float64) []fsm.QuotaOp { return []fsm.QuotaOp{{Key: fsm.QuotaProducerByteRate, Value: v}} }
	submit("bob's quota", fsm.AlterClientQuotas{Entity: fsm.QuotaEntity{User: fsm.QuotaName{Set: true, Name: "bob@globex"}}, Ops: rate(1000)})
	submit("the default user's quota", fsm.AlterClientQuotas{Entity: fsm.QuotaEntity{User: fsm.QuotaName{Set: true, Default: true}}, Ops: rate(2000)})
	submit("a client id's quota", fsm.AlterClientQuotas{Entity: fsm.QuotaEntity{ClientID: fsm.QuotaName{Set: true, Name: "x"}}, Ops: rate(3000)})
	submit("an address's quota", fsm.AlterIPQuotas{Default: true, Ops: []fsm.QuotaOp{{Key: fsm.QuotaConnectionCreationRate, Value: 50}}})
	entity := func(kv ...string) kadm.ClientQuotaEntity {
		var e kadm.ClientQuotaEntity
		for i := 0; i < len(kv); i += 2 {
			c := kadm.ClientQuotaEntityComponent{Type: kv[i]}
			if kv[i+1] != "<default>" {
				c.Name = kmsg.StringPtr(kv[i+1])
			}
			e = append(e, c)
		}
		return e
	}
	alter := func(cl *kgo.Client, e kadm.ClientQuotaEntity) error {
		t.Helper()
		r, err := kadm.NewClient(cl).AlterClientQuotas(ctx(t), []kadm.AlterClientQuotaEntry{{Entity: e, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 4096}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r[0].Err
	}
	for _, e := range []kadm.ClientQuotaEntity{entity("user", "carol"), entity("user", "carol", "client-id", "app")} {
		if err := alter(root, e); err != nil {
			t.Errorf("root sets %v: %v", e, err)
		}
	}
	if got := tb.b.Quotas().Of(fsm.QuotaEntity{User: fsm.QuotaName{Set: true, Name: "carol@acme"}}); got[fsm.QuotaProducerByteRate] != 4096 {
		t.Errorf("carol@acme's quotas in the state: %v", got)
	}
	for _, e := range []kadm.ClientQuotaEntity{entity("user", "<default>"), entity("client-id", "x"), entity("ip", "<default>"), entity("user", "<default>", "client-id", "app")} {
		if err := alter(root, e); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("root sets %v: %v, want CLUSTER_AUTHORIZATION_FAILED", e, err)
		}
	}
	described, err := adm.DescribeClientQuotas(ctx(t), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seenQuotas []string
	for _, d := range described {
		seenQuotas = append(seenQuotas, fmt.Sprint(d.Entity, d.Values))
	}
	slices.Sort(seenQuotas)
	if want := []string{"{user=carol, client-id=app} [producer_byte_rate=4096.000000]", "{user=carol} [producer_byte_rate=4096.000000]"}; !slices.Equal(seenQuotas, want) {
		t.Errorf("root's DescribeClientQuotas:\n%s\nwant\n%s", strings.Join(seenQuotas, "\n"), strings.Join(want, "\n"))
	}
	if exact, err := adm.DescribeClientQuotas(ctx(t), true, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: kmsg.StringPtr("carol"), MatchType: 0}}); err != nil || len(exact) != 1 {
		t.Errorf("root's DescribeClientQuotas of user carol: %v %v", exact, err)
	}
	if _, err := kadm.NewClient(carol).DescribeClientQuotas(ctx(t), false, nil); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("carol's DescribeClientQuotas: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if err := alter(carol, entity("user", "carol")); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("carol sets her own quota: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if r, err := adm.DeleteTopics(ctx(t), "orders"); err != nil || r.Error() != nil {
		t.Errorf("root deletes orders: %v %v", err, r.Error())
	}

	// A filter matching everything deletes acme's ACLs only.
	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	del.Filters = append(del.Filters, f)
	resp, err := del.RequestWith(ctx(t), root)
	if err != nil || resp.Results[0].ErrorCode != 0 || len(resp.Results[0].MatchingACLs) != len(want) {
		t.Fatalf("root's DeleteAcls: %v %+v", err, resp)
	}
	for _, m := range resp.Results[0].MatchingACLs {
		if strings.Contains(m.ResourceName, "~") || strings.Contains(m.Principal, "@") {
			t.Errorf("DeleteAcls answered %s %s as the state names it", m.ResourceName, m.Principal)
		}
	}
	left := 0
	for _, b := range tb.b.ACLs().Match(fsm.ACLFilter{ResourceType: fsm.ACLResourceAny, PatternType: fsm.ACLPatternAny, Operation: fsm.ACLOpAny, Permission: fsm.ACLPermissionAny}) {
		left++
		if t0, _ := fsm.SplitTenant(b.ResourceName); t0 == "acme" || strings.HasSuffix(b.Principal, "@acme") {
			t.Errorf("acme's binding %+v left", b)
		}
	}
	if left != 2 {
		t.Errorf("%d bindings left, want globex's and the default tenant's", left)
	}
}

// TestTenantOffsetDeleteSubscribed: a tenant's classic consumer group
// subscribes to orders by its short name; OffsetDelete of orders while the
// group consumes it is refused with GROUP_SUBSCRIBED_TO_TOPIC, as for the
// default tenant, and allowed once the group is empty.
func TestTenantOffsetDeleteSubscribed(t *testing.T) {
	// A clocked chain: a group's join completes as block time passes.
	tb, addr := startSASLBrokerOrdered(t, local.Options{StartTime: time.Now(), Step: 20 * time.Millisecond, Interval: 20 * time.Millisecond}, nil)
	submit := tb.submitter(t)
	submit("tenant", fsm.CreateTenant{Name: "acme"})
	cred, err := sasl.NewCredential(sasl.SHA256, []byte("pw"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	submit("user", fsm.AlterScramCredentials{User: "alice@acme", Upserts: []sasl.Credential{cred}})
	for _, rt := range []int8{fsm.ACLResourceTopic, fsm.ACLResourceGroup} {
		submit("acl", fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: rt, ResourceName: "acme~", PatternType: fsm.ACLPatternPrefixed,
			Principal: "User:alice@acme", Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}})
	}
	submit("topic", fsm.CreateTopic{Name: "acme~orders", Partitions: 1, ReplicationFactor: -1})
	if err := scramClient(t, addr, "alice@acme", "pw", false).ProduceSync(ctx(t), &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	consumer := scramClient(t, addr, "alice@acme", "pw", false, kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"))
	for got := 0; got == 0; {
		fs := consumer.PollFetches(ctx(t))
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		got = fs.NumRecords()
	}
	if err := consumer.CommitUncommittedOffsets(ctx(t)); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(scramClient(t, addr, "alice@acme", "pw", false))
	del := func() error {
		r, err := adm.DeleteOffsets(ctx(t), "billing", kadm.TopicsSet{"orders": {0: {}}})
		if err != nil {
			return err
		}
		return r.Error()
	}
	if err := del(); !errors.Is(err, kerr.GroupSubscribedToTopic) {
		t.Fatalf("OffsetDelete of orders while billing consumes it: %v, want GROUP_SUBSCRIBED_TO_TOPIC", err)
	}
	consumer.Close()
	if err := del(); err != nil {
		t.Fatalf("OffsetDelete once billing is empty: %v", err)
	}
}

// TestTenantTransactionGroupsQuota: a tenant at its quota of groups (1)
// cannot have a new group made by a transaction's offsets: TxnOffsetCommit
// of a group that does not exist is refused with POLICY_VIOLATION, while
// its existing group takes the transaction's offsets (app version 6).
func TestTenantTransactionGroupsQuota(t *testing.T) {
	tb, addr := startSASLBrokerOrdered(t, local.Options{StartTime: time.Now(), Step: 20 * time.Millisecond, Interval: 20 * time.Millisecond}, nil)
	submit := tb.submitter(t)
	submit("tenant", fsm.CreateTenant{Name: "acme", Quotas: []fsm.TenantQuota{{Key: fsm.QuotaGroups, Value: 1}}})
	cred, err := sasl.NewCredential(sasl.SHA256, []byte("pw"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	submit("user", fsm.AlterScramCredentials{User: "alice@acme", Upserts: []sasl.Credential{cred}})
	for _, rt := range []int8{fsm.ACLResourceTopic, fsm.ACLResourceGroup, fsm.ACLResourceTransactionalID} {
		submit("acl", fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: rt, ResourceName: "acme~", PatternType: fsm.ACLPatternPrefixed,
			Principal: "User:alice@acme", Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}})
	}
	submit("topic", fsm.CreateTopic{Name: "acme~orders", Partitions: 1, ReplicationFactor: -1})
	cl := scramClient(t, addr, "alice@acme", "pw", false)
	adm := kadm.NewClient(cl)
	if r, err := adm.CommitOffsets(ctx(t), "first", kadm.OffsetsFromRecords(kgo.Record{Topic: "orders", Partition: 0, Offset: 0})); err != nil || r.Error() != nil {
		t.Fatalf("acme's first group: %v %v", err, r.Error())
	}

	init := kmsg.NewPtrInitProducerIDRequest()
	tx := "tx"
	init.TransactionalID, init.TransactionTimeoutMillis = &tx, 60000
	ir, err := init.RequestWith(ctx(t), cl)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v %v", err, kerr.ErrorForCode(ir.ErrorCode))
	}
	offsetFor := func(group string) int16 {
		t.Helper()
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = tx, ir.ProducerID, ir.ProducerEpoch, group
		ar, err := add.RequestWith(ctx(t), cl)
		if err != nil || ar.ErrorCode != 0 {
			t.Fatalf("AddOffsetsToTxn %s: %v %v", group, err, kerr.ErrorForCode(ar.ErrorCode))
		}
		commit := kmsg.NewPtrTxnOffsetCommitRequest()
		commit.TransactionalID, commit.ProducerID, commit.ProducerEpoch, commit.Group, commit.Generation = tx, ir.ProducerID, ir.ProducerEpoch, group, -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "orders"
		p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch = 0, 1, -1
		rt.Partitions = append(rt.Partitions, p)
		commit.Topics = append(commit.Topics, rt)
		cr, err := commit.RequestWith(ctx(t), cl)
		if err != nil || len(cr.Topics) != 1 || len(cr.Topics[0].Partitions) != 1 {
			t.Fatalf("TxnOffsetCommit %s: %v %+v", group, err, cr)
		}
		return cr.Topics[0].Partitions[0].ErrorCode
	}
	if code := offsetFor("second"); code != kerr.PolicyViolation.Code {
		t.Fatalf("a transaction's offset of a new group past the quota: %v, want POLICY_VIOLATION", kerr.ErrorForCode(code))
	}
	if code := offsetFor("first"); code != 0 {
		t.Fatalf("a transaction's offset of the tenant's group: %v", kerr.ErrorForCode(code))
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = tx, ir.ProducerID, ir.ProducerEpoch, true
	if er, err := end.RequestWith(ctx(t), cl); err != nil || er.ErrorCode != 0 {
		t.Fatalf("EndTxn: %v %v", err, kerr.ErrorForCode(er.ErrorCode))
	}
	groups, err := adm.ListGroups(ctx(t))
	if err != nil || len(groups) != 1 {
		t.Fatalf("acme's groups after the commit: %v %v", groups.Groups(), err)
	}
}
