package kafka

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// dialFrom opens a connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served sends ApiVersions and waits up to d for its answer.
func served(c net.Conn, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write(apiVersionsFrames(1)); err != nil {
		return err
	}
	_, err := readFrame(c)
	return err
}

// closedAtOnce checks that the broker closed c without answering.
func closedAtOnce(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(apiVersionsFrames(1)) // may fail already
	if _, err := readFrame(c); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %v, want the broker to close the connection", err)
	}
}

// TestMaxConnectionsPerIP: with max.connections.per.ip 2, a third
// connection from 127.0.0.1 is closed at once and counted, while the first
// two are served; once one of them closes, a new one is served again.
// Reference: Kafka's ConnectionQuotas.inc (TooManyConnectionsException).
func TestMaxConnectionsPerIP(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) { o.MaxConnectionsPerIP = 2 })
	a, b := dialFrom(t, "127.0.0.1", tb.addr), dialFrom(t, "127.0.0.1", tb.addr)
	for _, c := range []net.Conn{a, b} {
		if err := served(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	closedAtOnce(t, dialFrom(t, "127.0.0.1", tb.addr))
	if n := testutil.ToFloat64(tb.srv.metrics.refused.WithLabelValues("max_connections_per_ip")); n != 1 {
		t.Fatalf("stele_kafka_connections_refused_total = %v, want 1", n)
	}
	if err := served(a, 5*time.Second); err != nil {
		t.Fatalf("an admitted connection after the refusal: %v", err)
	}
	a.Close()
	b.Close()
	waitFor(t, 5*time.Second, "the closed connections to be released", func() error {
		if n := testutil.ToFloat64(tb.srv.metrics.connections); n != 0 {
			return errors.New("connections still counted")
		}
		return nil
	})
	// franz-go, which opens two connections (the seed, then the broker by
	// its id), fits within the limit.
	if err := client(t, tb.addr).Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestMaxConnectionsPerIPOverrides: max.connections.per.ip.overrides
// replaces the default limit for the addresses it names: 127.0.0.1 may
// have one connection, 127.0.0.2 none, while 127.0.0.3 keeps the default.
func TestMaxConnectionsPerIPOverrides(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) {
		o.MaxConnectionsPerIP = 3
		o.MaxConnectionsPerIPOverrides = map[netip.Addr]int{
			netip.MustParseAddr("127.0.0.1"):        1,
			netip.MustParseAddr("::ffff:127.0.0.2"): 0, // matched as its IPv4 form
		}
	})
	if ln, err := net.Listen("tcp", "127.0.0.3:0"); err != nil {
		t.Skipf("no 127.0.0.3 to connect from: %v", err)
	} else {
		ln.Close()
	}
	// DescribeConfigs reports them as applied.
	if got := tb.srv.connectionOverrides(); got != "127.0.0.1:1,127.0.0.2:0" {
		t.Errorf("max.connections.per.ip.overrides described as %q", got)
	}
	one := dialFrom(t, "127.0.0.1", tb.addr)
	if err := served(one, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	closedAtOnce(t, dialFrom(t, "127.0.0.1", tb.addr))
	closedAtOnce(t, dialFrom(t, "127.0.0.2", tb.addr))
	for range 3 {
		if err := served(dialFrom(t, "127.0.0.3", tb.addr), 5*time.Second); err != nil {
			t.Fatalf("127.0.0.3 within the default limit: %v", err)
		}
	}
	closedAtOnce(t, dialFrom(t, "127.0.0.3", tb.addr))
	if n := testutil.ToFloat64(tb.srv.metrics.refused.WithLabelValues("max_connections_per_ip")); n != 3 {
		t.Fatalf("stele_kafka_connections_refused_total = %v, want 3", n)
	}
}

// TestMaxConnectionsWaits: with max.connections 2 and two connections
// open, a third one is not refused but waits, unserved, as Kafka's
// acceptor blocks until a slot frees; when one of the two closes, the
// third is served, and the wait is counted.
// Reference: Kafka's ConnectionQuotas.waitForConnectionSlot.
func TestMaxConnectionsWaits(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) { o.MaxConnections = 2 })
	a, b := rawConn(t, tb.addr), rawConn(t, tb.addr)
	for _, c := range []net.Conn{a, b} {
		if err := served(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	third := rawConn(t, tb.addr) // the kernel completes it; the broker does not accept it yet
	if err := served(third, 500*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection beyond max.connections: %v, want no answer while two are open", err)
	}
	if n := testutil.ToFloat64(tb.srv.metrics.connections); n != 2 {
		t.Fatalf("stele_kafka_connections = %v, want 2", n)
	}
	a.Close()
	third.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := readFrame(third); err != nil { // the answer to the request sent while it waited
		t.Fatalf("once a slot freed: %v", err)
	}
	if err := served(b, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := testutil.ToFloat64(tb.srv.metrics.acceptBlocked.WithLabelValues("max_connections")); s < 0.4 {
		t.Fatalf("stele_kafka_accept_blocked_seconds_total = %v, want the half second it waited", s)
	}
	if n := testutil.ToFloat64(tb.srv.metrics.refused.WithLabelValues("max_connections_per_ip")); n != 0 {
		t.Fatalf("%v connections refused; max.connections makes them wait", n)
	}
}
