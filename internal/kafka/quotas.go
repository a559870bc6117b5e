package kafka

import (
	"context"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// defaultMaxConnections is Kafka's default for max.connections and
// max.connections.per.ip: Int.MaxValue, no limit.
const defaultMaxConnections = math.MaxInt32

// connQuotas counts open connections against max.connections,
// max.connections.per.ip and max.connections.per.ip.overrides, as Kafka's
// ConnectionQuotas does, and holds max.connection.creation.rate for
// Serve's rate sensor (connrate.go). Only Serve's goroutine adds
// connections (admit); each connection's goroutine removes its own
// (release); the limits change at run time (reconfigure, from the dynamic
// broker configs) without touching the connections open: as in Kafka, a
// lowered limit closes none of them, it refuses or holds back the next
// ones.
type connQuotas struct {
	mu struct {
		sync.Mutex
		max       int
		perIP     int
		rate      int                // max.connection.creation.rate
		overrides map[netip.Addr]int // never modified: replaced whole
		total     int
		byIP      map[netip.Addr]int
		// freed, when not nil, is closed by the next release: Serve
		// waits on it for a slot under max.connections.
		freed chan struct{}
	}
}

// newConnQuotas applies o, whose defaults are set (so its overrides are
// keyed by addresses as remoteIP gives them).
func newConnQuotas(o *Options) *connQuotas {
	q := &connQuotas{}
	q.mu.max, q.mu.perIP, q.mu.overrides = o.MaxConnections, o.MaxConnectionsPerIP, o.MaxConnectionsPerIPOverrides
	q.mu.rate = o.MaxConnectionCreationRate
	q.mu.byIP = map[netip.Addr]int{}
	return q
}

// connLimits are the limits connQuotas applies.
type connLimits struct {
	max, perIP int
	rate       int                // max.connection.creation.rate
	overrides  map[netip.Addr]int // keyed as remoteIP gives addresses
}

// limits returns the limits applied now.
func (q *connQuotas) limits() connLimits {
	q.mu.Lock()
	defer q.mu.Unlock()
	return connLimits{max: q.mu.max, perIP: q.mu.perIP, rate: q.mu.rate, overrides: q.mu.overrides}
}

// reconfigure applies new limits to the connections accepted from now on,
// and wakes Serve if it waits for a slot under max.connections (Kafka's
// updateBrokerMaxConnections notifies its waiting acceptors).
func (q *connQuotas) reconfigure(l connLimits) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.max, q.mu.perIP, q.mu.overrides = l.max, l.perIP, l.overrides
	q.mu.rate = l.rate
	q.wakeLocked()
}

func (q *connQuotas) wakeLocked() {
	if q.mu.freed != nil {
		close(q.mu.freed)
		q.mu.freed = nil
	}
}

// waitForSlot returns once fewer than max connections are open, after
// calling blocked once if it has to wait. It reports how long it waited,
// and false if ctx ended first. Waiting before Accept leaves the next
// connection in the kernel's backlog, holding no file descriptor here.
func (q *connQuotas) waitForSlot(ctx context.Context, blocked func()) (time.Duration, bool) {
	var start time.Time
	for {
		q.mu.Lock()
		if q.mu.total < q.mu.max {
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
	q.mu.Lock()
	defer q.mu.Unlock()
	limit, ok := q.mu.overrides[ip]
	if !ok {
		limit = q.mu.perIP
	}
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
	q.wakeLocked()
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

// followBrokerConfigs applies the committed dynamic broker configs to the
// connection limits, at start and after every Commit that changed them,
// until the server closes (Close waits for it). Kafka's SocketServer
// reconfigures its ConnectionQuotas the same way when a config record
// arrives.
func (s *Server) followBrokerConfigs() {
	defer s.wg.Done()
	var last *fsm.BrokerConfigs
	for {
		changed := s.b.Changed() // before reading, so no commit is missed
		if bc := s.b.BrokerConfigs(); bc != last || last == nil {
			last = bc
			s.applyConnectionLimits(bc)
		}
		select {
		case <-changed:
		case <-s.ctx.Done():
			return
		}
	}
}

// applyConnectionLimits gives the acceptor the limits bc makes effective
// for this broker, logging those that changed.
func (s *Server) applyConnectionLimits(bc *fsm.BrokerConfigs) {
	next := s.effectiveLimits(bc)
	was := s.quotas.limits()
	if next.max == was.max && next.perIP == was.perIP && next.rate == was.rate && maps.Equal(next.overrides, was.overrides) {
		return
	}
	s.quotas.reconfigure(next)
	s.opts.Logger.Info("connection limits changed (dynamic broker configs)",
		"max_connections", next.max, "max_connections_per_ip", next.perIP, "max_connection_creation_rate", next.rate,
		"max_connections_per_ip_overrides", formatOverrides(next.overrides))
}

// effectiveLimits are this broker's connection limits: for each, the
// broker's own dynamic value, else the cluster-wide dynamic default, else
// the static option (which holds Kafka's default when not given), as
// Kafka's DynamicBrokerConfig layers them. A dynamic override naming a
// host is resolved now; one that does not resolve is left out and
// logged (Kafka would refuse the whole value).
func (s *Server) effectiveLimits(bc *fsm.BrokerConfigs) connLimits {
	l := connLimits{max: s.opts.MaxConnections, perIP: s.opts.MaxConnectionsPerIP, rate: s.opts.MaxConnectionCreationRate,
		overrides: s.opts.MaxConnectionsPerIPOverrides}
	num := func(name string, static int) int {
		v, _, ok := bc.Effective(s.opts.NodeID, name)
		if !ok {
			return static
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil { // the state machine checked it; never here
			return static
		}
		return n
	}
	l.max = num(fsm.MaxConnectionsConfig, l.max)
	l.perIP = num(fsm.MaxConnectionsPerIPConfig, l.perIP)
	l.rate = num(fsm.MaxConnectionCreationRateConfig, l.rate)
	if v, _, ok := bc.Effective(s.opts.NodeID, fsm.MaxConnectionsPerIPOverridesConfig); ok {
		l.overrides = s.resolveOverrides(v)
	}
	return l
}

// resolveOverrides turns a dynamic max.connections.per.ip.overrides into
// limits per address, as the static flag's are: an address named keeps
// its limit; one that host names resolve to gets the lowest of theirs.
func (s *Server) resolveOverrides(value string) map[netip.Addr]int {
	parsed, err := fsm.ParseConnectionOverrides(value)
	out, named := map[netip.Addr]int{}, map[netip.Addr]bool{}
	if err != nil { // the state machine checked it; never here
		return out
	}
	hosts := make([]string, 0, len(parsed))
	for h := range parsed {
		if a, err := netip.ParseAddr(h); err == nil {
			a = a.Unmap().WithZone("")
			out[a], named[a] = parsed[h], true
		} else {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		cancel()
		if err != nil {
			s.opts.Logger.Warn("max.connections.per.ip.overrides: a host does not resolve; its limit is not applied",
				"host", h, "err", err)
			continue
		}
		for _, a := range addrs {
			a = a.Unmap().WithZone("")
			if named[a] {
				continue
			}
			if old, ok := out[a]; !ok || parsed[h] < old {
				out[a] = parsed[h]
			}
		}
	}
	return out
}

// formatOverrides is overrides as max.connections.per.ip.overrides
// describes them: address:count, by address.
func formatOverrides(overrides map[netip.Addr]int) string {
	addrs := make([]netip.Addr, 0, len(overrides))
	for a := range overrides {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = a.String() + ":" + strconv.Itoa(overrides[a])
	}
	return strings.Join(parts, ",")
}
