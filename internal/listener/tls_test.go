package listener

import (
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
