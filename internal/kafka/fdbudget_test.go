package kafka

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFileDescriptorReserve: the listener leaves the process its reserve
// of file descriptors. With a limit of 1000 (a reserve of 100) and 897
// descriptors open besides the Kafka connections, three connections fit;
// a fourth waits, unanswered, until one closes, and the wait is counted.
func TestFileDescriptorReserve(t *testing.T) {
	tb := startTestBroker(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(tb.b, Options{ClusterID: "stele-test", DataDir: "/tmp", AdvertisedHost: "127.0.0.1", AdvertisedPort: 1})
	srv.fds = &fdBudget{
		limit: func() (int, bool) { return 1000, true },
		open:  func(int) (int, bool) { return 897 + srv.quotas.open(), true },
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	var conns []net.Conn
	for range 3 {
		c := rawConn(t, ln.Addr().String())
		if err := served(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	fourth := rawConn(t, ln.Addr().String())
	if err := served(fourth, 500*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection that would eat into the reserve: %v, want no answer while three are open", err)
	}
	conns[0].Close()
	fourth.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := readFrame(fourth); err != nil {
		t.Fatalf("once a connection closed: %v", err)
	}
	if s := testutil.ToFloat64(srv.metrics.acceptBlocked.WithLabelValues("file_descriptors")); s < 0.4 {
		t.Fatalf("stele_kafka_accept_blocked_seconds_total{reason=\"file_descriptors\"} = %v, want the half second it waited", s)
	}
}

// TestFileDescriptorReserveCounting: the open descriptors are counted only
// when the last count may be out of date.
func TestFileDescriptorReserveCounting(t *testing.T) {
	counts, open := 0, 100
	b := &fdBudget{
		limit: func() (int, bool) { return 10000, true }, // reserve 1000
		open:  func(int) (int, bool) { counts++; return open, true },
	}
	now := time.Now()
	for range 5000 {
		if !b.enough(now) {
			t.Fatal("no room with 9900 descriptors free")
		}
		b.accepted++
		open++
	}
	// 9900 free: counted once, and not again before 7900 accepts could
	// have left less than twice the reserve.
	if counts != 1 {
		t.Fatalf("%d counts for 5000 accepts far from the limit, want 1", counts)
	}
	for b.enough(now) {
		b.accepted++
		open++
	}
	if open != 10000-1000 {
		t.Fatalf("accepting stopped with %d descriptors open, want the reserve of 1000 left", open)
	}
	// Near the limit every accept counts again, so closed descriptors
	// are seen at once.
	open -= 10
	if !b.enough(now) {
		t.Fatal("no room after ten descriptors closed")
	}
}
