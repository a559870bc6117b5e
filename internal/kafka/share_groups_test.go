package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	stelesasl "github.com/stele-io/stele/internal/sasl"
)

// setGroupConfigs sets share group configs with IncrementalAlterConfigs
// on a GROUP resource, as kgo's own tests do, and reads them back.
func setGroupConfigs(t testing.TB, cl *kgo.Client, group string, kv ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kv); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = kv[i], kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(kv[i+1])
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("group configs of %s: %v %+v", group, err, resp)
	}
	dreq := kmsg.NewPtrDescribeConfigsRequest()
	dres := kmsg.NewDescribeConfigsRequestResource()
	dres.ResourceType, dres.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	dreq.Resources = append(dreq.Resources, dres)
	dresp, err := dreq.RequestWith(context.Background(), cl)
	if err != nil || dresp.Resources[0].ErrorCode != 0 {
		t.Fatalf("describe group configs of %s: %v %+v", group, err, dresp)
	}
	got := map[string]string{}
	for _, c := range dresp.Resources[0].Configs {
		if c.Source == kmsg.ConfigSourceGroupConfig {
			got[c.Name] = *c.Value
		}
	}
	for i := 0; i < len(kv); i += 2 {
		if got[kv[i]] != kv[i+1] {
			t.Fatalf("group %s describes %s=%q, set %q", group, kv[i], got[kv[i]], kv[i+1])
		}
	}
}

func produceKeyed(t *testing.T, cl *kgo.Client, topic string, n, keys int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%keys), Value: fmt.Appendf(nil, "%d", i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func shareClient(t *testing.T, addr, group, topic string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(300 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestShareGroupFranzGo (KIP-932): franz-go share consumers, four members
// on one partition, each record accepted once: every record is delivered
// to exactly one member, more than one member takes part, and the group
// describes its members and their shared partition.
func TestShareGroupFranzGo(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	cl := client(t, tb.addr)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(context.Background(), 1, 1, nil, "jobs"); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, cl, "workers", "share.auto.offset.reset", "earliest")
	const n = 400
	produceKeyed(t, cl, "jobs", n, 40)

	var (
		mu    sync.Mutex
		seen  = map[int64]int{}
		byWho = map[int]int{}
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= n }
	var members []*kgo.Client
	for i := range 4 {
		m := shareClient(t, tb.addr, "workers", "jobs", kgo.ShareMaxRecords(10))
		members = append(members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done() && ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				fs := m.PollRecords(pctx, 10)
				pcancel()
				for _, r := range fs.Records() {
					mu.Lock()
					seen[r.Offset]++
					byWho[i]++
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // work
					r.Ack(kgo.AckAccept)
				}
			}
			m.FlushAcks(context.Background())
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d records delivered", len(seen), n)
	}
	for off, k := range seen {
		if k != 1 {
			t.Fatalf("record %d delivered %d times, each was accepted", off, k)
		}
	}
	if len(byWho) < 2 {
		t.Fatalf("records went to members %v: one partition is shared by all", byWho)
	}
	described, err := adm.DescribeShareGroups(context.Background(), "workers")
	if err != nil {
		t.Fatal(err)
	}
	g := described["workers"]
	if g.Err != nil || len(g.Members) != 4 {
		t.Fatalf("described: %+v", g)
	}
	for _, m := range members {
		m.Close()
	}
	// Every record accepted: the share-partition start offset is the end.
	waitFor(t, 10*time.Second, "the group empty with every record done", func() error {
		sg := tb.b.ShareGroups().Group("workers")
		if sg == nil || len(sg.Parts) != 1 || sg.Parts[0].Start != n || len(sg.Members) != 0 {
			return fmt.Errorf("share group %+v", sg)
		}
		return nil
	})
}

// TestShareGroupRedelivery (KIP-932): a released record comes again with
// its delivery count up, a rejected one never, and at
// share.delivery.count.limit a record that keeps being released is
// archived.
func TestShareGroupRedelivery(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, 1, nil, "retry"); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, cl, "retriers", "share.auto.offset.reset", "earliest", "share.delivery.count.limit", "3")
	produceKeyed(t, cl, "retry", 10, 10)
	m := shareClient(t, tb.addr, "retriers", "retry")
	defer m.Close()
	deliveries := map[int64][]int32{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Record 0 is always released, 1 rejected, the others accepted.
	for ctx.Err() == nil {
		sg := tb.b.ShareGroups().Group("retriers")
		if sg != nil && len(sg.Parts) == 1 && sg.Parts[0].Start == 10 {
			break
		}
		for _, r := range m.PollRecords(ctx, 100).Records() {
			deliveries[r.Offset] = append(deliveries[r.Offset], r.DeliveryCount())
			switch r.Offset {
			case 0:
				r.Ack(kgo.AckRelease)
			case 1:
				r.Ack(kgo.AckReject)
			default:
				r.Ack(kgo.AckAccept)
			}
		}
		m.FlushAcks(ctx)
	}
	if !slices.Equal(deliveries[0], []int32{1, 2, 3}) {
		t.Fatalf("record 0 released each time: delivered with counts %v, want 1, 2, 3 then archived", deliveries[0])
	}
	for off := int64(1); off < 10; off++ {
		if !slices.Equal(deliveries[off], []int32{1}) {
			t.Fatalf("record %d: deliveries %v", off, deliveries[off])
		}
	}
}

// TestShareGroupKeyOrderingFranzGo (docs/share-groups.md): under
// stele.share.key.ordering=true, eight members on one partition process
// the records of each key one at a time, in offset order, while keys
// spread over the members.
func TestShareGroupKeyOrderingFranzGo(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, 1, nil, "ordered"); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, cl, "keyed", "share.auto.offset.reset", "earliest", "stele.share.key.ordering", "true")
	const n, keys = 240, 12
	produceKeyed(t, cl, "ordered", n, keys)
	var (
		mu       sync.Mutex
		order    = map[string][]int64{} // per key, in processing order
		inFlight = map[string]bool{}
		overlap  []string
		byWho    = map[int]int{}
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for _, o := range order {
			c += len(o)
		}
		return c
	}
	for i := range 8 {
		m := shareClient(t, tb.addr, "keyed", "ordered", kgo.ShareMaxRecords(5))
		defer m.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for total() < n && ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				recs := m.PollRecords(pctx, 5).Records()
				pcancel()
				for _, r := range recs {
					k := string(r.Key)
					mu.Lock()
					if inFlight[k] {
						overlap = append(overlap, fmt.Sprintf("%s@%d", k, r.Offset))
					}
					inFlight[k] = true
					order[k] = append(order[k], r.Offset)
					byWho[i]++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					inFlight[k] = false
					mu.Unlock()
					r.Ack(kgo.AckAccept)
				}
				m.FlushAcks(ctx)
			}
		}()
	}
	wg.Wait()
	if got := total(); got != n {
		t.Fatalf("%d of %d records processed", got, n)
	}
	if len(overlap) > 0 {
		t.Fatalf("records processed while an earlier one of their key was in flight: %v", overlap)
	}
	for k, offs := range order {
		if !slices.IsSorted(offs) || len(offs) != n/keys {
			t.Fatalf("key %s processed in the order %v", k, offs)
		}
	}
	if len(byWho) < 2 {
		t.Fatalf("keys went to members %v", byWho)
	}
}

// TestShareGroupErrors: Kafka's answers to share requests that cannot be
// served, nothing changed.
func TestShareGroupErrors(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr)
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fetch := func(group, member string, epoch int32) *kmsg.ShareFetchResponse {
		t.Helper()
		req := kmsg.NewPtrShareFetchRequest()
		req.GroupID, req.MemberID, req.ShareSessionEpoch = kmsg.StringPtr(group), kmsg.StringPtr(member), epoch
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if code := fetch("nobody", "m", 0).ErrorCode; code != kerr.GroupIDNotFound.Code {
		t.Fatalf("a fetch of an unknown group: %v", kerr.ErrorForCode(code))
	}
	if code := fetch("nobody", "m", 5).ErrorCode; code != kerr.ShareSessionNotFound.Code {
		t.Fatalf("a fetch of a session never opened: %v", kerr.ErrorForCode(code))
	}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = "g", "member-1", []string{"t"}
	hresp, err := hb.RequestWith(ctx, cl)
	if err != nil || hresp.ErrorCode != 0 || hresp.Assignment == nil || len(hresp.Assignment.TopicPartitions) != 1 {
		t.Fatalf("join: %v %+v", err, hresp)
	}
	if code := fetch("g", "member-1", 0).ErrorCode; code != 0 {
		t.Fatalf("a new session: %v", kerr.ErrorForCode(code))
	}
	if code := fetch("g", "member-1", 7).ErrorCode; code != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("a stale epoch: %v", kerr.ErrorForCode(code))
	}
	ack := kmsg.NewPtrShareAcknowledgeRequest()
	ack.GroupID, ack.MemberID, ack.ShareSessionEpoch = kmsg.StringPtr("g"), kmsg.StringPtr("member-1"), 1
	at := kmsg.NewShareAcknowledgeRequestTopic()
	at.TopicID = tb.b.View().Topic("t").ID
	ap := kmsg.NewShareAcknowledgeRequestTopicPartition()
	ab := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	ab.FirstOffset, ab.LastOffset, ab.AcknowledgeTypes = 0, 0, []int8{1}
	ap.AcknowledgementBatches = append(ap.AcknowledgementBatches, ab)
	at.Partitions = append(at.Partitions, ap)
	ack.Topics = append(ack.Topics, at)
	aresp, err := ack.RequestWith(ctx, cl)
	if err != nil || aresp.ErrorCode != 0 || aresp.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("acknowledging an offset never acquired: %v %+v", err, aresp)
	}
	// A consumer group's name is not a share group's.
	cg := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	cg.Group, cg.MemberID, cg.RebalanceTimeoutMillis, cg.SubscribedTopicNames, cg.Topics = "classic-name", "c-1", 30000, []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if cresp, err := cg.RequestWith(ctx, cl); err != nil || cresp.ErrorCode != 0 {
		t.Fatalf("consumer group: %v %+v", err, cresp)
	}
	hb.GroupID = "classic-name"
	if hresp, err := hb.RequestWith(ctx, cl); err != nil || hresp.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("a share group named like a consumer group: %v %+v", err, hresp)
	}
}

// TestShareGroupAdmin (KIP-932's admin APIs through kadm): share groups
// are listed with type "share", their start offsets and lag described,
// reset while empty (refused with a member: NON_EMPTY_GROUP), their
// offsets deleted, and the group deleted by DeleteGroups.
func TestShareGroupAdmin(t *testing.T) {
	tb := startTestBrokerClocked(t, 20*time.Millisecond)
	cl := client(t, tb.addr)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "audit"); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, cl, "auditors", "share.auto.offset.reset", "earliest")
	produceKeyed(t, cl, "audit", 20, 4)
	m := shareClient(t, tb.addr, "auditors", "audit", kgo.ShareMaxRecords(5))
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := 0
	for got < 5 && pctx.Err() == nil {
		for _, r := range m.PollRecords(pctx, 5).Records() {
			r.Ack(kgo.AckAccept)
			got++
		}
	}
	if err := m.FlushAcks(pctx); err != nil {
		t.Fatal(err)
	}
	// Kafka's broker defaults of share groups are described, read-only.
	brokerCfgs, err := adm.DescribeBrokerConfigs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rc := range brokerCfgs {
		for _, c := range rc.Configs {
			if c.Key == "group.share.record.lock.duration.ms" && c.MaybeValue() == "30000" {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("broker configs lack group.share.record.lock.duration.ms=30000: %+v", brokerCfgs)
	}
	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	if err != nil || len(listed) != 1 || listed["auditors"].GroupType != "share" || listed["auditors"].State != "Stable" {
		t.Fatalf("listed share groups: %v %+v", err, listed)
	}
	described, err := adm.DescribeShareGroupOffsets(ctx, "auditors")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := described["auditors"].Offsets.Lookup("audit", 0)
	if !ok || o.Err != nil || o.StartOffset < 5 || o.Lag != 20-o.StartOffset {
		t.Fatalf("described offsets: %+v (%v)", o, ok)
	}
	if _, err := adm.AlterShareGroupOffsets(ctx, "auditors", kadm.Offsets{"audit": {0: {Topic: "audit", Partition: 0, At: 0}}}); !errors.Is(err, kerr.NonEmptyGroup) {
		t.Fatalf("altered with a member: %v", err)
	}
	m.Close()
	waitFor(t, 10*time.Second, "the group empty", func() error {
		if g := tb.b.ShareGroups().Group("auditors"); g == nil || len(g.Members) != 0 {
			return fmt.Errorf("%+v", g)
		}
		return nil
	})
	if rs, err := adm.AlterShareGroupOffsets(ctx, "auditors", kadm.Offsets{"audit": {0: {Topic: "audit", Partition: 0, At: 2}}}); err != nil {
		t.Fatal(err)
	} else if e, _ := rs.Lookup("audit", 0); e != nil {
		t.Fatal(e)
	}
	described, _ = adm.DescribeShareGroupOffsets(ctx, "auditors")
	if o, _ := described["auditors"].Offsets.Lookup("audit", 0); o.StartOffset != 2 || o.Lag != 18 {
		t.Fatalf("after the reset: %+v", o)
	}
	if rs, err := adm.DeleteShareGroupOffsets(ctx, "auditors", "audit"); err != nil {
		t.Fatal(err)
	} else if e, _ := rs.Lookup("audit"); e != nil {
		t.Fatal(e)
	}
	if rs, err := adm.DeleteGroups(ctx, "auditors"); err != nil || rs["auditors"].Err != nil {
		t.Fatalf("delete: %v %+v", err, rs)
	}
	if g := tb.b.ShareGroups().Group("auditors"); g != nil {
		t.Fatalf("deleted group: %+v", g)
	}
}

// TestTenantShareGroups (docs/tenants.md, docs/share-groups.md): two
// tenants each run a share group named workers on a topic named jobs,
// through franz-go clients logged in as their users: each member gets
// exactly its tenant's records, each tenant lists and describes only its
// own group under its short name, and the state keeps them apart.
func TestTenantShareGroups(t *testing.T) {
	tb, addr := startSASLBrokerOrdered(t, local.Options{StartTime: time.Now(), Step: 20 * time.Millisecond, Interval: 20 * time.Millisecond}, nil)
	submit := tb.submitter(t)
	type tenantUser struct{ tenant, user, pass string }
	users := []tenantUser{{"acme", "alice@acme", "alice-pw"}, {"globex", "bob@globex", "bob-pw"}}
	for _, u := range users {
		submit("tenant", fsm.CreateTenant{Name: u.tenant})
		cred, err := stelesasl.NewCredential(stelesasl.SHA256, []byte(u.pass), 4096)
		if err != nil {
			t.Fatal(err)
		}
		submit("user", fsm.AlterScramCredentials{User: u.user, Upserts: []stelesasl.Credential{cred}})
		for _, rt := range []int8{fsm.ACLResourceTopic, fsm.ACLResourceGroup} {
			submit("acl", fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: rt, ResourceName: u.tenant + "~", PatternType: fsm.ACLPatternPrefixed,
				Principal: "User:" + u.user, Host: "*", Operation: fsm.ACLOpAll, Permission: fsm.ACLPermissionAllow}})
		}
	}
	for _, u := range users {
		cl := scramClient(t, addr, u.user, u.pass, false)
		if r, err := kadm.NewClient(cl).CreateTopics(ctx(t), 1, -1, nil, "jobs"); err != nil || r.Error() != nil {
			t.Fatalf("%s: create jobs: %v %v", u.user, err, r.Error())
		}
		setGroupConfigs(t, cl, "workers", "share.auto.offset.reset", "earliest")
		for i := range 5 {
			if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "jobs", Value: fmt.Appendf(nil, "%s-%d", u.tenant, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, u := range users {
		a := scram.Auth{User: u.user, Pass: u.pass}
		m := shareClient(t, addr, "workers", "jobs", kgo.SASL(a.AsSha256Mechanism()))
		var got []string
		pctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for len(got) < 5 && pctx.Err() == nil {
			for _, r := range m.PollRecords(pctx, 10).Records() {
				got = append(got, string(r.Value))
				r.Ack(kgo.AckAccept)
			}
		}
		m.FlushAcks(pctx)
		cancel()
		adm := kadm.NewClient(scramClient(t, addr, u.user, u.pass, false))
		listed, err := adm.ListGroupsByType(ctx(t), []string{"share"})
		if err != nil || len(listed) != 1 || listed["workers"].Group != "workers" {
			t.Fatalf("%s lists share groups %v %+v", u.user, err, listed)
		}
		described, err := adm.DescribeShareGroups(ctx(t), "workers")
		if err != nil || len(described["workers"].Members) != 1 {
			t.Fatalf("%s describes %v %+v", u.user, err, described)
		}
		m.Close()
		slices.Sort(got)
		want := []string{u.tenant + "-0", u.tenant + "-1", u.tenant + "-2", u.tenant + "-3", u.tenant + "-4"}
		if !slices.Equal(got, want) {
			t.Fatalf("%s's share consumer got %v, want %v", u.user, got, want)
		}
	}
	var names []string
	for _, g := range tb.b.ShareGroups().Groups() {
		names = append(names, g.Name)
	}
	if !slices.Equal(names, []string{"acme~workers", "globex~workers"}) {
		t.Fatalf("share groups in the state: %v", names)
	}
}

// TestShareFetchRecordLimit (KIP-1206): a ShareFetch acquires at most
// max_records records even inside one batch of more, in the record-limit
// acquire mode, whose limit is strict, and in the batch-optimized mode,
// whose limit Kafka may round up to a batch's end and Stele does not.
func TestShareFetchRecordLimit(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl := client(t, tb.addr)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, cl, "g", "share.auto.offset.reset", "earliest")
	produceKeyed(t, cl, "t", 10, 10) // one batch of ten records
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = "g", "member-1", []string{"t"}
	if hresp, err := hb.RequestWith(ctx, cl); err != nil || hresp.ErrorCode != 0 {
		t.Fatalf("join: %v %+v", err, hresp)
	}
	id := tb.b.View().Topic("t").ID
	epoch := int32(0)
	next := int64(0)
	for _, mode := range []int8{1, 0} {
		req := kmsg.NewPtrShareFetchRequest()
		req.Version = 2
		req.GroupID, req.MemberID, req.ShareSessionEpoch = kmsg.StringPtr("g"), kmsg.StringPtr("member-1"), epoch
		req.MaxRecords, req.BatchSize, req.ShareAcquireMode, req.MaxWaitMillis = 3, 3, mode, 100
		if epoch == 0 {
			rt := kmsg.NewShareFetchRequestTopic()
			rt.TopicID = id
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("mode %d: %v %+v", mode, err, resp)
		}
		n := int64(0)
		for _, a := range resp.Topics[0].Partitions[0].AcquiredRecords {
			if a.FirstOffset != next+n {
				t.Fatalf("mode %d acquired from %d, want %d", mode, a.FirstOffset, next+n)
			}
			n += a.LastOffset - a.FirstOffset + 1
		}
		if n != 3 {
			t.Fatalf("mode %d acquired %d records of a batch of 10 with max_records 3: %+v", mode, n, resp.Topics[0].Partitions[0].AcquiredRecords)
		}
		next += n
		epoch++
	}
}
