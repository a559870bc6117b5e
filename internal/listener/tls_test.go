package listener

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTLSReload: the files are looked at no more than once a second; a
// pair that does not load (a key that is not the certificate's) keeps the
// certificate before, and a whole new pair is served from the next check.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := NewCA("ca", now)
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, "b.crt"), filepath.Join(dir, "b.key")
	write := func(p PEMPair) {
		t.Helper()
		for path, data := range map[string][]byte{key: p.Key, crt: p.Cert} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	issue := func() PEMPair {
		t.Helper()
		p, err := Issue(ca, "b", []string{"localhost"}, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	write(issue())
	lt, err := NewTLS(TLSFiles{Cert: crt, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := now
	lt.now = func() time.Time { return clock }
	lt.mu.checked = clock
	serial := func() string { return lt.current().Certificates[0].Leaf.SerialNumber.String() }
	first := serial()

	// Another key, not the certificate's, and a file changed size: the
	// check after a second keeps the pair before.
	other := issue()
	if err := os.WriteFile(key, other.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crt, append(append([]byte{}, ca.Cert...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * reloadCheckEvery)
	if s := serial(); s != first {
		t.Fatalf("a pair that does not load replaced the certificate: serial %s, was %s", s, first)
	}
	// The whole pair: within a second nothing is looked at, after it the
	// new certificate is served.
	write(other)
	clock = clock.Add(reloadCheckEvery / 2)
	if s := serial(); s != first {
		t.Fatal("the files were looked at within a second of the last check")
	}
	clock = clock.Add(reloadCheckEvery)
	if s := serial(); s == first {
		t.Fatal("the new pair is not served after the next check")
	}
}

// TestTLSRevoked: with a revocation list the CA signed, a client
// certificate it lists is refused at the handshake and another served; a
// certificate revoked later is refused once the list is read again (the
// next check after it changed); a list another CA signed does not load.
func TestTLSRevoked(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, _ := NewCA("ca", now)
	other, _ := NewCA("other", now)
	server, _ := Issue(ca, "server", nil, []net.IP{net.ParseIP("127.0.0.1")}, now)
	alice, _ := Issue(ca, "alice", nil, nil, now)
	bob, _ := Issue(ca, "bob", nil, nil, now)
	files := TLSFiles{Cert: filepath.Join(dir, "s.crt"), Key: filepath.Join(dir, "s.key"), CA: filepath.Join(dir, "ca.crt"),
		CRL: filepath.Join(dir, "ca.crl"), ClientAuth: ClientAuthRequired}
	if err := WritePair(server, files.Cert, files.Key); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(files.CA, ca.Cert, 0o644)
	crl, err := Revoke(ca, nil, [][]byte{bob.Cert}, now)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(files.CRL, crl, 0o644)
	lt, err := NewTLS(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := now
	lt.now = func() time.Time { return clock }
	lt.mu.checked = clock
	ln, err := tls.Listen("tcp", "127.0.0.1:0", lt.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*tls.Conn).Handshake()
				c.Write([]byte("ok"))
			}()
		}
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	served := func(p PEMPair) bool {
		t.Helper()
		pair, err := tls.X509KeyPair(p.Cert, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 2)
		_, err = io.ReadFull(c, b)
		return err == nil && string(b) == "ok"
	}
	if !served(alice) || served(bob) {
		t.Fatalf("alice served %v, bob (revoked) served %v", served(alice), served(bob))
	}
	crl, err = Revoke(ca, crl, [][]byte{alice.Cert}, now)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(files.CRL, crl, 0o644)
	clock = clock.Add(2 * reloadCheckEvery)
	if served(alice) || served(bob) {
		t.Fatal("a certificate revoked since is still served")
	}
	foreign, _ := Revoke(other, nil, nil, now)
	os.WriteFile(files.CRL, foreign, 0o644)
	if _, err := NewTLS(files, nil); err == nil {
		t.Fatal("a revocation list another CA signed was taken")
	}
	if _, err := Revoke(ca, nil, [][]byte{func() []byte { p, _ := Issue(other, "x", nil, nil, now); return p.Cert }()}, now); err == nil {
		t.Fatal("revoked a certificate another CA issued")
	}
}
