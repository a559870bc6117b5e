// Package server wires one Stele node together and runs it: configuration,
// then storage and the state machine, then consensus, then the front-ends;
// shutdown runs the same steps backwards. Each step of opening the state
// before /healthz answers logs one info line with its duration
// (docs/running.md, "Metrics and health").
//
// server may import every internal package except cli.
package server

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/dataplane"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/kafka"
	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/loglevel"
	"github.com/stele-io/stele/internal/sasl"
)

// Config is a node's configuration.
type Config struct {
	// DataDir holds everything the node keeps: cometbft/ (CometBFT's home:
	// keys, genesis, blocks), logs/ (partition logs), meta/ (Pebble).
	DataDir string
	// KafkaAddr is the Kafka listener, HTTPAddr the HTTP one.
	KafkaAddr string
	HTTPAddr  string
	// AdvertisedKafka is the host:port Metadata tells clients to use
	// (default: the Kafka listener's address).
	AdvertisedKafka string
	// Listeners, when set, are the Kafka listeners in Kafka's syntax
	// (`SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092`; --listeners),
	// in place of the one PLAINTEXT listener at KafkaAddr. A single node
	// may serve several, each advertising its own address; a node of a
	// cluster serves one, the address its genesis names. SASL_PLAINTEXT
	// and SASL_SSL authenticate with SASLMechanisms.
	Listeners string
	// ListenerProtocolMap is Kafka's listener.security.protocol.map
	// (--listener-security-protocol-map, INTERNAL:PLAINTEXT,EXTERNAL:SSL):
	// the security protocols of listeners named otherwise.
	ListenerProtocolMap string
	// AdvertisedListeners is Kafka's advertised.listeners
	// (--advertised-listeners): what Metadata tells the clients of each
	// listener to connect to; a listener it does not name advertises its
	// bound address (the first one --advertise, if given).
	AdvertisedListeners string
	// SASLMechanisms are Kafka's sasl.enabled.mechanisms for the SASL
	// listeners (--sasl-enabled-mechanisms; DefaultSASLMechanisms).
	SASLMechanisms []string
	// SuperUsers are Kafka's super.users (--super-users), principals such
	// as User:alice; the admin user is always one.
	SuperUsers []string
	// AdminPasswordFile (--admin-password-file) holds the password of the
	// super user admin, created with SCRAM credentials (which PLAIN logins
	// are checked against too) when the state has no such user.
	AdminPasswordFile string
	// AllowEveryoneIfNoACL is allow.everyone.if.no.acl.found
	// (--allow-everyone-if-no-acl-found): whether a resource no ACL
	// applies to is allowed to all. nil: false when a listener
	// authenticates its clients (SASL, or SSL requiring certificates),
	// true otherwise, so a broker nobody logs in to stays open.
	AllowEveryoneIfNoACL *bool
	// OAuth validates OAUTHBEARER tokens: Kafka's
	// sasl.oauthbearer.jwks.endpoint.url (a file), expected.issuer,
	// expected.audience and sub.claim.name
	// (--sasl-oauthbearer-jwks-file and the like).
	OAuth sasl.OAuthConfig
	// MaxReauth is connections.max.reauth.ms (--connections-max-reauth-ms):
	// a SASL session's lifetime, after which clients re-authenticate
	// (KIP-368); 0 never.
	MaxReauth time.Duration
	// TLS are the PEM files of the SSL listeners (--ssl-cert, --ssl-key,
	// --ssl-ca, --ssl-client-auth), reloaded when they change.
	TLS listener.TLSFiles
	// PrincipalMappingRules are Kafka's ssl.principal.mapping.rules for
	// TLS client certificates (--ssl-principal-mapping-rules).
	PrincipalMappingRules string
	// HTTPTLS serves the HTTP API over TLS with the SSL listeners'
	// certificate and client authentication (--http-tls): HTTP Basic
	// credentials and client certificates authenticate its requests.
	// The brokers of a cluster then reach each other's data plane over
	// https, trusting --ssl-ca: turn it on for all of them at once.
	HTTPTLS bool
	// P2PAddr is CometBFT's peer-to-peer listener.
	P2PAddr string
	// P2PExternal is the host:port peers dial to reach this node when it
	// differs from P2PAddr (a wildcard listener, NAT).
	P2PExternal string
	// Peers are the CometBFT peers to stay connected to, "nodeid@host:port".
	Peers []string
	// RPCAddr is CometBFT's RPC listener, host:port (empty: none). Brokers
	// joining by state sync fetch headers from their peers' RPC.
	RPCAddr string
	// StateSyncRPC are other brokers' RPC addresses: when set, a broker
	// with an empty state joins by state sync from their snapshots.
	StateSyncRPC []string
	// NodeID is the Kafka node id.
	NodeID int32
	// AutoCreateTopics is auto.create.topics.enable; DefaultPartitions is
	// num.partitions.
	AutoCreateTopics  bool
	DefaultPartitions int32
	// MaxConnections is max.connections and MaxConnectionsPerIP
	// max.connections.per.ip (DefaultMaxConnections, Kafka's default: no
	// limit); MaxConnectionsPerIPOverrides is
	// max.connections.per.ip.overrides in Kafka's form, "host:count,..."
	// (ParseConnectionOverrides), its host names resolved by Start.
	MaxConnections               int
	MaxConnectionsPerIP          int
	MaxConnectionsPerIPOverrides string
	// MaxConnectionCreationRate is max.connection.creation.rate: Kafka
	// connections accepted a second, beyond which new ones are held
	// before they are served (DefaultMaxConnections, Kafka's default: no
	// limit).
	MaxConnectionCreationRate int
	// TimeoutCommit overrides CometBFT's pause after each block (0: default).
	TimeoutCommit time.Duration
	// TimeoutPropose overrides how long validators wait for a proposal
	// (0: cometbft.DefaultTimeoutPropose, or InlineTimeoutPropose with
	// InlineBatches).
	TimeoutPropose time.Duration
	// SnapshotInterval (in heights), SnapshotKeep and RetainBlocks tune
	// a cluster broker's snapshots and block retention (0: the defaults
	// of broker.SnapshotOptions).
	SnapshotInterval int64
	SnapshotKeep     int
	RetainBlocks     int64
	// InlineBatches orders record bytes inside CometBFT transactions
	// instead of through the certified data plane (DESIGN.md §4).
	InlineBatches bool
	// TenantBlockShare is broker.Options.TenantShare: while more than one
	// tenant produces, each has at most this many bytes of records in a
	// block this broker proposes (0: blocks follow the mempool's order).
	TenantBlockShare int64
	// Pprof serves Go's profiler at /debug/pprof/ on the HTTP listener.
	Pprof  bool
	Logger *slog.Logger
	// LogLevels, when set, are the levels Logger's handler obeys, changed
	// at run time through Kafka's BROKER_LOGGER resource.
	LogLevels *loglevel.Levels
}

// DefaultConfig is what `stele serve` runs without flags.
func DefaultConfig() Config {
	return Config{
		DataDir:                   "./stele-data",
		KafkaAddr:                 "127.0.0.1:9092",
		HTTPAddr:                  "127.0.0.1:8080",
		P2PAddr:                   "127.0.0.1:26656",
		AutoCreateTopics:          true,
		DefaultPartitions:         1,
		MaxConnections:            DefaultMaxConnections,
		MaxConnectionsPerIP:       DefaultMaxConnections,
		MaxConnectionCreationRate: DefaultMaxConnections,
		SASLMechanisms:            DefaultSASLMechanisms,
		TenantBlockShare:          DefaultTenantBlockShare,
	}
}

// DefaultTenantBlockShare is --tenant-block-share's default: a tenant's
// share of a block while tenants contend, the size of one full batch of
// a Kafka producer's partition (batch.size up to max.message.bytes).
const DefaultTenantBlockShare = 1 << 20

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("stele/server: a data directory is required")
	}
	for name, addr := range map[string]string{"kafka": c.KafkaAddr, "http": c.HTTPAddr, "p2p": c.P2PAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("stele/server: --%s %q is not host:port: %v", name, addr, err)
		}
	}
	if c.AdvertisedKafka != "" {
		if _, _, err := net.SplitHostPort(c.AdvertisedKafka); err != nil {
			return fmt.Errorf("stele/server: --advertise %q is not host:port: %v", c.AdvertisedKafka, err)
		}
	}
	ls, err := c.kafkaListeners()
	if err != nil {
		return err
	}
	if err := c.validateSASL(ls); err != nil {
		return err
	}
	if c.DefaultPartitions < 1 {
		return fmt.Errorf("stele/server: num.partitions must be at least 1, got %d", c.DefaultPartitions)
	}
	if c.TenantBlockShare < 0 {
		return fmt.Errorf("stele/server: --tenant-block-share must be 0 (off) or a number of bytes, got %d", c.TenantBlockShare)
	}
	return c.validateConnectionLimits()
}

// kafkaListeners are the Kafka listeners to serve: Listeners, or one
// PLAINTEXT listener at KafkaAddr.
func (c Config) kafkaListeners() ([]listener.Listener, error) {
	if c.Listeners == "" {
		host, port, _ := net.SplitHostPort(c.KafkaAddr) // checked by Validate
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("stele/server: --kafka %q: port %q is not a number", c.KafkaAddr, port)
		}
		return []listener.Listener{{Name: "PLAINTEXT", Protocol: listener.Plaintext, Host: host, Port: p}}, nil
	}
	pm, err := listener.ParseProtocolMap(c.ListenerProtocolMap)
	if err != nil {
		return nil, fmt.Errorf("stele/server: --listener-security-protocol-map: %w", err)
	}
	ls, err := listener.ParseWithMap(c.Listeners, pm)
	if err != nil {
		return nil, fmt.Errorf("stele/server: --listeners: %w", err)
	}
	if _, err := listener.ParseAdvertised(c.AdvertisedListeners, ls); err != nil {
		return nil, fmt.Errorf("stele/server: --advertised-listeners: %w", err)
	}
	tlsUsed := false
	for _, l := range ls {
		tlsUsed = tlsUsed || l.Protocol.TLS()
	}
	if tlsUsed {
		if err := c.TLS.Validate(); err != nil {
			return nil, fmt.Errorf("stele/server: --listeners: an SSL listener: %w", err)
		}
		if _, err := listener.ParsePrincipalMappingRules(c.PrincipalMappingRules); err != nil {
			return nil, fmt.Errorf("stele/server: %w", err)
		}
	}
	if c.HTTPTLS {
		if err := c.TLS.Validate(); err != nil {
			return nil, fmt.Errorf("stele/server: --http-tls: %w", err)
		}
	}
	if len(ls) > 1 && c.AdvertisedKafka != "" {
		return nil, errors.New("stele/server: --advertise names one address: with several --listeners give --advertised-listeners (advertised.listeners: NAME://host:port for each)")
	}
	return ls, nil
}

// Node is a running node.
type Node struct {
	cfg Config
	log *slog.Logger
	// tlsFiles is the one reloader of the TLS files, shared by the SSL
	// listeners, the HTTP listener and the data plane's client (tlsOnce).
	tlsFiles *listener.TLS
	fsm      *fsm.FSM
	broker   *broker.Broker
	orderer  *cometbft.Orderer
	snap     *broker.SnapshotApp
	batches  *dataplane.Store
	plane    *dataplane.Plane
	// planeView is what the data plane reads of the membership, derived
	// once per change of it (dataplane.go).
	planeView atomic.Pointer[planeView]
	// consensus is orderer once it exists, read by the data plane, which
	// runs from before then: the blocks it serves to peers catching up,
	// and whether this broker is catching up (dataplane.go).
	consensus atomic.Pointer[cometbft.Orderer]
	// key is this broker's validator key: the one it starts with, then
	// the one the chain rotated it to (rotatedKey); alive.go signs with it.
	key atomic.Pointer[ed25519.PrivateKey]
	// peerScheme and peerClient reach the other brokers' HTTP APIs (nil:
	// http.DefaultClient's transport), as the data plane does.
	peerScheme string
	peerClient *http.Client
	kafka      *kafka.Server
	// kafkaServing is kafka for the HTTP API, which serves before it
	// exists.
	kafkaServing atomic.Pointer[kafka.Server]
	http         *http.Server
	kafkaLn      net.Listener // the first Kafka listener
	// kafkaLns are all of them, kafkaLn first, as listen made them.
	kafkaLns []kafkaListen
	// kafkaNames lists the Kafka listeners served, for the log.
	kafkaNames string
	httpLn     net.Listener
	errc       chan error
	done       chan struct{} // closed by Close
	// started is set once consensus has started: until then the cluster
	// status names no validator or peer.
	started atomic.Bool
	// bg are the node's background goroutines that Close waits for
	// (bootstrapAdmin).
	bg sync.WaitGroup
}

// Start starts a node and returns once it serves clients.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	began := time.Now()
	n := &Node{cfg: cfg, log: log, errc: make(chan error, 2+16), done: make(chan struct{})} // 16: listener.Parse's most
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	overrides, _ := ParseConnectionOverrides(cfg.MaxConnectionsPerIPOverrides) // checked by Validate
	perIP, err := resolveConnectionOverrides(ctx, overrides)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("stele/server: %w", err)
	}
	if err := n.listenKafka(); err != nil {
		return nil, err
	}
	if n.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("stele/server: http listener: %w", err)
	}

	home := filepath.Join(cfg.DataDir, "cometbft")
	ccfg := cometbft.DefaultConfig(home)
	ccfg.P2PListen = "tcp://" + cfg.P2PAddr
	ccfg.ExternalAddress = cfg.P2PExternal
	ccfg.PersistentPeers = cfg.Peers
	if cfg.RPCAddr != "" {
		ccfg.RPCListen = "tcp://" + cfg.RPCAddr
	}
	if len(cfg.StateSyncRPC) > 0 {
		ccfg.StateSync = cometbft.StateSyncConfig{Mode: cometbft.StateSyncAuto, RPCServers: cfg.StateSyncRPC}
	}
	if cfg.TimeoutCommit > 0 {
		ccfg.TimeoutCommit = cfg.TimeoutCommit
	}
	switch {
	case cfg.TimeoutPropose != 0: // a negative one fails Validate
		ccfg.TimeoutPropose = cfg.TimeoutPropose
	case cfg.InlineBatches:
		ccfg.TimeoutPropose = cometbft.InlineTimeoutPropose
	}
	// After a key rotation (stele cluster rotate-key) the broker signs
	// with the key the chain names for its node id (dataplane.go).
	ccfg.KeyRotation, ccfg.OnKey = n.chainKey, n.rotatedKey
	if err := cometbft.Init(home, cometbft.InitOptions{Config: ccfg}); err != nil {
		return nil, err
	}
	genesis, appState, err := cometbft.ReadGenesis(home)
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fopts := fsm.Options{Dir: cfg.DataDir, ChainID: genesis.ChainID, GenesisAppVersion: uint32(genesis.ConsensusParams.Version.App), Logger: log.With("component", "fsm"), TraceState: os.Getenv("STELE_TRACE_STATE") != ""}
	fopts.GenesisAdminKey = appState.AdminKey
	if fopts.GenesisBrokers, err = genesisDirectory(appState.Brokers); err != nil {
		return nil, err
	}
	for _, u := range appState.Users {
		creds, _ := u.ScramCredentials() // checked by ReadGenesis
		fopts.GenesisUsers = append(fopts.GenesisUsers, fsm.GenesisUser{Name: u.Name, Credentials: creds})
	}
	// Certificates are checked against the genesis validators, as the
	// chain's membership changes them (fsm/cluster's membership.go), on every
	// broker, so each can apply them even when it orders inline itself.
	if fopts.Validators, err = cometbft.Validators(genesis); err != nil {
		return nil, err
	}
	// Each step of opening the node's state logs one line with how long
	// it took: /healthz waits for all of them, so these lines say where a
	// slow restart spent its time.
	t0 := time.Now()
	if err := n.startDataPlane(home, genesis.ChainID, appState, fopts.Validators, reg); err != nil {
		return nil, err
	}
	st := n.batches.Stats()
	log.Info("opened the batch store", "took", time.Since(t0).Round(time.Millisecond),
		"batches", st.Batches, "bytes", st.Bytes, "segments", st.Segments)
	fopts.Batches = n.plane
	t0 = time.Now()
	if n.fsm, err = fsm.Open(fopts); err != nil {
		return nil, err
	}
	h, _ := n.fsm.Info()
	log.Info("opened the state", "took", time.Since(t0).Round(time.Millisecond), "height", h)
	// A binary that cannot run the app version the next block is applied
	// under does not start: the operator starts the new binary here.
	if err := n.fsm.UpgradeRequired(); err != nil {
		return nil, err
	}
	if err := n.removedFromCluster(); err != nil {
		return nil, err
	}
	bopts := broker.Options{MaxTxBytes: int(appState.MaxTxBytes), Logger: log.With("component", "broker"), Registerer: reg,
		UpgradeRequired: func(err error) {
			select {
			case n.errc <- err:
			default: // already stopping
			}
		}}
	if !cfg.InlineBatches {
		bopts.Certifier = n.plane
	}
	bopts.TenantShare, bopts.PeekBatch = cfg.TenantBlockShare, n.plane.Peek
	n.broker = broker.New(n.fsm, bopts)
	// Before a block is applied, the data plane starts fetching the
	// batches it names that this broker lacks, in parallel, and while the
	// broker catches up those of the next blocks. (The test-only
	// stelebyzantine build may forge membership changes in its proposals:
	// byzantine_on.go.)
	var app consensus.Application = byzantineMembership(prefetchingApp{Application: n.broker.App(), batches: n.plane, catchingUp: n.catchingUp}, n, home)
	t0 = time.Now()
	if len(appState.Brokers) > 0 {
		// A cluster keeps recent blocks for brokers catching up and
		// snapshots for brokers joining by state sync; a single node has
		// neither and prunes every block once its state is durable.
		n.snap, err = broker.NewSnapshotApp(app, n.fsm, broker.SnapshotOptions{
			Dir: filepath.Join(cfg.DataDir, "snapshots"), Interval: cfg.SnapshotInterval, Keep: cfg.SnapshotKeep, RetainBlocks: cfg.RetainBlocks,
			Logger: log.With("component", "snapshots")})
		if err != nil {
			return nil, err
		}
		app = n.snap
		log.Info("opened the snapshots", "took", time.Since(t0).Round(time.Millisecond))
	}
	if n.orderer, err = cometbft.New(ccfg, app, log.With("component", "cometbft")); err != nil {
		return nil, err
	}
	n.consensus.Store(n.orderer)
	// The HTTP endpoints serve before consensus starts: starting replays
	// the blocks the state lacks, and a block may need a batch from a peer
	// that is itself replaying (every broker restarted at once), so each
	// must serve its batches (/v1/internal/) while it replays. /healthz
	// answers from then on, with the height applied so far.
	status := func() httpapi.ClusterStatus { return n.clusterStatus(genesis.ChainID, appState.Brokers) }
	mux := http.NewServeMux()
	mux.Handle("/v1/internal/", n.plane.Handler())
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	specs, _ := cfg.kafkaListeners() // checked by Validate
	security, err := cfg.httpSecurity(specs)
	if err != nil {
		return nil, err
	}
	mux.Handle("/", httpapi.New(httpapi.Options{Broker: n.broker, Gatherer: reg, NodeID: cfg.NodeID, Cluster: status,
		Security: security, TenantTraffic: n.tenantTraffic, KafkaAddr: n.kafkaAddrIfBound,
		SignedHeader: signedHeader(n.orderer), HeaderValidators: n.orderer.HeaderValidators, Genesis: func() ([]byte, error) { return os.ReadFile(filepath.Join(home, "config", "genesis.json")) }}))
	// A request must arrive whole within a minute (a data-plane push is at
	// most 16 MiB) and an idle keep-alive connection is closed after two:
	// a client cannot hold a connection by never finishing its body.
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	log.Info("serving /healthz; consensus starts", "took", time.Since(began).Round(time.Millisecond))
	httpLn := n.httpLn
	if cfg.HTTPTLS {
		lt, err := n.tlsOnce()
		if err != nil {
			return nil, fmt.Errorf("stele/server: --http-tls: %w", err)
		}
		httpLn = tls.NewListener(httpLn, lt.Config())
		n.http.ErrorLog = slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelInfo) // failed handshakes
	}
	go func() {
		if err := n.http.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			n.errc <- err
		}
	}()
	if err := n.orderer.Start(ctx); err != nil {
		n.orderer = nil
		if uerr := n.fsm.UpgradeRequired(); uerr != nil {
			// The handshake replayed stored blocks up to an upgrade this
			// binary cannot run (CometBFT's error does not wrap ours).
			return nil, uerr
		}
		return nil, err
	}
	n.started.Store(true)
	n.broker.Start(n.orderer)

	kopts := kafka.Options{
		NodeID:            cfg.NodeID,
		ClusterID:         genesis.ChainID,
		AutoCreateTopics:  cfg.AutoCreateTopics,
		DefaultPartitions: cfg.DefaultPartitions,
		DataDir:           cfg.DataDir,
		Logger:            log.With("component", "kafka"),
		LogLevels:         cfg.LogLevels,
		Registerer:        reg,

		MaxConnections:               cfg.MaxConnections,
		MaxConnectionsPerIP:          cfg.MaxConnectionsPerIP,
		MaxConnectionsPerIPOverrides: perIP,
		MaxConnectionCreationRate:    cfg.MaxConnectionCreationRate,

		MaxReauth:  cfg.MaxReauth,
		SuperUsers: cfg.SuperUsers,
	}
	if cfg.OAuth.Configured() {
		if kopts.OAuth, err = sasl.NewOAuthValidator(cfg.OAuth); err != nil {
			return nil, fmt.Errorf("stele/server: %w", err)
		}
	}
	kopts.DenyIfNoACL = !cfg.allowIfNoACL(specs)
	if cfg.AdvertisedKafka != "" {
		host, port, _ := net.SplitHostPort(cfg.AdvertisedKafka)
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("stele/server: --advertise port %q: %v", port, err)
		}
		kopts.AdvertisedHost, kopts.AdvertisedPort = host, int32(p)
	}
	if kopts.Brokers, err = directory(appState.Brokers); err != nil {
		return nil, err
	}
	if len(kopts.Brokers) > 0 {
		self := -1
		for i, b := range kopts.Brokers {
			if b.NodeID == cfg.NodeID {
				self = i
			}
		}
		if self < 0 && cfg.AdvertisedKafka == "" {
			// A broker the chain added (stele cluster add writes its
			// advertise_kafka) or a misconfigured one.
			return nil, fmt.Errorf("stele/server: node id %d is not in the genesis broker directory of %s, and the node file advertises no Kafka address: a broker added to the cluster (stele cluster add) has one", cfg.NodeID, home)
		}
		if self >= 0 && cfg.AdvertisedKafka == "" {
			kopts.AdvertisedHost, kopts.AdvertisedPort = kopts.Brokers[self].Host, kopts.Brokers[self].Port
		}
	}
	if len(kopts.Brokers) > 0 {
		kopts.CatchingUp = n.orderer.CatchingUp
	}
	if len(kopts.Brokers) > 1 {
		kopts.Barrier = n.broker.Barrier
	}
	kopts.Fatal = func(err error) {
		select {
		case n.errc <- err:
		default: // already stopping
		}
	}
	if len(kopts.Brokers) > 0 && len(n.kafkaLns) > 1 {
		return nil, fmt.Errorf("stele/server: a node of a cluster serves one Kafka listener, the address its genesis names; --listeners gives %d", len(n.kafkaLns))
	}
	if len(kopts.Brokers) > 0 && cfg.AdvertisedListeners != "" {
		return nil, errors.New("stele/server: a node of a cluster advertises the address its genesis names: --advertised-listeners is for a single node")
	}
	n.kafka = kafka.New(n.broker, kopts)
	n.kafkaServing.Store(n.kafka)
	if err := n.serveKafka(kopts); err != nil {
		return nil, err
	}
	go n.pruneBatches()
	if len(appState.Brokers) > 0 { // a broker of a cluster may be a replica
		n.bg.Add(1)
		go n.sayAlive(genesis.ChainID)
	}
	if cfg.AdminPasswordFile != "" {
		n.bg.Add(1)
		go n.bootstrapAdmin()
	}
	h, _ = n.broker.Info()
	log.Info("stele is serving", "kafka", n.kafkaNames, "http", n.httpLn.Addr().String(),
		"p2p", cfg.P2PAddr, "data", cfg.DataDir, "chain_id", genesis.ChainID, "height", h)
	return n, nil
}

// genesisDirectory turns the genesis broker directory into the state
// machine's.
func genesisDirectory(gbs []cometbft.GenesisBroker) ([]fsm.DirectoryBroker, error) {
	var out []fsm.DirectoryBroker
	for _, g := range gbs {
		v, err := hex.DecodeString(g.Validator)
		if err != nil || len(v) != 20 {
			return nil, fmt.Errorf("stele/server: genesis broker %d: validator %q is not a 20-byte hex address", g.NodeID, g.Validator)
		}
		out = append(out, fsm.DirectoryBroker{NodeID: g.NodeID, Validator: [20]byte(v), Kafka: g.Kafka, HTTP: g.HTTP})
	}
	return out, nil
}

// directory turns the genesis broker directory into the front-end's.
func directory(gbs []cometbft.GenesisBroker) ([]kafka.BrokerInfo, error) {
	var out []kafka.BrokerInfo
	for _, g := range gbs {
		host, port, err := net.SplitHostPort(g.Kafka)
		if err != nil {
			return nil, fmt.Errorf("stele/server: genesis broker %d: kafka address %q: %v", g.NodeID, g.Kafka, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("stele/server: genesis broker %d: kafka port %q: %v", g.NodeID, port, err)
		}
		v, err := hex.DecodeString(g.Validator)
		if err != nil {
			return nil, fmt.Errorf("stele/server: genesis broker %d: validator %q: %v", g.NodeID, g.Validator, err)
		}
		out = append(out, kafka.BrokerInfo{NodeID: g.NodeID, Host: host, Port: int32(p), Validator: v})
	}
	return out, nil
}

// KafkaAddr is the address the Kafka listener is bound to.
func (n *Node) KafkaAddr() string { return n.kafkaLn.Addr().String() }

// kafkaAddrIfBound is KafkaAddr, or "" before the listener is bound.
func (n *Node) kafkaAddrIfBound() string {
	if n.kafkaLn == nil {
		return ""
	}
	return n.KafkaAddr()
}

// HTTPAddr is the address the HTTP listener is bound to.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// Wait blocks until ctx ends, a listener fails, consensus halts (the
// state machine failed to apply or commit a block: restarting replays it),
// or the next block is the height of an upgrade this binary cannot run
// (an error wrapping fsm.ErrUpgradeRequired: start the new binary).
func (n *Node) Wait(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-n.errc:
			return err
		case <-tick.C:
			if err := n.fsm.UpgradeRequired(); err != nil {
				return err
			}
			if err := n.removedFromCluster(); err != nil {
				return err
			}
			if err := n.orderer.Err(); err != nil {
				if errors.Is(err, fsm.ErrLocalFault) {
					return fmt.Errorf("stele/server: stopped on a local storage fault; fix the disk (space, permissions, hardware) and restart: the block is replayed from the chain: %w", err)
				}
				return fmt.Errorf("stele/server: consensus halted: %w", err)
			}
		}
	}
}

// ErrRemoved is returned by Wait (and New) when the chain has taken this
// broker out of the cluster (stele cluster remove): it stops serving, and
// starts no more on this data directory.
var ErrRemoved = errors.New("stele/server: this broker was removed from the cluster")

// removedFromCluster returns ErrRemoved, with when, once the committed
// state records this broker's validator as removed.
func (n *Node) removedFromCluster() error {
	for _, r := range n.fsm.ValidatorRecords() {
		if r.Address == n.plane.Self() && r.Reason == fsm.ReasonRemoved {
			return fmt.Errorf("%w at height %d (stele cluster remove); its clients moved to the other brokers. Its data directory is no longer of use to this cluster", ErrRemoved, r.ChangedAt)
		}
	}
	return nil
}

// tenantTraffic is the Kafka server's TenantTraffic, nothing before it
// serves.
func (n *Node) tenantTraffic(tenant string) map[string]int64 {
	if k := n.kafkaServing.Load(); k != nil {
		return k.TenantTraffic(tenant)
	}
	return map[string]int64{}
}

// Close shuts the node down: front-ends first, then the broker, consensus
// and the state machine.
func (n *Node) Close() error {
	if n.kafka != nil {
		n.kafka.Close()
	}
	for _, l := range n.kafkaLns {
		l.ln.Close() // those the server did not take yet
	}
	if n.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n.http.Shutdown(ctx)
		cancel()
	} else if n.httpLn != nil {
		n.httpLn.Close()
	}
	if n.broker != nil {
		n.broker.Close()
	}
	select {
	case <-n.done:
	default:
		close(n.done)
	}
	n.bg.Wait()
	if n.plane != nil {
		// Before the orderer: a block waiting for a batch from a peer
		// gives up, so consensus can stop.
		n.plane.Close()
	}
	var err error
	if n.orderer != nil {
		err = n.orderer.Stop()
	}
	if n.snap != nil {
		err = errors.Join(err, n.snap.Close())
	}
	if n.fsm != nil {
		err = errors.Join(err, n.fsm.Close())
	}
	if n.batches != nil {
		err = errors.Join(err, n.batches.Close())
	}
	n.log.Info("stele stopped")
	return err
}

// Run starts a node and serves until ctx ends (SIGTERM, SIGINT), then shuts
// it down cleanly.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	werr := n.Wait(ctx)
	return errors.Join(werr, n.Close())
}

// signedHeader returns the protobuf-encoded signed header of a height, for
// proofs.
func signedHeader(o *cometbft.Orderer) func(int64) ([]byte, error) {
	return func(height int64) ([]byte, error) {
		sh, err := o.SignedHeader(height)
		if err != nil {
			return nil, err
		}
		return sh.ToProto().Marshal()
	}
}
