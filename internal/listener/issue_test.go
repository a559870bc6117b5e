package listener

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIssue: a certificate issued by a local CA verifies against it for
// the names and addresses given, as a server's and as a client's, carries
// its name as the subject, and loads as a TLS key pair; files are not
// overwritten; a CA pair that is not one is refused.
func TestIssue(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Issue(ca, "broker0", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	leaf := pair.Leaf
	for _, c := range []x509.VerifyOptions{
		{Roots: roots, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		if _, err := leaf.Verify(c); err != nil {
			t.Errorf("verify %+v: %v", c.DNSName, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "elsewhere"}); err == nil {
		t.Error("verified for a name not given")
	}
	if leaf.Subject.String() != "CN=broker0" || !p.NotAfter.After(now.Add(CertValidity-time.Hour)) {
		t.Errorf("subject %s, not after %v", leaf.Subject, p.NotAfter)
	}

	dir := t.TempDir()
	crt, key := filepath.Join(dir, "x.crt"), filepath.Join(dir, "x.key")
	if err := WritePair(p, crt, key); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(key); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode())
	}
	if err := WritePair(p, crt, key); err == nil {
		t.Error("files were overwritten")
	}
	if _, err := Issue(PEMPair{Cert: p.Cert, Key: p.Key}, "x", nil, nil, now); !errors.Is(err, errNotCA) {
		t.Errorf("a leaf as CA: %v", err)
	}
	if _, err := Issue(PEMPair{Cert: ca.Cert, Key: p.Key}, "x", nil, nil, now); !errors.Is(err, errNotCA) {
		t.Errorf("a CA with another key: %v", err)
	}
}
