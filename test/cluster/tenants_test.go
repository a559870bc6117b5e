package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stele-io/stele/test/harness"
)

// TestTenantsAcrossBrokers (issue 18, docs/tenants.md "What isolation
// guarantees"): four brokers with SASL over TLS, one of them Byzantine
// (STELE_BYZANTINE=rewrite-tenant=globex: it moves every name its
// clients' requests name into tenant globex). Three tenants, each with a
// user p@TENANT whose clients see its own names.
//
//   - acme's records signed by its user (stele produce --sign: over the
//     topic's name as acme's clients see it) are written through an
//     honest broker; the same through the Byzantine broker are refused by
//     every honest broker (INVALID_RECORD): globex's topic of the same name
//     stays empty everywhere. An unsigned record acme's client sends
//     through the Byzantine broker lands in globex's topic: what a
//     compromised broker can do to unsigned writes, as documented.
//   - then, the lying broker restarted honest, initech, under load (an
//     idempotent producer and a consumer group committing), is deleted:
//     on every broker no file and no name of initech is left, the load's
//     client is refused, and all four end at one app hash.
func TestTenantsAcrossBrokers(t *testing.T) {
	byz := harness.ByzantineBin(t)
	pwFile := filepath.Join(t.TempDir(), "admin.password")
	if err := os.WriteFile(pwFile, []byte("tenants-admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, clusterOptions{InitArgs: []string{"--tls", "--http-tls", "--admin-password-file", pwFile}})
	bad := c.Rng.IntN(len(c.Nodes))
	c.Nodes[bad].Bin, c.Nodes[bad].Env = byz, []string{"STELE_BYZANTINE=rewrite-tenant=globex"}
	honest := without(c.All(), bad)
	c.StartAll()
	c.WaitHeight(time.Minute, 2, c.All()...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := filepath.Dir(c.Nodes[0].Dir)
	adminProps := filepath.Join(dir, "client.properties")
	ca, err := os.ReadFile(filepath.Join(dir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	honestAddrs := strings.Join(c.KafkaAddrs(honest...), ",")
	run := func(props, brokers string, args ...string) (string, error) {
		all := append([]string{"--brokers", brokers, "--command-config", props, "--timeout", "30s"}, args...)
		out, err := exec.CommandContext(ctx, harness.SteleBin, all...).CombinedOutput()
		return string(out), err
	}
	stele := func(props string, args ...string) string {
		t.Helper()
		out, err := run(props, honestAddrs, args...)
		if err != nil {
			t.Fatalf("stele %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	adminHTTP := []string{"--http", c.Nodes[honest[0]].HTTPURL}

	// Three tenants, a user each with ALL on its tenant's names.
	props := map[string]string{}
	users := map[string]*kgo.Client{}
	for _, tenant := range []string{"acme", "globex", "initech"} {
		user := "p@" + tenant
		stele(adminProps, append([]string{"tenant", "create", tenant}, adminHTTP...)...)
		pw := filepath.Join(t.TempDir(), tenant+".password")
		if err := os.WriteFile(pw, []byte(tenant+"-pw\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stele(adminProps, append([]string{"user", "create", "p", "--tenant", tenant, "--password-file", pw}, adminHTTP...)...)
		stele(adminProps, "acl", "add", "--allow-principal", "User:"+user, "--operation", "All",
			"--topic", tenant+"~", "--group", tenant+"~", "--transactional-id", tenant+"~", "--resource-pattern-type", "prefixed")
		admin, err := os.ReadFile(adminProps)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(string(admin), "\n") {
			if !strings.HasPrefix(l, "sasl.") {
				lines = append(lines, l)
			}
		}
		lines = append(lines, "sasl.mechanism=SCRAM-SHA-256", "sasl.username="+user, "sasl.password="+tenant+"-pw")
		props[tenant] = filepath.Join(t.TempDir(), tenant+".properties")
		if err := os.WriteFile(props[tenant], []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs(honest...)...), kgo.RetryTimeout(30*time.Second),
			kgo.DialTLSConfig(&tls.Config{RootCAs: roots}), kgo.SASL(scram.Auth{User: user, Pass: tenant + "-pw"}.AsSha256Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		users[tenant] = cl
	}
	for _, tenant := range []string{"acme", "globex"} {
		stele(props[tenant], "topic", "create", "orders", "--partitions", "4")
	}
	stele(props["acme"], "topic", "create", "ledger", "--partitions", "4", "--config", "stele.signed.by=p@acme")
	stele(props["globex"], "topic", "create", "ledger", "--partitions", "4")
	key := filepath.Join(t.TempDir(), "acme.key")
	stele(adminProps, "producer-key", "generate", "--out", key)
	stele(adminProps, append([]string{"producer-key", "register", "p@acme", "--key", key}, adminHTTP...)...)
	t.Logf("%s node%d rewrites tenants; acme, globex and initech set up", harness.Clock(), bad)

	// The partitions the Byzantine broker leads, and one an honest one
	// does: a produce goes to its partition's leader.
	md, err := kadm.NewClient(users["acme"]).Metadata(ctx, "orders", "ledger")
	if err != nil {
		t.Fatal(err)
	}
	leaderOf := func(topic string, byBad bool) int32 {
		t.Helper()
		for _, p := range md.Topics[topic].Partitions.Sorted() {
			if (p.Leader == c.Nodes[bad].NodeID) == byBad {
				return p.Partition
			}
		}
		t.Fatalf("no partition of %s led by node%d: %v", topic, bad, byBad)
		return -1
	}
	produce := func(topic string, p int32, signed bool, values ...string) (string, error) {
		args := []string{"produce", topic, "--partition", fmt.Sprint(p)}
		if signed {
			args = append(args, "--sign", key, "--principal", "p@acme")
		}
		cmd := exec.CommandContext(ctx, harness.SteleBin, append([]string{"--brokers", honestAddrs, "--command-config", props["acme"], "--timeout", "20s"}, args...)...)
		cmd.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	endOffsets := func(cl *kgo.Client, topic string) int64 {
		t.Helper()
		offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}

	// Signed through an honest leader: written, the signature naming
	// ledger as acme's clients see it.
	if out, err := produce("ledger", leaderOf("ledger", false), true, "s1", "s2"); err != nil {
		t.Fatalf("acme's signed records through an honest broker: %v\n%s", err, out)
	}
	// Signed through the Byzantine broker, which moves them to
	// globex~ledger: refused by the honest brokers.
	out, err := produce("ledger", leaderOf("ledger", true), true, "forged-1")
	if err == nil || !strings.Contains(out, "INVALID_RECORD") {
		t.Fatalf("acme's signed record through the Byzantine broker: %v\n%s\nwant INVALID_RECORD", err, out)
	}
	// Unsigned through it: the honest brokers cannot tell; it lands in
	// globex's orders.
	if out, err := produce("orders", leaderOf("orders", true), false, "moved-1"); err != nil {
		t.Fatalf("acme's unsigned record through the Byzantine broker: %v\n%s", err, out)
	}
	top := c.MaxHeight(c.All()...)
	c.WaitHeight(time.Minute, top+2, c.All()...)
	for _, i := range c.All() {
		one := func(tenant string) *kgo.Client {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Nodes[i].Kafka), kgo.RetryTimeout(20*time.Second),
				kgo.DialTLSConfig(&tls.Config{RootCAs: roots}), kgo.SASL(scram.Auth{User: "p@" + tenant, Pass: tenant + "-pw"}.AsSha256Mechanism()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			return cl
		}
		acme, globex := one("acme"), one("globex")
		if n := endOffsets(acme, "ledger"); n != 2 {
			t.Errorf("node%d: acme's ledger holds %d records, want its 2 signed ones", i, n)
		}
		if n := endOffsets(globex, "ledger"); n != 0 {
			t.Errorf("node%d: globex's ledger holds %d records: a record acme signed reached it", i, n)
		}
		if n, m := endOffsets(globex, "orders"), endOffsets(acme, "orders"); n != 1 || m != 0 {
			t.Errorf("node%d: globex's orders holds %d records and acme's %d, want the unsigned record moved: 1 and 0", i, n, m)
		}
	}
	c.CheckAppHashes(30*time.Second, c.All()...)
	t.Logf("%s the honest brokers refused acme's signed record moved to globex; an unsigned one moved", harness.Clock())

	// initech under load, then deleted, on four honest brokers: the lying
	// one, restarted on the honest binary, would otherwise move the load's
	// group into globex whenever it coordinates it.
	c.Stop(bad)
	c.Nodes[bad].Bin, c.Nodes[bad].Env = "", nil
	c.Start(bad)
	c.WaitCaughtUp(time.Minute, bad, honest...)
	stele(props["initech"], "topic", "create", "load", "--partitions", "4")
	var acked atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadDone sync.WaitGroup
	initech := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs(honest...)...), kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
			kgo.SASL(scram.Auth{User: "p@initech", Pass: "initech-pw"}.AsSha256Mechanism())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	producer := initech(kgo.DefaultProduceTopic("load"), kgo.RecordDeliveryTimeout(10*time.Second))
	consumer := initech(kgo.ConsumeTopics("load"), kgo.ConsumerGroup("readers"), kgo.AutoCommitInterval(300*time.Millisecond))
	// sent is the index of the last record sent; a record sent after the
	// deletion (index above deletedAt) sets ranOn when it is answered.
	var sent, deletedAt atomic.Int64
	var ranOn atomic.Bool
	deletedAt.Store(math.MaxInt64)
	loadDone.Add(2)
	go func() {
		defer loadDone.Done()
		pace := time.NewTicker(5 * time.Millisecond) // about 200 records a second
		defer pace.Stop()
		for i := int64(0); ; i++ {
			sent.Store(i)
			producer.Produce(loadCtx, &kgo.Record{Key: []byte(fmt.Sprint(i % 16)), Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
				if err == nil {
					acked.Add(1)
				}
				if i > deletedAt.Load() {
					ranOn.Store(true)
				}
			})
			select {
			case <-pace.C:
			case <-loadCtx.Done():
				return
			}
		}
	}()
	go func() {
		defer loadDone.Done()
		for loadCtx.Err() == nil {
			consumer.PollFetches(loadCtx)
		}
	}()
	c.Eventually(time.Minute, "initech's load acknowledged and its group committing", func() error {
		if n := acked.Load(); n < 200 {
			return fmt.Errorf("%d acknowledged", n)
		}
		offs, err := kadm.NewClient(users["initech"]).FetchOffsets(ctx, "readers")
		if err != nil {
			return err
		}
		if len(offs) == 0 {
			return fmt.Errorf("group readers has committed nothing")
		}
		return nil
	})
	del := stele(adminProps, append([]string{"tenant", "delete", "initech"}, adminHTTP...)...)
	if !strings.Contains(del, "1 topics") || !strings.Contains(del, "4 partitions") || !strings.Contains(del, "1 users") || !strings.Contains(del, "1 groups") {
		t.Errorf("tenant delete initech printed %q", del)
	}
	t.Logf("%s initech deleted under load (%d records acknowledged): %s", harness.Clock(), acked.Load(), strings.TrimSpace(del))
	// The load runs on into the deletion: records sent after it are
	// answered (refused) before the load stops.
	deletedAt.Store(sent.Load())
	c.Eventually(time.Minute, "the load's records after the deletion answered", func() error {
		if !ranOn.Load() {
			return fmt.Errorf("none answered yet")
		}
		return nil
	})
	stopLoad()
	loadDone.Wait()
	top = c.MaxHeight(c.All()...)
	c.WaitHeight(time.Minute, top+2, c.All()...)
	c.Eventually(time.Minute, "nothing of initech on any broker", func() error {
		for _, i := range c.All() {
			var left []string
			filepath.WalkDir(c.Nodes[i].Dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), "initech") {
					left = append(left, path)
				}
				return nil
			})
			if len(left) > 0 {
				return fmt.Errorf("node%d still has %v", i, left)
			}
			adm := kadm.NewClient(adminClient(t, c.Nodes[i].Kafka, roots))
			tops, err := adm.ListTopics(ctx)
			if err != nil {
				return err
			}
			groups, err := adm.ListGroups(ctx)
			if err != nil {
				return err
			}
			for _, name := range append(tops.Names(), groups.Groups()...) {
				if strings.HasPrefix(name, "initech~") {
					return fmt.Errorf("node%d still lists %s", i, name)
				}
			}
		}
		return nil
	})
	if out, err := run(props["initech"], honestAddrs, "topic", "list"); err == nil {
		t.Errorf("initech's deleted user still lists topics:\n%s", out)
	}
	if out := stele(adminProps, append([]string{"tenant", "list"}, adminHTTP...)...); strings.Contains(out, "initech") {
		t.Errorf("tenant list after the deletion:\n%s", out)
	}
	c.CheckAppHashes(30*time.Second, c.All()...)
}

// adminClient is a client of one broker logged in as the admin user that
// cluster init --admin-password-file made (TestTenantsAcrossBrokers' password).
func adminClient(t *testing.T, addr string, roots *x509.CertPool) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(20*time.Second), kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
		kgo.SASL(scram.Auth{User: "admin", Pass: "tenants-admin-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
