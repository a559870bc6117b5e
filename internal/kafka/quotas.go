package kafka

import (
	"context"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// defaultMaxConnections is Kafka's default for max.connections and
// max.connections.per.ip: Int.MaxValue, no limit.
const defaultMaxConnections = math.MaxInt32

// connQuotas counts open connections against max.connections,
// max.connections.per.ip and max.connections.per.ip.overrides, as Kafka's
// ConnectionQuotas does. Only Serve's goroutine adds connections (admit);
// each connection's goroutine removes its own (release).
type connQuotas struct {
	max       int
	perIP     int
	overrides map[netip.Addr]int
	mu        struct {
		sync.Mutex
		total int
		byIP  map[netip.Addr]int
		// freed, when not nil, is closed by the next release: Serve
		// waits on it for a slot under max.connections.
		freed chan struct{}
	}
}

// newConnQuotas applies o, whose defaults are set (so its overrides are
// keyed by addresses as remoteIP gives them).
func newConnQuotas(o *Options) *connQuotas {
	q := &connQuotas{max: o.MaxConnections, perIP: o.MaxConnectionsPerIP, overrides: o.MaxConnectionsPerIPOverrides}
	q.mu.byIP = map[netip.Addr]int{}
	return q
}

// waitForSlot returns once fewer than max connections are open, after
// calling blocked once if it has to wait. It reports how long it waited,
// and false if ctx ended first. Waiting before Accept leaves the next
// connection in the kernel's backlog, holding no file descriptor here.
func (q *connQuotas) waitForSlot(ctx context.Context, blocked func()) (time.Duration, bool) {
	var start time.Time
	for {
		q.mu.Lock()
		if q.mu.total < q.max {
			q.mu.Unlock()
			if start.IsZero() {
				return 0, true
			}
			return time.Since(start), true
		}
		freed := q.nextReleaseLocked()
		q.mu.Unlock()
		if start.IsZero() {
			start = time.Now()
			blocked()
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return time.Since(start), false
		}
	}
}

// nextRelease is closed when a connection is next released.
func (q *connQuotas) nextRelease() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nextReleaseLocked()
}

func (q *connQuotas) nextReleaseLocked() chan struct{} {
	if q.mu.freed == nil {
		q.mu.freed = make(chan struct{})
	}
	return q.mu.freed
}

// admit counts a new connection from ip, unless ip already has as many as
// its limit allows; it returns that limit.
func (q *connQuotas) admit(ip netip.Addr) (int, bool) {
	limit, ok := q.overrides[ip]
	if !ok {
		limit = q.perIP
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.byIP[ip] >= limit {
		return limit, false
	}
	q.mu.byIP[ip]++
	q.mu.total++
	return limit, true
}

// release uncounts a connection admit counted, and wakes Serve if it waits
// for a slot.
func (q *connQuotas) release(ip netip.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.byIP[ip]--; q.mu.byIP[ip] <= 0 {
		delete(q.mu.byIP, ip)
	}
	q.mu.total--
	if q.mu.freed != nil {
		close(q.mu.freed)
		q.mu.freed = nil
	}
}

// open is the number of connections counted now.
func (q *connQuotas) open() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.total
}

// remoteIP is the address a connection's quota is counted under: its
// peer's IP, IPv4-mapped IPv6 addresses as IPv4, without an IPv6 zone.
// Connections that do not
// come over IP share the zero Addr.
func remoteIP(nc net.Conn) netip.Addr {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}
