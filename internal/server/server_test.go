package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/freeport"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/listener"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr() // below the ephemeral range: see package freeport
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testConfig(t testing.TB, dir string) Config {
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.KafkaAddr, cfg.HTTPAddr, cfg.P2PAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	return cfg
}

// TestServeRestart runs a real node (embedded CometBFT), writes through
// franz-go, stops it cleanly, starts it again on the same data directory and
// reads everything back: committed state survives a restart and is not
// applied twice.
func TestServeRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("r"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, "r"); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := 0; i < 100; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`stele_kafka_requests_total{api="Produce",error="NONE"}`, "stele_block_height", "stele_commit_latency_seconds_bucket"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	resp, err = http.Get("http://" + n.HTTPAddr() + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	var st httpapi.ClusterStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(st.Validators) != 1 || st.Validators[0].LastSignedHeight < 1 || st.Height < 2 || st.ChainID == "" {
		t.Errorf("/v1/cluster of a single node: %+v", st)
	} else if v := st.Validators[0]; v.Role != httpapi.RoleValidator || !v.Signing || v.NodeID == nil || *v.NodeID != cfg.NodeID || v.Kafka != n.KafkaAddr() {
		t.Errorf("/v1/cluster of a single node: its validator %+v is not this broker (node %d, %s), signing", v, cfg.NodeID, n.KafkaAddr())
	}
	h1, hash1 := n.broker.Info()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n, err = Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	h2, hash2 := n.broker.Info()
	if h2 < h1 || (h2 == h1 && string(hash1) != string(hash2)) {
		t.Fatalf("after restart: height %d (was %d)", h2, h1)
	}
	cl, err = kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("r"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	for len(seen) < 100 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("record %s read %d times", v, c)
		}
	}
	// A second produce after the restart continues the offsets.
	cl2, _ := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	defer cl2.Close()
	r := &kgo.Record{Topic: "r", Partition: 0, Value: []byte("after")}
	if err := cl2.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	end, _ := kadm.NewClient(cl2).ListEndOffsets(ctx, "r")
	var total int64
	end.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 101 {
		t.Fatalf("end offsets sum to %d after restart, want 101", total)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.KafkaAddr = "9092"
	if err := bad.Validate(); err == nil {
		t.Error("a Kafka address without a host was accepted")
	}
	bad = cfg
	bad.DataDir = ""
	if err := bad.Validate(); err == nil {
		t.Error("an empty data directory was accepted")
	}
}

// TestConfigValidateListeners: --listeners in Kafka's syntax, SASL ones
// included; a mechanism Stele does not serve, a SASL listener with none,
// a super user that is not a principal, a missing admin password file, an
// SSL listener without its files and --advertise for several listeners
// are refused with what to do.
func TestConfigValidateListeners(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
	cfg.TLS = listener.TLSFiles{Cert: "b.crt", Key: "b.key"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sasl := cfg
	sasl.Listeners = "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
	sasl.SuperUsers = []string{"User:ops"}
	if err := sasl.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"gssapi": {func(c *Config) { c.SASLMechanisms = []string{"GSSAPI"} }, "GSSAPI"},
		"no mechanism": {func(c *Config) {
			c.Listeners, c.SASLMechanisms = "SASL_PLAINTEXT://127.0.0.1:0", nil
		}, "--sasl-enabled-mechanisms is empty"},
		"super user":     {func(c *Config) { c.SuperUsers = []string{"alice"} }, "User:name"},
		"oauth no jwks":  {func(c *Config) { c.SASLMechanisms = []string{"OAUTHBEARER"} }, "--sasl-oauthbearer-jwks-file"},
		"oauth bad jwks": {func(c *Config) { c.OAuth.JWKSFile = "/nonexistent/jwks.json" }, "--sasl-oauthbearer-jwks-file"},
		"password file":  {func(c *Config) { c.AdminPasswordFile = "/nonexistent/pw" }, "--admin-password-file"},
		"no cert":        {func(c *Config) { c.TLS.Cert = "" }, "--ssl-cert"},
		"client auth":    {func(c *Config) { c.TLS.ClientAuth = "required" }, "--ssl-ca"},
		"bad auth":       {func(c *Config) { c.TLS.ClientAuth = "always" }, "none, requested or required"},
		"advertise":      {func(c *Config) { c.AdvertisedKafka = "h:1" }, "advertised.listeners"},
		"rules":          {func(c *Config) { c.PrincipalMappingRules = "RULE:(/x/" }, "ssl.principal.mapping.rules"},
		"custom name":    {func(c *Config) { c.Listeners = "INTERNAL://127.0.0.1:0" }, "listener.security.protocol.map"},
	} {
		bad := cfg
		c.edit(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// TestPortTaken: a listener that cannot bind fails the start with a clear
// error and leaves nothing running.
func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t, t.TempDir())
	cfg.KafkaAddr = ln.Addr().String()
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "kafka listener") {
		t.Fatalf("start on a taken port: %v", err)
	}
}

// TestTimeoutPropose: serve's --timeout-propose reaches CometBFT; unset it
// is 1 s, or 3 s with --inline-batches (blocks that carry records take
// longer to propagate); a negative one fails the start.
func TestTimeoutPropose(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    time.Duration
		inline bool
		want   string
	}{
		{"default", 0, false, `timeout_propose = "1s"`},
		{"inline batches", 0, true, `timeout_propose = "3s"`},
		{"given", 1500 * time.Millisecond, false, `timeout_propose = "1.5s"`},
		{"given, inline batches", 2 * time.Second, true, `timeout_propose = "2s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.TimeoutPropose, cfg.InlineBatches = tc.set, tc.inline
			n, err := Start(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			n.Close()
			toml, err := os.ReadFile(filepath.Join(cfg.DataDir, "cometbft", "config", "config.toml"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(toml), tc.want) {
				t.Fatalf("CometBFT's config.toml has no %s", tc.want)
			}
		})
	}
	cfg := testConfig(t, t.TempDir())
	cfg.TimeoutPropose = -time.Second
	if _, err := Start(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "timeout_propose -1s must be positive") {
		t.Fatalf("start with a negative timeout: %v", err)
	}
}
