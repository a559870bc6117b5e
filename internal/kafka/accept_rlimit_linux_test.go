package kafka

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAcceptRealEMFILE: the kernel's own EMFILE, as package net returns it
// from Accept, is recognised and backed off from. This process's
// RLIMIT_NOFILE is lowered to what it holds plus three while twelve
// connections wait in the listen backlog; the front-end (without its
// descriptor reserve, which would stop it before the limit) accepts three,
// counts the failures under emfile, and once the limit is back serves
// clients again.
func TestAcceptRealEMFILE(t *testing.T) {
	tb := startTestBroker(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var flood []net.Conn
	for range 12 {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	srv := New(tb.b, Options{ClusterID: "stele-test", DataDir: "/tmp", AdvertisedHost: "127.0.0.1",
		AdvertisedPort: int32(ln.Addr().(*net.TCPAddr).Port)})
	srv.fds.limit = nil
	defer srv.Close()

	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := syscall.Rlimit{Cur: uint64(len(fds) + 3), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(srv.metrics.acceptErrors.WithLabelValues("emfile")) < 3 {
		if time.Now().After(deadline) {
			restore()
			t.Fatalf("%v accepts failed with EMFILE, want 3 or more", testutil.ToFloat64(srv.metrics.acceptErrors.WithLabelValues("emfile")))
		}
		time.Sleep(20 * time.Millisecond)
	}
	restore()
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	select {
	case err := <-errc:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
	if err := client(t, ln.Addr().String()).Ping(ctx(t)); err != nil {
		t.Fatalf("after the limit was restored: %v", err)
	}
	if n := testutil.ToFloat64(srv.metrics.acceptErrors.WithLabelValues("emfile")); n > 20 {
		t.Errorf("%v failed accepts in well under 2 s: the pause between them does not grow", n)
	}
}
