package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/server"
)

// TestServerProperties: Kafka's server.properties names set stele serve's
// settings, a flag given wins over the file, keys Stele does not have are
// returned as ignored, an authorizer is taken (Stele's always runs), and a
// non-PEM or encrypted store refuses the file.
func TestServerProperties(t *testing.T) {
	props, err := parseProperties(`# a Kafka broker's file
process.roles=broker,controller
node.id=3
listeners=SASL_SSL://127.0.0.1:9093
advertised.listeners=SASL_SSL://broker3.example:9093
log.dirs=/var/lib/kafka
num.partitions=6
auto.create.topics.enable=false
ssl.keystore.type=PEM
ssl.keystore.location=/etc/kafka/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/ca.pem
ssl.client.auth=requested
sasl.enabled.mechanisms=SCRAM-SHA-512, PLAIN
super.users=User:ops;User:admin
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
connections.max.reauth.ms=3600000
max.connections.per.ip=50
num.network.threads=8
`)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	ignored, err := applyServerProperties(&cfg, props, func(flag string) bool { return flag == "num-partitions" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ignored, []string{"num.network.threads", "process.roles"}) {
		t.Errorf("ignored %v", ignored)
	}
	want := server.DefaultConfig()
	want.NodeID, want.Listeners, want.AdvertisedListeners, want.DataDir = 3, "SASL_SSL://127.0.0.1:9093", "SASL_SSL://broker3.example:9093", "/var/lib/kafka"
	want.AutoCreateTopics, want.MaxConnectionsPerIP, want.MaxReauth = false, 50, time.Hour
	want.TLS = listener.TLSFiles{Cert: "/etc/kafka/broker.pem", Key: "/etc/kafka/broker.pem", CA: "/etc/kafka/ca.pem", ClientAuth: listener.ClientAuthRequested}
	want.SASLMechanisms, want.SuperUsers = []string{"SCRAM-SHA-512", "PLAIN"}, []string{"User:ops", "User:admin"}
	if cfg.DefaultPartitions != 1 {
		t.Errorf("num.partitions set over the flag given: %d", cfg.DefaultPartitions)
	}
	if cfg.NodeID != want.NodeID || cfg.Listeners != want.Listeners || cfg.AdvertisedListeners != want.AdvertisedListeners || cfg.DataDir != want.DataDir ||
		cfg.AutoCreateTopics || cfg.MaxConnectionsPerIP != 50 || cfg.MaxReauth != time.Hour || cfg.TLS != want.TLS ||
		!slices.Equal(cfg.SASLMechanisms, want.SASLMechanisms) || !slices.Equal(cfg.SuperUsers, want.SuperUsers) ||
		cfg.AllowEveryoneIfNoACL == nil || !*cfg.AllowEveryoneIfNoACL {
		t.Errorf("read %+v", cfg)
	}
	for file, want := range map[string]string{
		"ssl.keystore.type=JKS":                          "only PEM",
		"ssl.key.password=hunter2":                       "unencrypted",
		"num.partitions=many":                            "num.partitions",
		"log.dirs=/a,/b":                                 "one directory",
		"sasl.oauthbearer.jwks.endpoint.refresh.ms=soon": "milliseconds",
		"listener.security.protocol.map=A:TLS":           "not a security protocol",
	} {
		p, _ := parseProperties(file)
		c := server.DefaultConfig()
		_, err := applyServerProperties(&c, p, func(string) bool { return false })
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want %q", file, err, want)
		}
	}
}

// TestServeConfigFile: stele serve --config with a server.properties
// holding a SASL_PLAINTEXT listener, log.dirs and sasl.enabled.mechanisms:
// the admin logs in with SCRAM-SHA-512 and PLAIN is refused, as the file
// enables only SCRAM.
func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	kafkaAddr, httpAddr, p2p := freeAddr(t), freeAddr(t), freeAddr(t)
	pw := filepath.Join(dir, "admin.password")
	os.WriteFile(pw, []byte("from-the-file\n"), 0o600)
	file := filepath.Join(dir, "server.properties")
	os.WriteFile(file, []byte("listeners=SASL_PLAINTEXT://"+kafkaAddr+"\nlog.dirs="+filepath.Join(dir, "data")+
		"\nsasl.enabled.mechanisms=SCRAM-SHA-512\nzookeeper.connect=localhost:2181\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- runCLI(ctx, "", "serve", "--config", file, "--http", httpAddr, "--p2p", p2p, "--admin-password-file", pw)
	}()
	defer func() {
		cancel()
		if r := <-done; r.code != ExitOK {
			t.Errorf("serve: exit %d\n%s", r.code, r.stderr)
		}
	}()
	login := func(o kgo.Opt) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), o, kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		defer pcancel()
		return cl.Ping(pctx)
	}
	eventually(t, 30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(dir, "data", "cometbft")); err != nil {
			return err // log.dirs is the data directory
		}
		err := login(kgo.SASL(scram.Auth{User: "admin", Pass: "from-the-file"}.AsSha512Mechanism()))
		if errors.Is(err, kerr.SaslAuthenticationFailed) {
			// Not created yet: slowly, as five failures a minute lock the
			// user out from this address.
			time.Sleep(2 * time.Second)
		}
		return err
	})
	if err := login(kgo.SASL(plain.Auth{User: "admin", Pass: "from-the-file"}.AsMechanism())); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
		t.Fatalf("PLAIN, not in sasl.enabled.mechanisms: %v", err)
	}
}
