package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

// TestByzantineUnsignedAdmin (issue 17, docs/security.md "Signed
// administration"): under stele.admin.signed=true, one of four brokers
// (STELE_BYZANTINE=forge-admin) submits every topic deletion a client asks
// of it both unsigned and wrapped in a signature it made up in the
// administrator's name. Every honest broker refuses both in the
// deterministic apply: the topic and its records stay on all four, which
// end at one app hash. A deletion a Kafka client asks of an honest broker
// is refused with POLICY_VIOLATION. The same deletion signed by the
// administrator's key (stele topic delete --sign), submitted through the
// Byzantine broker's own HTTP API, is applied everywhere: the broker can
// drop a signed command, not forge or change one.
func TestByzantineUnsignedAdmin(t *testing.T) {
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	bad := c.Rng.IntN(len(c.Nodes))
	c.Nodes[bad].Bin, c.Nodes[bad].Env = byz, []string{"STELE_BYZANTINE=forge-admin"}
	honest := without(c.All(), bad)
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addrs := c.KafkaAddrs(c.All()...)
	stele := func(args ...string) string {
		t.Helper()
		all := append([]string{"--brokers", strings.Join(c.KafkaAddrs(honest...), ","), "--timeout", "30s"}, args...)
		out, err := exec.Command(harness.SteleBin, all...).CombinedOutput()
		if err != nil {
			t.Fatalf("stele %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	key := filepath.Join(t.TempDir(), "admin.key")
	stele("producer-key", "generate", "--out", key)
	stele("producer-key", "register", "admin", "--key", key, "--http", c.Nodes[honest[0]].HTTP)
	// The administrator may do anything, and so may the clients of this
	// PLAINTEXT cluster (User:ANONYMOUS): only the signature decides.
	for _, p := range []string{"User:ANONYMOUS", "User:admin"} {
		stele("acl", "add", "--allow-principal", p, "--operation", "All", "--cluster")
		stele("acl", "add", "--allow-principal", p, "--operation", "All", "--topic", "*")
	}
	stele("topic", "create", "precious", "--partitions", "2")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("precious"), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	signed := []string{"--sign", key, "--principal", "admin", "--http", c.Nodes[honest[1]].HTTP}
	stele(append([]string{"config", "alter", "--broker-default", "--set", "stele.admin.signed=true"}, signed...)...)
	t.Logf("%s node%d forges administration; stele.admin.signed is on", harness.Clock(), bad)

	deleteThrough := func(i int) error {
		one, err := kgo.NewClient(kgo.SeedBrokers(c.Nodes[i].Kafka), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer one.Close()
		rs, err := kadm.NewClient(one).DeleteTopics(ctx, "precious")
		if err != nil {
			return err
		}
		return rs["precious"].Err
	}
	if err := deleteThrough(bad); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a deletion through the Byzantine broker: %v, want its forged signature refused (SASL_AUTHENTICATION_FAILED)", err)
	}
	if err := deleteThrough(honest[0]); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("an unsigned deletion through an honest broker: %v, want POLICY_VIOLATION", err)
	}
	top := c.MaxHeight(c.All()...)
	c.WaitHeight(time.Minute, top+2, c.All()...)
	for _, i := range c.All() {
		md, err := kadm.NewClient(clientOf(t, c.Nodes[i].Kafka)).ListTopics(ctx, "precious")
		if err != nil || !md.Has("precious") {
			t.Fatalf("node%d no longer lists precious: %v", i, err)
		}
		offs, err := kadm.NewClient(clientOf(t, c.Nodes[i].Kafka)).ListEndOffsets(ctx, "precious")
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
		if n != 20 {
			t.Fatalf("node%d holds %d records of precious, want 20", i, n)
		}
	}
	c.CheckAppHashes(30*time.Second, c.All()...)

	// Signed, through the Byzantine broker's HTTP API: applied.
	stele("topic", "delete", "precious", "--sign", key, "--principal", "admin", "--http", c.Nodes[bad].HTTP)
	c.Eventually(30*time.Second, "precious deleted on every broker", func() error {
		for _, i := range c.All() {
			md, err := kadm.NewClient(clientOf(t, c.Nodes[i].Kafka)).ListTopics(ctx, "precious")
			if err != nil {
				return err
			}
			if md.Has("precious") {
				return fmt.Errorf("node%d still lists precious", i)
			}
		}
		return nil
	})
	c.CheckAppHashes(30*time.Second, c.All()...)
}

// clientOf is a client of one broker, closed when the test ends.
func clientOf(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
