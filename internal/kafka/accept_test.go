package kafka

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// failingListener makes its first len(errs) Accepts fail with errs, in
// order, wrapped the way package net wraps accept(2)'s errors, then
// accepts from the real listener.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	errs  []error
	times []time.Time // when each failure was returned
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.times = append(l.times, time.Now())
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", err)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// recordingHandler keeps the messages logged at info level and above.
type recordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) count(substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// serveOn runs a second front-end over tb's broker on ln and returns it and
// the channel Serve's result arrives on.
func serveOn(t *testing.T, tb *testBroker, ln net.Listener, log *slog.Logger) (*Server, chan error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := net.LookupPort("tcp", port)
	srv := New(tb.b, Options{ClusterID: "stele-test", AutoCreateTopics: true, DataDir: "/tmp",
		AdvertisedHost: host, AdvertisedPort: int32(p), Logger: log})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return srv, errc
}

// TestAcceptOutOfFilesBacksOff: Accept failing with EMFILE (the process is
// out of file descriptors), ENFILE or ECONNABORTED does not end Serve: each
// failure is counted by reason, followed by a growing pause rather than a
// tight loop, and logged once for the whole run (and once more when it is
// over); then clients are served as before.
func TestAcceptOutOfFilesBacksOff(t *testing.T) {
	tb := startTestBroker(t, nil)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := []error{syscall.EMFILE, syscall.EMFILE, syscall.EMFILE, syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED}
	ln := &failingListener{Listener: inner, errs: errs}
	rec := &recordingHandler{}
	srv, errc := serveOn(t, tb, ln, slog.New(rec))

	cl := client(t, inner.Addr().String())
	if err := cl.Ping(ctx(t)); err != nil {
		t.Fatalf("no client served after the failed accepts: %v", err)
	}
	select {
	case err := <-errc:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
	for reason, want := range map[string]float64{"emfile": 4, "enfile": 1, "econnaborted": 1} {
		if got := testutil.ToFloat64(srv.metrics.acceptErrors.WithLabelValues(reason)); got != want {
			t.Errorf("stele_kafka_accept_errors_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	// The pauses double from 5 ms: 5+10+20+40+80 ms between the first
	// failure and the last, where a tight loop takes microseconds.
	ln.mu.Lock()
	spread := ln.times[len(ln.times)-1].Sub(ln.times[0])
	ln.mu.Unlock()
	if spread < 150*time.Millisecond {
		t.Errorf("%d failed accepts within %v: no backoff", len(errs), spread)
	}
	if n := rec.count("cannot accept"); n != 1 {
		t.Errorf("%d log lines for one run of %d failed accepts, want 1: %q", n, len(errs), rec.msgs)
	}
	if n := rec.count("accepts connections again"); n != 1 {
		t.Errorf("the end of the run logged %d times, want 1: %q", n, rec.msgs)
	}
}

// TestAcceptBrokenListenerEnds: an Accept error that is not temporary (the
// listener closed under Serve) still ends Serve with that error.
func TestAcceptBrokenListenerEnds(t *testing.T) {
	tb := startTestBroker(t, nil)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, errc := serveOn(t, tb, inner, nil)
	inner.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Serve: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve goes on with a closed listener")
	}
}

func TestAcceptErrorReason(t *testing.T) {
	op := func(err error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", err)}
	}
	for _, c := range []struct {
		err    error
		reason string
		retry  bool
	}{
		{op(syscall.EMFILE), "emfile", true},
		{op(syscall.ENFILE), "enfile", true},
		{op(syscall.ENOBUFS), "enobufs", true},
		{op(syscall.ECONNABORTED), "econnaborted", true},
		{op(syscall.EPROTO), "eproto", true},
		{op(os.ErrDeadlineExceeded), "timeout", true},
		{op(syscall.EBADF), "", false},
		{op(net.ErrClosed), "", false},
		{errors.New("boom"), "", false},
	} {
		reason, retry := acceptErrorReason(c.err)
		if reason != c.reason || retry != c.retry {
			t.Errorf("%v: reason %q retry %v, want %q %v", c.err, reason, retry, c.reason, c.retry)
		}
	}
}
