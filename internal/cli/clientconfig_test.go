package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/listener"
)

func TestParseProperties(t *testing.T) {
	got, err := parseProperties(`# Kafka client properties
! another comment
security.protocol=SSL
ssl.ca.location : /etc/kafka/ca.crt
ssl.certificate.location   /etc/kafka/alice.crt
ssl.key.location=/etc/kafka/\
    alice.key
client.id = tool\u0021
path\=with\:seps=a\tb
empty=
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"security.protocol":        "SSL",
		"ssl.ca.location":          "/etc/kafka/ca.crt",
		"ssl.certificate.location": "/etc/kafka/alice.crt",
		"ssl.key.location":         "/etc/kafka/alice.key",
		"client.id":                "tool!",
		"path=with:seps":           "a\tb",
		"empty":                    "",
	}
	if len(got) != len(want) {
		t.Errorf("got %q", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := parseProperties(`k=\u12`); err == nil {
		t.Error("a short \\u escape was taken")
	}
}

// TestClientTLSOpts: PLAINTEXT gives no option, SSL a TLS dialer from PEM
// files (librdkafka's names or the Java client's PEM stores), SASL_* a
// SASL mechanism from librdkafka's sasl.username and sasl.password or a
// Java sasl.jaas.config (and a TLS dialer for SASL_SSL); sasl.* and ssl.*
// properties stele does not read are refused, naming them, and a key that
// does not load is named, not quoted, nor is a password.
func TestClientTLSOpts(t *testing.T) {
	dir := t.TempDir()
	ca, err := listener.NewCA("ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	alice, err := listener.Issue(ca, "alice", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile, crt, key := write("ca.crt", ca.Cert), write("alice.crt", alice.Cert), write("alice.key", alice.Key)
	store := write("alice.pem", append(append([]byte{}, alice.Cert...), alice.Key...))
	for name, props := range map[string]map[string]string{
		"plaintext": {"client.id": "x"},
		"ssl":       {"security.protocol": "ssl", "ssl.ca.location": caFile},
		"mtls":      {"security.protocol": "SSL", "ssl.ca.location": caFile, "ssl.certificate.location": crt, "ssl.key.location": key},
		"java pem": {"security.protocol": "SSL", "ssl.truststore.location": caFile, "ssl.truststore.type": "PEM",
			"ssl.keystore.location": store, "ssl.keystore.type": "PEM", "ssl.endpoint.identification.algorithm": ""},
		"sasl scram": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "pw"},
		"sasl jaas": {"security.protocol": "SASL_SSL", "ssl.ca.location": caFile, "sasl.mechanism": "PLAIN",
			"sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="p w";`},
	} {
		opts, err := clientTLSOpts(props)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		want := map[string]int{"plaintext": 0, "sasl jaas": 2}[name]
		if want == 0 && name != "plaintext" {
			want = 1
		}
		if len(opts) != want {
			t.Errorf("%s: %d options, want %d", name, len(opts), want)
		}
	}
	if u, p, err := parseJAAS(`org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="s;e=c";`); err != nil || u != "bob" || p != "s;e=c" {
		t.Errorf("JAAS: %q %q %v", u, p, err)
	}
	secret := write("secret.key", []byte("-----BEGIN PRIVATE KEY-----\nc2VjcmV0IGtleSBieXRlcw==\n-----END PRIVATE KEY-----\n"))
	for name, c := range map[string]struct {
		props map[string]string
		want  string
	}{
		"sasl no password": {map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a"}, "needs a user name and a password"},
		"sasl gssapi":      {map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a", "sasl.password": "hunter2"}, "GSSAPI"},
		"sasl property":    {map[string]string{"sasl.mechanism": "PLAIN"}, "security.protocol is PLAINTEXT"},
		"unknown sasl":     {map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.oauthbearer.config": "x"}, "sasl.oauthbearer.config"},
		"unknown ssl":      {map[string]string{"ssl.key.password": "hunter2"}, "ssl.key.password"},
		"jks":              {map[string]string{"security.protocol": "SSL", "ssl.truststore.location": caFile}, "ssl.truststore.type=PEM"},
		"half pair":        {map[string]string{"security.protocol": "SSL", "ssl.certificate.location": crt}, "go together"},
		"bad key":          {map[string]string{"security.protocol": "SSL", "ssl.certificate.location": crt, "ssl.key.location": secret}, "do not load"},
		"bad protocol":     {map[string]string{"security.protocol": "TLS"}, "SASL_PLAINTEXT or SASL_SSL"},
	} {
		_, err := clientTLSOpts(c.props)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("%s: the error quotes a secret: %v", name, err)
		}
	}
	var ue usageError
	if _, err := clientTLSOpts(map[string]string{"sasl.mechanism": "PLAIN"}); !errors.As(err, &ue) {
		t.Errorf("a refused property is not a usage error: %T", err)
	}
}

// FuzzParseProperties: a client properties file (--command-config)
// parses or fails with an error; it never panics, and what it reads is
// UTF-8.
func FuzzParseProperties(f *testing.F) {
	f.Add("security.protocol=SSL\nssl.ca.location=/ca.crt\n")
	f.Add("a\\\n b : c\\u0041\n# x\n")
	f.Add("k=\\")
	f.Fuzz(func(t *testing.T, text string) {
		props, err := parseProperties(text)
		if err != nil {
			return
		}
		for k, v := range props {
			if !utf8Valid(k) || !utf8Valid(v) {
				t.Fatalf("%q = %q is not UTF-8", k, v)
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
