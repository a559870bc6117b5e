package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/listener"
)

// testPKI is a CA and certificates issued by it, in files.
type testPKI struct {
	dir  string
	ca   listener.PEMPair
	pool *x509.CertPool
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	var err error
	if p.ca, err = listener.NewCA("test CA", time.Now()); err != nil {
		t.Fatal(err)
	}
	p.pool = x509.NewCertPool()
	p.pool.AppendCertsFromPEM(p.ca.Cert)
	if err := os.WriteFile(filepath.Join(p.dir, "ca.crt"), p.ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue writes name.crt and name.key (replacing them) and returns their
// paths.
func (p *testPKI) issue(t testing.TB, name string) (crt, key string) {
	t.Helper()
	pair, err := listener.Issue(p.ca, name, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	crt, key = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	// Key first, then the certificate: a reader between the two writes
	// finds a pair that does not match and keeps the old one.
	for path, data := range map[string][]byte{key: pair.Key, crt: pair.Cert} {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	return crt, key
}

// clientTLS is a client's TLS configuration trusting p's CA, with the
// certificate name if given.
func (p *testPKI) clientTLS(t testing.TB, name string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1"}
	if name != "" {
		crt, key := p.issue(t, name)
		pair, err := tls.LoadX509KeyPair(crt, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// serveTLS adds an SSL listener to tb with the broker certificate of p,
// client auth auth and the mapping rules given, and returns its address.
func serveTLS(t testing.TB, tb *testBroker, p *testPKI, auth listener.ClientAuth, rules string) string {
	t.Helper()
	crt, key := p.issue(t, "broker")
	lt, err := listener.NewTLS(listener.TLSFiles{Cert: crt, Key: key, CA: filepath.Join(p.dir, "ca.crt"), ClientAuth: auth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := listener.ParsePrincipalMappingRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tb.srv.ServeListener(ln, Listener{Name: "SSL", TLS: lt, Principals: m})
	return ln.Addr().String()
}

// principals lists the principals of tb's open connections.
func principals(tb *testBroker) []string {
	tb.srv.mu.Lock()
	defer tb.srv.mu.Unlock()
	var out []string
	for c := range tb.srv.mu.conns {
		out = append(out, c.principalNow())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestTLSListener: a broker serving PLAINTEXT and SSL listeners at once:
// franz-go produces and consumes over TLS, and Metadata on each listener
// names that listener's address; a plaintext client on the TLS port and a
// TLS client on the plaintext port are refused; without client auth the
// principal is User:ANONYMOUS.
func TestTLSListener(t *testing.T) {
	tb := startTestBroker(t, nil)
	p := newTestPKI(t)
	sslAddr := serveTLS(t, tb, p, listener.ClientAuthNone, "")
	cl := client(t, sslAddr, kgo.DialTLSConfig(p.clientTLS(t, "")), kgo.DefaultProduceTopic("secure"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("over TLS")}).FirstErr(); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	for addr, c := range map[string]*kgo.Client{sslAddr: cl, tb.addr: client(t, tb.addr)} {
		md, err := kadm.NewClient(c).BrokerMetadata(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s:%d", md.Brokers[0].Host, md.Brokers[0].Port); len(md.Brokers) != 1 || got != addr {
			t.Errorf("Metadata on the listener at %s names %v", addr, md.Brokers)
		}
	}
	consumer := client(t, sslAddr, kgo.DialTLSConfig(p.clientTLS(t, "")), kgo.ConsumeTopics("secure"))
	fs := consumer.PollFetches(ctx(t))
	if err := fs.Err(); err != nil || fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "over TLS" {
		t.Fatalf("consume over TLS: %v, %d records", err, fs.NumRecords())
	}
	if got := principals(tb); !slices.Contains(got, listener.Anonymous) {
		t.Errorf("principals %v, want %s", got, listener.Anonymous)
	}

	short := func(addr string, opts ...kgo.Opt) error {
		c := client(t, addr, append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))...)
		return c.Ping(ctx(t))
	}
	if err := short(sslAddr); err == nil {
		t.Error("a plaintext client was served on the TLS listener")
	}
	if err := short(tb.addr, kgo.DialTLSConfig(p.clientTLS(t, ""))); err == nil {
		t.Error("a TLS client was served on the plaintext listener")
	}
	// The broker still serves both.
	if err := short(sslAddr, kgo.DialTLSConfig(p.clientTLS(t, ""))); err != nil {
		t.Errorf("TLS after the bad clients: %v", err)
	}
}

// TestTLSClientAuth: ssl.client.auth=required refuses a client without a
// certificate or with one of another CA; a client certificate's subject,
// mapped by ssl.principal.mapping.rules, is the connection's principal,
// and a subject no rule maps is refused, as Kafka refuses it.
func TestTLSClientAuth(t *testing.T) {
	tb := startTestBroker(t, nil)
	p := newTestPKI(t)
	addr := serveTLS(t, tb, p, listener.ClientAuthRequired, `RULE:^CN=(svc-.*)$/$1/U,RULE:^CN=([a-z]+)$/$1/L`)
	ping := func(cfg *tls.Config) error {
		c := client(t, addr, kgo.DialTLSConfig(cfg), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
		return c.Ping(ctx(t))
	}
	if err := ping(p.clientTLS(t, "")); err == nil {
		t.Error("a client without a certificate was served under client auth required")
	}
	other := newTestPKI(t)
	stranger := other.clientTLS(t, "mallory")
	stranger.RootCAs = p.pool
	if err := ping(stranger); err == nil {
		t.Error("a certificate of another CA was taken")
	}
	if err := ping(p.clientTLS(t, "Bob.Smith")); err == nil {
		t.Error("a subject no mapping rule matches was taken")
	}
	for name, want := range map[string]string{"alice": "User:alice", "svc-billing": "User:SVC-BILLING"} {
		c := client(t, addr, kgo.DialTLSConfig(p.clientTLS(t, name)))
		if err := c.Ping(ctx(t)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := principals(tb); !slices.Contains(got, want) {
			t.Errorf("%s: principals %v, want %s", name, got, want)
		}
	}
}

// TestTLSReload: a listener's certificate files replaced on disk are
// served to the next handshakes, without a restart (a pair that does not
// load keeps the certificate before: internal/listener's TestTLSReload).
func TestTLSReload(t *testing.T) {
	tb := startTestBroker(t, nil)
	p := newTestPKI(t)
	addr := serveTLS(t, tb, p, listener.ClientAuthNone, "")
	serial := func() (string, error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1"})
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	first, err := serial()
	if err != nil {
		t.Fatal(err)
	}
	p.issue(t, "broker") // a whole new pair
	waitFor(t, 5*time.Second, "the new certificate to be served", func() error {
		s, err := serial()
		if err != nil {
			return err
		}
		if s == first {
			return errors.New("still the old certificate")
		}
		return nil
	})
}

// BenchmarkTLS compares the PLAINTEXT and SSL listeners of one broker in
// the same run: franz-go producing 1 KiB records (acks=all, 4 partitions)
// and consuming 32 MiB of them from the start, over each listener
// (docs/benchmarks.md, "TLS listeners").
func BenchmarkTLS(b *testing.B) {
	tb := startTestBroker(b, nil)
	p := newTestPKI(b)
	sslAddr := serveTLS(b, tb, p, listener.ClientAuthNone, "")
	addrs := map[string][]kgo.Opt{
		"PLAINTEXT": {kgo.SeedBrokers(tb.addr)},
		"SSL":       {kgo.SeedBrokers(sslAddr), kgo.DialTLSConfig(p.clientTLS(b, ""))},
	}
	if _, err := kadm.NewClient(client(b, tb.addr)).CreateTopic(ctx(b), 4, -1, nil, "bench-tls"); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 1024)
	for _, name := range []string{"PLAINTEXT", "SSL"} {
		b.Run("produce/"+name, func(b *testing.B) {
			cl, err := kgo.NewClient(append(addrs[name], kgo.DefaultProduceTopic("bench-tls"), kgo.ProducerLinger(time.Millisecond))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			b.SetBytes(int64(len(value)))
			b.ResetTimer()
			for range b.N {
				cl.Produce(ctx(b), &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
			if err := cl.Flush(ctx(b)); err != nil {
				b.Fatal(err)
			}
		})
	}
	const readBytes = 32 << 20
	cl := client(b, tb.addr, kgo.DefaultProduceTopic("bench-tls-read"), kgo.AllowAutoTopicCreation())
	for range readBytes / len(value) {
		cl.Produce(ctx(b), &kgo.Record{Value: value}, nil)
	}
	if err := cl.Flush(ctx(b)); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"PLAINTEXT", "SSL"} {
		b.Run("consume/"+name, func(b *testing.B) {
			b.SetBytes(readBytes)
			for range b.N {
				c, err := kgo.NewClient(append(addrs[name], kgo.ConsumeTopics("bench-tls-read"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for n < readBytes/len(value) {
					fs := c.PollFetches(ctx(b))
					if err := fs.Err(); err != nil {
						b.Fatal(err)
					}
					n += fs.NumRecords()
				}
				c.Close()
			}
		})
	}
}
