// Package kafka is Stele's Kafka wire-protocol front-end: it accepts client
// connections, frames and decodes requests with kmsg, answers them from the
// broker's committed state or by submitting commands to the broker, and
// writes responses in request order.
//
// Each API family lives in its own file, which opens with the versions served
// and what is not done. Only implemented APIs are advertised by ApiVersions.
//
// Behavior common to every API:
//   - A request frame larger than MaxRequestBytes, a frame that does not
//     decode, or an API key or version that is not served closes the
//     connection, as Apache Kafka does; ApiVersions with an unknown version
//     is answered with UNSUPPORTED_VERSION in the v0 format instead (KIP-511).
//   - A request frame's buffer starts at 64 KiB; once that has arrived it
//     is allocated at the frame's announced size if the frames being read
//     that way, over all connections, announce at most 64 MiB together,
//     and otherwise it doubles as bytes arrive, so memory follows what
//     clients sent, not the sizes they announced; a connection silent
//     for IdleTimeout (connections.max.idle.ms, 10 min) is closed.
//   - A client that takes no byte of a response for WriteTimeout (30 s;
//     it stopped reading) has its connection closed, so it cannot pin a
//     goroutine and the responses queued behind it; the deadline is
//     rearmed whenever bytes go out, so a slow reader is not cut off.
//   - max.connections (MaxConnections) and max.connections.per.ip
//     (MaxConnectionsPerIP, with MaxConnectionsPerIPOverrides) are Kafka's,
//     defaults included (2147483647: no limit). A connection from an
//     address that already has its maximum is closed at once, before any
//     request, and counted in stele_kafka_connections_refused_total; while
//     max.connections are open, no connection is accepted (new ones wait
//     in the listen backlog) until one closes, as Kafka's acceptor blocks,
//     and the time is counted in
//     stele_kafka_accept_blocked_seconds_total{reason="max_connections"}.
//   - max.connection.creation.rate (MaxConnectionCreationRate) is
//     Kafka's broker-wide connection rate quota, measured as Kafka does
//     (11 windows of 1 s): a connection accepted above the rate is held,
//     at most 1 s, before it is served, and the listener accepts nothing
//     meanwhile; none is refused. Counted in
//     stele_kafka_connections_throttled_total and
//     stele_kafka_accept_blocked_seconds_total{reason="connection_rate"}.
//     The four limits are the static layer: dynamic broker configs
//     replace them at run time (quotas.go, broker_configs.go) without
//     closing any connection already open.
//   - The listener leaves the process a reserve of file descriptors (a
//     tenth of RLIMIT_NOFILE, at least 64; Linux only) for storage and
//     consensus: while one more connection would eat into it, nothing is
//     accepted until connections close (fdBudget), counted in
//     stele_kafka_accept_blocked_seconds_total{reason="file_descriptors"}.
//   - An accept that fails because the process or the machine is out of
//     file descriptors (EMFILE, ENFILE) or buffers, or because a pending
//     connection broke (ECONNABORTED), is retried after a pause of 5 ms
//     doubling to 1 s, counted in stele_kafka_accept_errors_total and
//     logged at most every 10 s: the listener stays up, the connections
//     already open are served, and new ones are accepted again once
//     descriptors are free.
//   - Requests on one connection are started in order and answered in
//     order. Produce requests are handed to the broker in the order they
//     arrived, then the connection goes on reading while their blocks commit,
//     so a client's in-flight requests are pipelined.
package kafka

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/loglevel"
	"github.com/stele-io/stele/internal/sasl"
)

// Options configures the Kafka front-end.
type Options struct {
	// NodeID is this broker's Kafka node id.
	NodeID int32
	// AdvertisedHost and AdvertisedPort are what Metadata tells clients to
	// connect to; they default to the listener's address.
	AdvertisedHost string
	AdvertisedPort int32
	// ClusterID is reported by Metadata and DescribeCluster.
	ClusterID string
	// MaxRequestBytes is socket.request.max.bytes: larger frames close the
	// connection. Default 100 MiB.
	MaxRequestBytes int32
	// AutoCreateTopics is auto.create.topics.enable (default true in Kafka;
	// the zero value here is false, so server sets it explicitly).
	AutoCreateTopics bool
	// DefaultPartitions is num.partitions for auto-created topics and
	// CreateTopics with -1 partitions. Default 1.
	DefaultPartitions int32
	// DataDir is reported by DescribeLogDirs.
	DataDir string
	// Brokers is the cluster's genesis broker directory; empty for a
	// single node, which then describes only itself. The brokers the chain
	// added since come from the state (Server.directory).
	Brokers []BrokerInfo
	// LiveWindow is how recently a broker's validator must have signed a
	// block for Metadata to name it a partition leader. Default 10 s.
	LiveWindow time.Duration
	// CatchingUp reports whether this broker's state is known to be behind
	// the chain; reads are then refused with NOT_LEADER_OR_FOLLOWER. Nil
	// means never (a single node, tests).
	CatchingUp func() bool
	// Barrier returns once this broker has applied a block ordered after
	// the call began, so its state holds every write committed anywhere
	// before it; it fails when no such block comes before ctx ends (the
	// broker is cut off). A broker asks for one before answering what a
	// broker that is behind without knowing it would answer wrongly: a
	// fetch past its end, OffsetForLeaderEpoch, ListOffsets for the end.
	// Nil means never needed (a single validator is never behind).
	Barrier func(context.Context) error
	// Fatal is told of a fault after which this broker must stop serving
	// (damaged storage); nil only logs it.
	Fatal func(error)
	// MaxInflight bounds the requests one connection may have started but
	// not yet answered. Default 64.
	MaxInflight int
	// IdleTimeout is connections.max.idle.ms: a connection that sends no
	// byte for this long is closed (clients reconnect). Default 10 min.
	IdleTimeout time.Duration
	// WriteTimeout bounds how long a response may wait for its client to
	// take any of its bytes: a connection whose client has taken nothing
	// for this long (it stopped reading) is closed, freeing its goroutines
	// and the responses queued behind it. The deadline is rearmed whenever
	// bytes go out, so a slow reader is cut off only after taking nothing
	// for a whole period (between one and two of them after its last
	// read). Kafka has no such setting (its idle timer,
	// connections.max.idle.ms, closes such a connection after 10 min);
	// the default, 30 s, is Kafka clients' request.timeout.ms, after which
	// a client that is still there has given up on the request itself.
	WriteTimeout time.Duration
	// MaxConnections is max.connections: while this many connections are
	// open the listener accepts no other until one closes (new ones wait
	// in the kernel's listen backlog), as Kafka's acceptor blocks.
	// Default 2147483647, Kafka's: no limit.
	MaxConnections int
	// MaxConnectionsPerIP is max.connections.per.ip: a new connection
	// from an address that already has this many open is closed at once.
	// Default 2147483647, Kafka's: no limit.
	MaxConnectionsPerIP int
	// MaxConnectionsPerIPOverrides is max.connections.per.ip.overrides
	// with its host names resolved: limits per address that replace
	// MaxConnectionsPerIP (0 refuses every connection from it).
	MaxConnectionsPerIPOverrides map[netip.Addr]int
	// MaxConnectionCreationRate is max.connection.creation.rate: a new
	// connection that takes the rate of accepted ones above this many a
	// second (over Kafka's 11 windows of 1 s) is held, at most 1 s,
	// before it is served, and nothing else is accepted meanwhile, as
	// Kafka's acceptor waits; none is refused. Default 2147483647,
	// Kafka's: no limit. 0 here is the default; the dynamic config may be
	// 0 (Kafka's one-a-second).
	MaxConnectionCreationRate int
	Logger                    *slog.Logger
	// LogLevels are the levels of Logger's components, which BROKER_LOGGER
	// resources describe and change (nil: only a root logger, whose level
	// changes nothing).
	LogLevels  *loglevel.Levels
	Registerer prometheus.Registerer
	// OAuth validates OAUTHBEARER tokens (nil: OAUTHBEARER is refused).
	OAuth *sasl.OAuthValidator
	// MaxReauth is connections.max.reauth.ms: a SASL session's lifetime,
	// after which the client re-authenticates (KIP-368). 0: never.
	MaxReauth time.Duration
	// SuperUsers are Kafka's super.users, principals ("User:alice"); the
	// admin user (AdminUser) is always one.
	SuperUsers []string
	// DenyIfNoACL is allow.everyone.if.no.acl.found=false: a resource no
	// ACL applies to is denied to all but super users (acls.go). The
	// server sets it when a listener authenticates its clients; false
	// (the zero value) leaves a broker without ACLs open to all.
	DenyIfNoACL bool
}

func (o *Options) setDefaults() {
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 100 << 20
	}
	if o.DefaultPartitions <= 0 {
		o.DefaultPartitions = 1
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 64
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 10 * time.Minute
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = defaultMaxConnections
	}
	if o.MaxConnectionsPerIP <= 0 {
		o.MaxConnectionsPerIP = defaultMaxConnections
	}
	if o.MaxConnectionCreationRate <= 0 {
		o.MaxConnectionCreationRate = defaultMaxConnections
	}
	// Addresses as remoteIP gives them, in a copy the caller cannot change.
	overrides := make(map[netip.Addr]int, len(o.MaxConnectionsPerIPOverrides))
	for a, n := range o.MaxConnectionsPerIPOverrides {
		overrides[a.Unmap().WithZone("")] = n
	}
	o.MaxConnectionsPerIPOverrides = overrides
	if o.LiveWindow <= 0 {
		o.LiveWindow = defaultLiveWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LogLevels == nil {
		o.LogLevels = loglevel.New(slog.LevelInfo)
	}
}

// Server serves the Kafka protocol for one broker.
type Server struct {
	opts    Options
	b       *broker.Broker
	routes  map[int16]route
	metrics *metrics
	// tenantMetrics are the per-tenant metrics (tenant_metrics.go).
	tenantMetrics *tenantMetrics
	quotas        *connQuotas
	fds           *fdBudget // shared by the listeners' Serve goroutines
	// bodies bounds the request bytes read ahead of their arrival
	// (readRequestBody).
	bodies bodyReserve
	// dir is the broker directory, derived once per membership change
	// (cluster.go).
	dir atomic.Pointer[directoryView]
	// saslSecret derives the salts SCRAM answers for unknown users
	// (sasl.NewScramServer); failed limits password guessing (sasl.go).
	saslSecret []byte
	failed     failedLogins
	// quotaSensors measure the client quotas (throttle.go).
	quotaSensors quotaSensors
	// tenantConns count each tenant's connections (tenant_quotas.go).
	tenantConns tenantConns
	// shareSessions are the share sessions of share group members
	// (share_groups.go).
	shareSessions shareSessions
	// fetchModules are the fetch plugins' modules (fetch_plugins.go).
	fetchModules fetchModules
	// ipSensors measure each address's connection creation rate against
	// its ip quota (accept.go); ipHeld counts the connections held
	// before being closed for it.
	ipSensors ipSensors
	ipHeld    atomic.Int64
	// connRate is the broker-wide connection creation rate sensor
	// (max.connection.creation.rate), which every listener counts in.
	connRate struct {
		sync.Mutex
		r connRate
	}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		lns   []net.Listener
		conns map[*conn]struct{}
	}
}

// New creates a Kafka front-end over b.
func New(b *broker.Broker, opts Options) *Server {
	opts.setDefaults()
	s := &Server{opts: opts, b: b}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.conns = map[*conn]struct{}{}
	s.routes = map[int16]route{}
	s.saslSecret = make([]byte, 32)
	rand.Read(s.saslSecret)
	for _, group := range [][]route{coreRoutes(), saslRoutes(), userRoutes(), aclRoutes(), quotaRoutes(), adminRoutes(), groupRoutes(), group848Routes(), shareRoutes(), shareOffsetRoutes(), producerRoutes(), txnRoutes()} {
		for _, r := range group {
			s.routes[r.key] = r
		}
	}
	s.metrics = newMetrics(opts.Registerer)
	s.tenantMetrics = newTenantMetrics(b, &s.tenantConns)
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.tenantMetrics)
	}
	s.quotas = newConnQuotas(&s.opts)
	s.fds = newFDBudget()
	s.wg.Add(1)
	go s.followBrokerConfigs()
	return s
}

// Listener is one listener a Server serves (ServeListener).
type Listener struct {
	// Name is the listener's name in Kafka's syntax (PLAINTEXT, SSL).
	Name string
	// AdvertisedHost and AdvertisedPort are what Metadata,
	// DescribeCluster and FindCoordinator answer on this listener for
	// this broker when the cluster has no broker directory (a single
	// node); default: the listener's bound address. With a directory
	// the brokers' directory addresses are answered, so a node of a
	// cluster serves one listener.
	AdvertisedHost string
	AdvertisedPort int32
	// TLS makes it a TLS listener; Principals maps its clients'
	// certificate subjects to principals (Kafka's
	// ssl.principal.mapping.rules; nil: DEFAULT).
	TLS        *listener.TLS
	Principals *listener.PrincipalMapper
	// SASLMechanisms, when not nil, makes it a SASL listener
	// (SASL_PLAINTEXT, SASL_SSL) with these mechanisms enabled (Kafka's
	// sasl.enabled.mechanisms; sasl.go).
	SASLMechanisms []string
}

// Serve serves ln as the one PLAINTEXT listener (ServeListener), with the
// options' advertised address, which it fills in from ln when the options
// left it empty.
func (s *Server) Serve(ln net.Listener) error {
	if s.opts.AdvertisedHost == "" || s.opts.AdvertisedPort == 0 {
		host, port, err := splitAddr(ln)
		if err != nil {
			return err
		}
		if s.opts.AdvertisedHost == "" {
			s.opts.AdvertisedHost = host
		}
		if s.opts.AdvertisedPort == 0 {
			s.opts.AdvertisedPort = port
		}
	}
	return s.ServeListener(ln, Listener{Name: "PLAINTEXT", AdvertisedHost: s.opts.AdvertisedHost, AdvertisedPort: s.opts.AdvertisedPort})
}

func splitAddr(ln net.Listener) (string, int32, error) {
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return "", 0, fmt.Errorf("stele/kafka: listener address: %w", err)
	}
	p, _ := strconv.Atoi(port)
	return host, int32(p), nil
}

// ServeListener accepts connections on ln until Close, as the listener l
// (its advertised address filled in from ln where empty). Several
// listeners share the broker's connection limits, its connection creation
// rate and its file descriptor budget. An Accept that fails for want of
// file descriptors or buffers, or because one pending connection broke,
// is counted, logged at most every 10 s and retried after a pause of 5 ms
// doubling up to 1 s, as net/http does; ServeListener returns only for an
// error after which ln cannot work (it was closed under it).
func (s *Server) ServeListener(ln net.Listener, l Listener) error {
	if l.AdvertisedHost == "" || l.AdvertisedPort == 0 {
		host, port, err := splitAddr(ln)
		if err != nil {
			return err
		}
		if l.AdvertisedHost == "" {
			l.AdvertisedHost = host
		}
		if l.AdvertisedPort == 0 {
			l.AdvertisedPort = port
		}
	}
	if l.TLS != nil && l.Principals == nil {
		l.Principals, _ = listener.ParsePrincipalMappingRules("")
	}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.mu.lns = append(s.mu.lns, ln)
	s.mu.Unlock()
	every := sparseLog{every: acceptLogEvery}
	a := acceptor{s: s, refusals: every, waits: every, fdWaits: every, throttles: every}
	for {
		if !a.waitForSlot() {
			return nil
		}
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			reason, retry := acceptErrorReason(err)
			if !retry {
				return fmt.Errorf("stele/kafka: accept: %w", err)
			}
			if !a.failed(err, reason) {
				return nil // closed while pausing
			}
			continue
		}
		a.accepted()
		// max.connection.creation.rate: counted, then held if it takes the
		// rate above the limit (Kafka's ConnectionQuotas.inc records the
		// rate first, then waits for the throttle and a slot).
		if !a.throttle() {
			nc.Close()
			return nil
		}
		// max.connections may have been lowered while Accept waited: the
		// accepted connection then waits for a slot, as in Kafka's
		// ConnectionQuotas.inc.
		if !a.waitForSlot() {
			nc.Close()
			return nil
		}
		ip := remoteIP(nc)
		if wait := s.ipThrottle(ip); wait > 0 {
			a.holdThenClose(nc, ip, wait)
			continue
		}
		if limit, ok := s.quotas.admit(ip); !ok {
			a.refuse(nc, ip, limit)
			continue
		}
		s.fds.sawAccept(nc)
		c := newConn(s, &l, nc)
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			nc.Close()
			s.quotas.release(ip)
			return nil
		}
		s.mu.conns[c] = struct{}{}
		s.mu.Unlock()
		s.metrics.connections.Inc()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.mu.conns, c)
			s.mu.Unlock()
			s.quotas.release(ip)
			s.metrics.connections.Dec()
		}()
	}
}

// Addr is the advertised host and port.
func (s *Server) Addr() (string, int32) { return s.opts.AdvertisedHost, s.opts.AdvertisedPort }

// Close stops accepting, closes every connection and waits for them.
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	for _, ln := range s.mu.lns {
		ln.Close()
	}
	for c := range s.mu.conns {
		c.raw.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.fetchModules.close()
	return nil
}
