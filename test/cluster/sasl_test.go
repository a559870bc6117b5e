package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stele-io/stele/test/harness"
)

// TestClusterSASL (issue 17, docs/security.md): `stele cluster init --tls
// --admin-password-file` makes four brokers whose Kafka listeners are
// SASL_SSL and whose genesis holds the admin user. The admin (SCRAM-SHA-512
// over TLS) creates alice; every broker authenticates her at once (users
// are replicated state): she produces through each broker with
// SCRAM-SHA-256 and reads everything back through another with PLAIN under
// the ACL the admin gave her, is refused any other topic by every broker,
// and may not manage users. A wrong password is refused by every broker; the
// stele commands log in with the client.properties init wrote. The HTTP
// APIs serve TLS (--http-tls; the data planes push over https) and
// authorize alice's Basic credentials by the same ACLs. A broker
// killed with SIGKILL and restarted still knows alice, and the brokers end
// at one app hash.
func TestClusterSASL(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "admin.password")
	if err := os.WriteFile(pwFile, []byte("cluster-admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, clusterOptions{InitArgs: []string{"--tls", "--http-tls", "--admin-password-file", pwFile}})
	c.StartAll()
	c.WaitHeight(time.Minute, 2, c.All()...) // the genesis users exist from block 1
	dir := filepath.Dir(c.Nodes[0].Dir)
	ca, err := os.ReadFile(filepath.Join(dir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	addrs := c.KafkaAddrs(c.All()...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	newClient := func(m sasl.Mechanism, seeds []string, opts ...kgo.Opt) *kgo.Client {
		all := append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(30 * time.Second), kgo.DialTLSConfig(&tls.Config{RootCAs: roots})}, opts...)
		if m != nil {
			all = append(all, kgo.SASL(m))
		}
		cl, err := kgo.NewClient(all...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	admin := scram.Auth{User: "admin", Pass: "cluster-admin-secret"}.AsSha512Mechanism()
	adm := kadm.NewClient(newClient(admin, addrs))
	if _, err := adm.CreateTopic(ctx, 4, -1, nil, "sasl"); err != nil {
		t.Fatal(err)
	}
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-pw"},
	})
	if err != nil || res.Error() != nil {
		t.Fatalf("create alice: %v %v", err, res.Error())
	}

	// Nothing is allowed without an ACL on a cluster that authenticates:
	// alice may read and write the topic. ACLs are replicated state, so
	// every broker enforces this one as soon as it has applied the block
	// that holds it; the broker that answered CreateACLs has, the others
	// may be a block behind.
	created, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts("*").Topics("sasl").Operations(kadm.OpRead, kadm.OpWrite))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range created {
		if r.Err != nil {
			t.Fatalf("ACL %+v: %v", r, r.Err)
		}
	}
	// The broker that answered CreateACLs has applied the ACL's block: once
	// every broker is at the highest height any of them is at now, they all
	// have.
	c.WaitHeight(time.Minute, c.MaxHeight(c.All()...), c.All()...)
	alice := scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism()
	for i, a := range addrs {
		cl := newClient(alice, []string{a}, kgo.DefaultProduceTopic("sasl"), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite())
		var recs []*kgo.Record
		for j := i * 100; j < i*100+100; j++ {
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(j % 8)), Value: []byte(fmt.Sprint(j))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("alice produces through %s: %v", a, err)
		}
	}
	consumeAll := func(seed string, want int) {
		t.Helper()
		cl := newClient(plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism(), []string{seed},
			kgo.ConsumeTopics("sasl"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		seen := map[string]bool{}
		for len(seen) < want {
			fs := cl.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("consume through %s: %v (%d of %d read)", seed, err, len(seen), want)
			}
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		}
	}
	consumeAll(addrs[2], 400)
	t.Logf("%s alice, created through one broker, produced 400 records through all four and read them with PLAIN", harness.Clock())

	if _, err := kadm.NewClient(newClient(alice, addrs)).DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("alice describes users: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	for _, a := range addrs {
		err := newClient(alice, []string{a}, kgo.DisableIdempotentWrite(), kgo.RecordRetries(0)).ProduceSync(ctx, &kgo.Record{Topic: "not-hers", Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("alice writes a topic no ACL gives her through %s: %v", a, err)
		}
	}
	for _, a := range addrs {
		cl := newClient(scram.Auth{User: "alice", Pass: "guess"}.AsSha256Mechanism(), []string{a}, kgo.RequestRetries(0))
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		err := cl.Ping(pctx)
		pcancel()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("a wrong password on %s: %v, want SASL_AUTHENTICATION_FAILED", a, err)
		}
	}
	props := filepath.Join(dir, "client.properties")
	if st, err := os.Stat(props); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v: it holds the admin's password, want 0600", props, err, st.Mode())
	}
	out, err := exec.Command(harness.SteleBin, "--brokers", strings.Join(addrs, ","), "--command-config", props,
		"user", "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "alice") || !strings.Contains(string(out), "admin") {
		t.Fatalf("stele user list with %s: %v\n%s", props, err, out)
	}

	// The HTTP APIs serve TLS (--http-tls: the brokers' data planes
	// reached each other over https for every produce above) and
	// authorize as Kafka does: alice's password over HTTP Basic reads the
	// topic her ACL names and nothing else; nobody else reads it; the
	// stele CLI logs in with client.properties.
	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	for _, tc := range []struct {
		path       string
		user, pass string
		want       int
	}{
		{"/v1/topics/sasl/keys", "alice", "alice-pw", http.StatusOK},
		{"/v1/topics/not-hers/keys", "alice", "alice-pw", http.StatusForbidden},
		{"/v1/topics/sasl/keys", "", "", http.StatusForbidden},
		{"/v1/topics/sasl/keys", "alice", "guess", http.StatusUnauthorized},
		{"/healthz", "", "", http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", c.Nodes[3].HTTPURL+tc.path, nil)
		if tc.user != "" {
			req.SetBasicAuth(tc.user, tc.pass)
		}
		resp, err := https.Do(req)
		if err != nil {
			t.Fatalf("GET %s as %q: %v", tc.path, tc.user, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s as %q: %d, want %d", tc.path, tc.user, resp.StatusCode, tc.want)
		}
	}
	// Plain http on the TLS port: Go's TLS server answers 400 and serves
	// nothing.
	if resp, err := http.Get("http://" + c.Nodes[3].HTTP + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain http on the TLS port: %s", resp.Status)
		}
	}
	out, err = exec.Command(harness.SteleBin, "--command-config", props, "key", "list", "sasl", "--http", c.Nodes[2].HTTPURL).CombinedOutput()
	if err != nil {
		t.Fatalf("stele key list over https with %s: %v\n%s", props, err, out)
	}

	c.Kill9(1)
	c.Start(1)
	c.WaitCaughtUp(2*time.Minute, 1, 0, 2, 3)
	consumeAll(addrs[1], 400)
	t.Logf("%s node1, killed and restarted, still authenticates alice", harness.Clock())
	c.CheckAppHashes(time.Minute, c.All()...)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
