package kafka

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Failed accepts are retried after a pause that doubles from
// minAcceptDelay to maxAcceptDelay, as net/http's Server.Serve does, and
// logged at most once per acceptLogEvery.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
	acceptLogEvery = 10 * time.Second
)

// retriedAcceptErrnos are the errors of accept(2) after which the listener
// still works: the process (EMFILE) or the machine (ENFILE, ENOBUFS,
// ENOMEM) is out of a resource that closing connections gives back, or one
// pending connection failed before it was accepted (ECONNABORTED, and the
// network errors Linux's accept(2) page says to treat like EAGAIN). Their
// lower-case names are the reason label of stele_kafka_accept_errors_total.
var retriedAcceptErrnos = map[syscall.Errno]string{
	syscall.EMFILE:       "emfile",
	syscall.ENFILE:       "enfile",
	syscall.ENOBUFS:      "enobufs",
	syscall.ENOMEM:       "enomem",
	syscall.ECONNABORTED: "econnaborted",
	syscall.ECONNRESET:   "econnreset",
	syscall.EINTR:        "eintr",
	syscall.EPERM:        "eperm", // a firewall rule refused the connection
	syscall.EPROTO:       "eproto",
	syscall.ENOPROTOOPT:  "enoprotoopt",
	syscall.ENETDOWN:     "enetdown",
	syscall.ENETUNREACH:  "enetunreach",
	syscall.EHOSTDOWN:    "ehostdown",
	syscall.EHOSTUNREACH: "ehostunreach",
	syscall.EOPNOTSUPP:   "eopnotsupp",
	syscall.ETIMEDOUT:    "etimedout",
}

// acceptErrorReason says whether Serve should retry after an Accept error,
// and under which reason label it is counted. Errors it does not know (the
// listener was closed under Serve, a file descriptor that is not a socket)
// end Serve, as they do net/http's.
func acceptErrorReason(err error) (string, bool) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name, ok := retriedAcceptErrnos[errno]; ok {
			return name, true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return "timeout", true
		}
		// Deprecated in net, but how a wrapping listener (a proxy, a
		// test) still says "try again", and what net/http goes by.
		if ne.Temporary() {
			return "temporary", true
		}
	}
	return "", false
}

// acceptor is what one listener's Serve remembers between accepts: its
// backoff and what it has logged. Only that Serve's goroutine uses it.
type acceptor struct {
	s     *Server
	delay time.Duration // the pause before the next Accept after a failure
	// A run is the failed accepts since the last one that succeeded.
	run       int
	runStart  time.Time
	announced bool // this run has been logged, so its end will be too
	lastLog   time.Time
	unlogged  int // failed accepts since the last line logged
	// refusals, waits, fdWaits and throttles hold back the log lines of
	// connections refused for max.connections.per.ip, of waits for
	// max.connections, of waits for file descriptors and of connections
	// held for max.connection.creation.rate.
	refusals, waits, fdWaits, throttles sparseLog
}

// failed counts a failed Accept, logs it unless a line was logged in the
// last acceptLogEvery, and pauses before the next attempt. It reports false
// when the server closed during the pause.
func (a *acceptor) failed(err error, reason string) bool {
	now := time.Now()
	a.s.metrics.acceptErrors.WithLabelValues(reason).Inc()
	if reason == "emfile" || reason == "enfile" {
		a.s.fds.markStale() // count them before the next attempt
	}
	if a.run == 0 {
		a.runStart = now
	}
	a.run++
	a.unlogged++
	a.delay = min(max(2*a.delay, minAcceptDelay), maxAcceptDelay)
	if a.lastLog.IsZero() || now.Sub(a.lastLog) >= acceptLogEvery {
		attrs := []any{"reason", reason, "err", err, "failed_accepts", a.unlogged,
			"failing_for", now.Sub(a.runStart).Round(time.Millisecond), "retry_in", a.delay}
		switch reason {
		case "emfile":
			attrs = append(attrs, "hint", "this process is out of file descriptors: raise its limit (ulimit -n, systemd's LimitNOFILE) or lower max.connections")
		case "enfile":
			attrs = append(attrs, "hint", "the machine is out of file descriptors (fs.file-max)")
		}
		a.s.opts.Logger.Warn("kafka listener cannot accept a connection; retrying", attrs...)
		a.lastLog, a.unlogged, a.announced = now, 0, true
	}
	return a.sleep(a.delay)
}

// sleep waits d; it reports false when the server closed meanwhile.
func (a *acceptor) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-a.s.ctx.Done():
		return false
	}
}

// accepted ends a run of failures: the backoff starts over, and a run that
// was logged is logged as over.
func (a *acceptor) accepted() {
	a.delay = 0
	if a.run == 0 {
		return
	}
	if a.announced {
		a.s.opts.Logger.Info("kafka listener accepts connections again",
			"failed_accepts", a.run, "failed_for", time.Since(a.runStart).Round(time.Millisecond))
	}
	a.run, a.announced = 0, false
}

// waitForSlot waits until fewer than max.connections connections are open,
// counting and logging (at most every acceptLogEvery) the waits. It
// reports false when the server closed meanwhile.
func (a *acceptor) waitForSlot() bool {
	waited, ok := a.s.quotas.waitForSlot(a.s.ctx, func() {
		if held, ok := a.waits.allow(time.Now()); ok {
			a.s.opts.Logger.Info("max.connections connections are open: accepting none until one closes",
				"max_connections", a.s.quotas.limits().max, "waits_not_logged", held)
		}
	})
	if waited > 0 {
		a.s.metrics.acceptBlocked.WithLabelValues("max_connections").Add(waited.Seconds())
	}
	if !ok {
		return false
	}
	return a.waitForDescriptors()
}

// throttle counts a just-accepted connection against
// max.connection.creation.rate and, when it takes the rate above the
// limit, holds it (and with it the listener) for the time Kafka's sensor
// gives, at most connRateMaxWait, counting and logging (at most every
// acceptLogEvery) the waits. As in Kafka, a limit changed during a wait
// does not shorten it. It reports false when the server closed meanwhile.
func (a *acceptor) throttle() bool {
	limit := a.s.quotas.limits().rate
	a.s.connRate.Lock()
	wait := a.s.connRate.r.record(time.Now(), limit)
	a.s.connRate.Unlock()
	if wait <= 0 {
		return true
	}
	a.s.metrics.throttled.Inc()
	a.s.metrics.acceptBlocked.WithLabelValues("connection_rate").Add(wait.Seconds())
	if held, ok := a.throttles.allow(time.Now()); ok {
		a.s.opts.Logger.Info("connections arrive faster than max.connection.creation.rate: holding one before serving it",
			"max_connection_creation_rate", limit, "wait", wait, "throttles_not_logged", held)
	}
	return a.sleep(wait)
}

// waitForDescriptors waits until accepting one more connection would leave
// the process its reserve of file descriptors (fdBudget), counting the
// descriptors again whenever a connection closes and at least every
// second. It reports false when the server closed meanwhile.
func (a *acceptor) waitForDescriptors() bool {
	if a.s.fds.enough(time.Now()) {
		return true
	}
	start := time.Now()
	defer func() { a.s.metrics.acceptBlocked.WithLabelValues("file_descriptors").Add(time.Since(start).Seconds()) }()
	if held, ok := a.fdWaits.allow(start); ok {
		room, reserve := a.s.fds.state()
		a.s.opts.Logger.Warn("few file descriptors are left: the kafka listener accepts no connection until some close",
			"can_open", room, "reserve", reserve, "kafka_connections", a.s.quotas.open(), "waits_not_logged", held,
			"hint", "raise the process's limit (ulimit -n, systemd's LimitNOFILE) or lower max.connections")
	}
	for {
		t := time.NewTimer(time.Second)
		select {
		case <-a.s.quotas.nextRelease():
		case <-t.C:
		case <-a.s.ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
		a.s.fds.markStale()
		if a.s.fds.enough(time.Now()) {
			return true
		}
	}
}

// refuse closes a connection from an address that already has its maximum
// of connections (max.connections.per.ip or its override), as Kafka does,
// counting it and logging it at most every acceptLogEvery.
func (a *acceptor) refuse(nc net.Conn, ip netip.Addr, limit int) {
	a.s.metrics.refused.WithLabelValues("max_connections_per_ip").Inc()
	nc.Close()
	if held, ok := a.refusals.allow(time.Now()); ok {
		a.s.opts.Logger.Info("refused a kafka connection: its address already has the maximum of connections (max.connections.per.ip)",
			"ip", ip.String(), "max", limit, "refused_not_logged", held)
	}
}

// sparseLog lets a log line through at most once per every and counts the
// ones it held back.
type sparseLog struct {
	every time.Duration
	last  time.Time
	held  int
}

// allow reports whether to log now and how many lines were held back
// since the last one let through.
func (l *sparseLog) allow(now time.Time) (held int, ok bool) {
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.held++
		return 0, false
	}
	held, l.held, l.last = l.held, 0, now
	return held, true
}

// IP quotas (KIP-612): connection_creation_rate per client address, or
// the default's, replicated state (fsm/security's ip_quotas.go). Each accepted
// connection is counted against its address's quota on Kafka's sensor
// (11 windows of 1 s); one that takes the rate over the quota is held for
// the throttle time, at most the 11 s the rate spans, then closed, as
// Kafka's acceptor closes a throttled address's connections, and counted
// in stele_kafka_connections_refused_total{reason="connection_creation_rate"}.
// At most maxIPHeld connections are held at once; beyond, they are closed
// at once.

const maxIPHeld = 1024

type ipSensors struct {
	mu sync.Mutex
	m  map[netip.Addr]*quotaSensor
}

// ipThrottle counts a connection from ip and returns how long it must be
// held (0: none, or no quota applies).
func (s *Server) ipThrottle(ip netip.Addr) time.Duration {
	q := s.b.IPQuotas()
	if q.Empty() || !ip.IsValid() {
		return 0
	}
	limit, ok := q.ConnectionCreationRate(ip)
	if !ok {
		return 0
	}
	ip = ip.Unmap()
	now := time.Now()
	is := &s.ipSensors
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.m == nil {
		is.m = map[netip.Addr]*quotaSensor{}
	}
	sn := is.m[ip]
	if sn == nil {
		if len(is.m) >= maxQuotaSensors {
			var oldest netip.Addr
			var at time.Time
			for a, x := range is.m {
				if at.IsZero() || x.used.Before(at) {
					oldest, at = a, x.used
				}
			}
			delete(is.m, oldest)
		}
		sn = &quotaSensor{}
		is.m[ip] = sn
	}
	sn.used = now
	return sn.rate.recordN(now, 1, limit, quotaMaxThrottle)
}

// holdThenClose holds a connection over its address's ip quota for wait,
// then closes it, without holding the listener.
func (a *acceptor) holdThenClose(nc net.Conn, ip netip.Addr, wait time.Duration) {
	s := a.s
	s.metrics.refused.WithLabelValues("connection_creation_rate").Inc()
	if held, ok := a.throttles.allow(time.Now()); ok {
		s.opts.Logger.Info("closing a kafka connection after its ip quota's throttle: its address connects faster than its connection_creation_rate",
			"ip", ip.String(), "throttle", wait, "throttles_not_logged", held)
	}
	if s.ipHeld.Add(1) > maxIPHeld {
		s.ipHeld.Add(-1)
		nc.Close()
		return
	}
	go func() {
		defer s.ipHeld.Add(-1)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
		nc.Close()
	}()
}
