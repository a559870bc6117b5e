package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

// TestClusterTLS (issue 17, docs/security.md): `stele cluster init --tls`
// makes four brokers whose Kafka listeners are SSL with mutual TLS
// required. franz-go with the client certificate it wrote creates a topic,
// produces idempotently through every broker and reads everything back
// through another; Metadata names the four brokers at their TLS
// addresses; a client without TLS, or without a certificate, is refused;
// the stele commands reach the cluster with the client.properties it
// wrote. A broker killed with SIGKILL and restarted catches up and serves
// what it missed over TLS, and the brokers end at one app hash.
func TestClusterTLS(t *testing.T) {
	c := newCluster(t, clusterOptions{InitArgs: []string{"--tls"}})
	c.StartAll()
	dir := filepath.Dir(c.Nodes[0].Dir)
	ca, err := os.ReadFile(filepath.Join(dir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client", "client.crt"), filepath.Join(dir, "client", "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	withCert := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}
	addrs := c.KafkaAddrs(c.All()...)
	newClient := func(cfg *tls.Config, seeds []string, opts ...kgo.Opt) *kgo.Client {
		all := append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(30 * time.Second)}, opts...)
		if cfg != nil {
			all = append(all, kgo.DialTLSConfig(cfg))
		}
		cl, err := kgo.NewClient(all...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	adm := kadm.NewClient(newClient(withCert, addrs))
	if _, err := adm.CreateTopic(ctx, 4, -1, nil, "secure"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, b := range md.Brokers {
		named = append(named, fmt.Sprintf("%s:%d", b.Host, b.Port))
	}
	slices.Sort(named)
	if want := slices.Sorted(slices.Values(addrs)); !slices.Equal(named, want) {
		t.Fatalf("Metadata over TLS names %v, want %v", named, want)
	}

	produce := func(seed string, from, n int) {
		t.Helper()
		cl := newClient(withCert, []string{seed}, kgo.DefaultProduceTopic("secure"), kgo.RequiredAcks(kgo.AllISRAcks()))
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i % 16)), Value: []byte(fmt.Sprint(i))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce through %s: %v", seed, err)
		}
	}
	for i, a := range addrs {
		produce(a, i*250, 250)
	}
	consumeAll := func(seed string, want int) {
		t.Helper()
		cl := newClient(withCert, []string{seed}, kgo.ConsumeTopics("secure"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		seen := map[string]bool{}
		for len(seen) < want {
			fs := cl.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("consume through %s: %v (%d of %d read)", seed, err, len(seen), want)
			}
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		}
		if len(seen) != want {
			t.Fatalf("consume through %s: %d distinct records, want %d", seed, len(seen), want)
		}
	}
	consumeAll(addrs[3], 1000)
	t.Logf("%s 1000 records produced through the four brokers and read back over mutual TLS", harness.Clock())

	refused := func(cfg *tls.Config) error {
		cl := newClient(cfg, addrs[:1], kgo.RetryTimeout(2*time.Second), kgo.RequestRetries(0))
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		return cl.Ping(pctx)
	}
	if err := refused(nil); err == nil {
		t.Error("a plaintext client was served by a --tls cluster")
	}
	if err := refused(&tls.Config{RootCAs: roots}); err == nil {
		t.Error("a client without a certificate was served under mutual TLS")
	}

	props := filepath.Join(dir, "client.properties")
	out, err := exec.Command(harness.SteleBin, "--brokers", strings.Join(addrs, ","), "--command-config", props,
		"topic", "describe", "secure").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "secure") {
		t.Fatalf("stele topic describe with %s: %v\n%s", props, err, out)
	}

	c.Kill9(1)
	produce(addrs[0], 1000, 500)
	c.Start(1)
	c.WaitCaughtUp(2*time.Minute, 1, 0, 2, 3)
	consumeAll(addrs[1], 1500)
	t.Logf("%s node1, killed and restarted, caught up and serves all 1500 records over TLS", harness.Clock())
	c.CheckAppHashes(time.Minute, c.All()...)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
