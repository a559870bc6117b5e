package cli

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/kafka"
	"github.com/stele-io/stele/internal/listener"
)

// stele cluster init --tls: every broker's Kafka listener is SSL with
// mutual TLS required, from a CA the command makes.
//
//	DIR/ca/ca.crt, ca.key             the cluster's CA (keep ca.key private)
//	DIR/nodeI/tls/broker.crt, .key    broker I's certificate, for its host
//	DIR/nodeI/tls/ca.crt              the CA, which client certificates are checked against
//	DIR/client/client.crt, .key       a client certificate (User:CN=client)
//	DIR/client.properties             security.protocol=SSL and those files, for --command-config
//
// With --admin-password-file the listeners are SASL_PLAINTEXT, or
// SASL_SSL with --tls (no client certificate asked: the password
// authenticates), the genesis holds the admin user's SCRAM credentials,
// and DIR/client.properties (mode 0600) logs in as admin with SCRAM-SHA-512.

// The files of a --tls cluster, relative to a node directory or to DIR.
const (
	nodeTLSDir           = "tls"
	clusterCADir         = "ca"
	clusterClientDir     = "client"
	clientPropertiesFile = "client.properties"
)

// planClusterTLS makes each node's listener SSL, naming its files.
func planClusterTLS(nodes []clusterNode) {
	for i := range nodes {
		f := &nodes[i].file
		f.Listeners = "SSL://" + f.Kafka
		f.SSLCert = filepath.Join(nodeTLSDir, "broker.crt")
		f.SSLKey = filepath.Join(nodeTLSDir, "broker.key")
		f.SSLCA = filepath.Join(nodeTLSDir, listener.CACertFile)
		f.SSLClientAuth = string(listener.ClientAuthRequired)
		// The client certificate init writes is the cluster's first
		// administrator: nothing is allowed without an ACL on a cluster
		// whose listeners authenticate.
		f.SuperUsers = []string{clientCertPrincipal}
	}
}

// clientCertPrincipal is the principal of the client certificate
// `cluster init --tls` writes (DEFAULT mapping of its subject).
const clientCertPrincipal = "User:CN=client"

// planClusterSASL makes each node's listener SASL_SSL (over --tls's files,
// without client certificates) or SASL_PLAINTEXT.
func planClusterSASL(nodes []clusterNode, tls bool) {
	for i := range nodes {
		f := &nodes[i].file
		f.Listeners = listenerProtocol(tls, true) + "://" + f.Kafka
		if tls {
			f.SSLClientAuth = string(listener.ClientAuthNone)
		}
		f.SuperUsers = nil // the admin user is the super user
	}
}

// listenerProtocol is the brokers' security protocol for --tls and
// --admin-password-file.
func listenerProtocol(tls, sasl bool) string {
	switch {
	case tls && sasl:
		return "SASL_SSL"
	case sasl:
		return "SASL_PLAINTEXT"
	case tls:
		return "SSL"
	}
	return "PLAINTEXT"
}

// writeClusterSecurity writes what --tls and --admin-password-file need
// beside the node directories, and the client properties.
func writeClusterSecurity(dir string, nodes []clusterNode, tls bool, password []byte) error {
	var props []string
	mode := os.FileMode(0o644)
	if tls {
		var err error
		if props, err = writeClusterTLS(dir, nodes); err != nil {
			return err
		}
	}
	if password != nil {
		if tls {
			props = props[:len(props)-2] // the client certificate: the password authenticates
		}
		props = append([]string{
			"# Client properties for this cluster's SASL listeners, logging in as the admin",
			"# user: stele --command-config FILE, kcat -F FILE. Keep this file private.",
		}, props...)
		props = append(props, "sasl.mechanism=SCRAM-SHA-512", "sasl.username="+kafka.AdminUser, "sasl.password="+strings.ReplaceAll(string(password), `\`, `\\`))
		mode = 0o600
	}
	props = append(props, "security.protocol="+listenerProtocol(tls, password != nil), "")
	path := filepath.Join(dir, clientPropertiesFile)
	if err := os.WriteFile(path, []byte(strings.Join(props, "\n")), mode); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// writeClusterTLS writes the CA and the brokers' and a client's
// certificates, and returns the client properties naming them (the last
// two the client certificate and key).
func writeClusterTLS(dir string, nodes []clusterNode) ([]string, error) {
	now := time.Now()
	ca, err := listener.NewCA("Stele cluster CA", now)
	if err != nil {
		return nil, err
	}
	caDir := filepath.Join(dir, clusterCADir)
	if err := listener.WritePair(ca, filepath.Join(caDir, listener.CACertFile), filepath.Join(caDir, listener.CAKeyFile)); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		host, _, _ := net.SplitHostPort(n.Kafka)
		dns, ips := []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		if ip := net.ParseIP(host); ip != nil {
			ips = append(ips, ip)
		} else if host != "" && host != "localhost" {
			dns = append(dns, host)
		}
		p, err := listener.Issue(ca, fmt.Sprintf("node%d", n.NodeID), dns, ips, now)
		if err != nil {
			return nil, err
		}
		tlsDir := filepath.Join(n.Dir, nodeTLSDir)
		if err := listener.WritePair(p, filepath.Join(tlsDir, "broker.crt"), filepath.Join(tlsDir, "broker.key")); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tlsDir, listener.CACertFile), ca.Cert, 0o644); err != nil {
			return nil, fmt.Errorf("cannot write the CA into %s: %w", tlsDir, err)
		}
	}
	client, err := listener.Issue(ca, "client", nil, nil, now)
	if err != nil {
		return nil, err
	}
	clientDir := filepath.Join(dir, clusterClientDir)
	if err := listener.WritePair(client, filepath.Join(clientDir, "client.crt"), filepath.Join(clientDir, "client.key")); err != nil {
		return nil, err
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		return a
	}
	return []string{
		"# Client properties for this cluster's TLS listeners, in librdkafka's names:",
		"# stele --command-config FILE, kcat -F FILE. (Java clients name them otherwise:",
		"# ssl.truststore.type=PEM and ssl.truststore.location, and a PEM keystore.)",
		"ssl.ca.location=" + abs(filepath.Join(caDir, listener.CACertFile)),
		"ssl.certificate.location=" + abs(filepath.Join(clientDir, "client.crt")),
		"ssl.key.location=" + abs(filepath.Join(clientDir, "client.key")),
	}, nil
}
