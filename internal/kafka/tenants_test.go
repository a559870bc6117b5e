package kafka

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	submit := func(what string, c fsm.Command) {
		t.Helper()
		r, err := tb.b.SubmitOne(ctx, c)
		if err != nil || r.Code != 0 {
			t.Fatalf("%s: %v %+v", what, err, r)
		}
	}
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
