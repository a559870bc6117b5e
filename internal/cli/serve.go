package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/loglevel"
	"github.com/stele-io/stele/internal/sasl"
	"github.com/stele-io/stele/internal/server"
)

// newServeCmd is `stele serve`: run one broker with everything embedded.
func newServeCmd() *cobra.Command {
	cfg := server.DefaultConfig()
	var logLevel, logFormat, superUsers, configFile string
	var reauthMs int64
	var allowEveryone bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Stele broker (a single node with everything embedded)",
		Long: `Run a Stele broker: the Kafka listener, the HTTP listener (/healthz,
/metrics) and an embedded CometBFT node that orders every change.

On first start the data directory is created with a fresh single-validator
chain (keys and genesis under DATA/cometbft), unless 'stele cluster init'
wrote it. SIGTERM or SIGINT shut the broker down cleanly; a kill -9 loses no
acknowledged write: the state is rebuilt from the committed blocks at the
next start.

When DATA/stele.json exists (the node file 'stele cluster init' writes) its
settings -- node id, listeners, advertised addresses, peers -- replace the
defaults; a flag given on the command line still wins over the file.

--config FILE reads a Kafka server.properties: the settings Stele has, under
Kafka's names (listeners, advertised.listeners, log.dirs, node.id,
num.partitions, auto.create.topics.enable, max.connections*, ssl.* with PEM
stores, sasl.enabled.mechanisms, super.users, allow.everyone.if.no.acl.found,
connections.max.reauth.ms; authorizer.class.name is taken: Stele's ACLs
always apply). Other keys are logged and ignored. Flags and the node file
win over it.`,
		Example: `  stele serve
  stele serve --data /var/lib/stele --kafka 0.0.0.0:9092 --advertise broker1:9092
  stele serve --listeners PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093 --ssl-cert certs/broker.crt --ssl-key certs/broker.key
  stele serve --listeners SASL_PLAINTEXT://127.0.0.1:9092 --admin-password-file admin.password
  stele serve --config config/server.properties --admin-password-file admin.password
  stele serve --data cluster/node0                 # ports and peers from cluster/node0/stele.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError{err}
			}
			// The handler passes everything; levels (changed at run time
			// through BROKER_LOGGER) decide what is written.
			levels := loglevel.New(level)
			hopts := &slog.HandlerOptions{Level: slog.LevelDebug - 1000}
			var h slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), hopts)
			if strings.EqualFold(logFormat, "json") {
				h = slog.NewJSONHandler(cmd.ErrOrStderr(), hopts)
			}
			log := slog.New(levels.Handler(h))
			if cfg.Listeners != "" && cmd.Flags().Changed("kafka") {
				return usageErrorf("--kafka and --listeners both name the Kafka listeners: give one (--kafka HOST:PORT is PLAINTEXT://HOST:PORT)")
			}
			cfg.SuperUsers = splitList(superUsers, ";")
			if cfg.OAuth.Configured() && !cmd.Flags().Changed("sasl-enabled-mechanisms") {
				cfg.SASLMechanisms = append(slices.Clone(cfg.SASLMechanisms), sasl.OAuthBearer)
			}
			if cmd.Flags().Changed("allow-everyone-if-no-acl-found") {
				cfg.AllowEveryoneIfNoACL = &allowEveryone
			}
			cfg.MaxReauth = time.Duration(reauthMs) * time.Millisecond
			if configFile != "" {
				props, err := readPropertiesFor("--config", configFile)
				if err != nil {
					return usageError{err}
				}
				ignored, err := applyServerProperties(&cfg, props, cmd.Flags().Changed)
				if err != nil {
					return err
				}
				log.Info("read the server properties", "path", configFile, "read", len(props)-len(ignored))
				if len(ignored) > 0 {
					log.Warn("server properties Stele does not read, ignored", "keys", strings.Join(ignored, ","))
				}
			}
			run, used, err := withNodeFile(cmd.Flags().Changed, cfg)
			if err != nil {
				return err
			}
			if used {
				log.Info("using the node file", "path", filepath.Join(cfg.DataDir, server.NodeFileName))
			}
			run.Logger, run.LogLevels = log, levels
			return server.Run(cmd.Context(), run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a Kafka server.properties file: the settings Stele has, under Kafka's names (listeners, log.dirs, node.id, ssl.*, sasl.enabled.mechanisms, super.users, ...); flags win over it")
	f.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory")
	f.StringVar(&cfg.KafkaAddr, "kafka", cfg.KafkaAddr, "Kafka listener host:port")
	f.StringVar(&cfg.HTTPAddr, "http", cfg.HTTPAddr, "HTTP listener host:port (/healthz, /metrics)")
	f.StringVar(&cfg.AdvertisedKafka, "advertise", "", "host:port clients are told to connect to (default: the Kafka listener)")
	f.StringVar(&cfg.ListenerProtocolMap, "listener-security-protocol-map", "", "listener.security.protocol.map: security protocols of listeners named otherwise, e.g. INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL (default: each listener is named after its protocol)")
	f.StringVar(&cfg.AdvertisedListeners, "advertised-listeners", "", "advertised.listeners: what Metadata tells each listener's clients to connect to, NAME://host:port,... (default: each listener's own address)")
	f.StringVar(&cfg.Listeners, "listeners", "", "Kafka listeners in Kafka's syntax, e.g. SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092 (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; replaces --kafka)")
	f.StringVar(&cfg.TLS.Cert, "ssl-cert", "", "SSL listeners: the broker's certificate chain, PEM (reloaded when it changes)")
	f.StringVar(&cfg.TLS.Key, "ssl-key", "", "SSL listeners: the certificate's private key, PEM")
	f.StringVar(&cfg.TLS.CA, "ssl-ca", "", "SSL listeners: the CA certificates client certificates are checked against, PEM")
	clientAuth := (*string)(&cfg.TLS.ClientAuth)
	f.StringVar(&cfg.TLS.CRL, "ssl-crl", "", "SSL listeners and --http-tls: a certificate revocation list signed by --ssl-ca (stele cert revoke); client certificates it lists are refused (reloaded when it changes)")
	f.StringVar(clientAuth, "ssl-client-auth", "none", "SSL listeners: ssl.client.auth, none|requested|required (mutual TLS; the principal is User: and the certificate's subject)")
	f.BoolVar(&cfg.HTTPTLS, "http-tls", false, "serve the HTTP API over TLS with --ssl-cert and --ssl-key, asking for client certificates as --ssl-client-auth says (in a cluster: on every broker, which then reach each other over https)")
	f.StringVar(&cfg.PrincipalMappingRules, "ssl-principal-mapping-rules", "", "ssl.principal.mapping.rules: RULE:pattern/replacement/[LU],...,DEFAULT (default DEFAULT: the whole subject)")
	f.StringSliceVar(&cfg.SASLMechanisms, "sasl-enabled-mechanisms", cfg.SASLMechanisms, "SASL listeners: sasl.enabled.mechanisms, comma-separated, of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
	f.StringVar(&cfg.OAuth.JWKSFile, "sasl-oauthbearer-jwks-file", "", "OAUTHBEARER: the JSON Web Key Set tokens are signed with (re-read when it changes); enables OAUTHBEARER unless --sasl-enabled-mechanisms says otherwise")
	f.StringVar(&cfg.OAuth.JWKSURL, "sasl-oauthbearer-jwks-url", "", "OAUTHBEARER: an identity provider's JWKS endpoint (https://...), fetched at start, every --sasl-oauthbearer-jwks-refresh-ms and when a token names an unknown key; in place of --sasl-oauthbearer-jwks-file")
	f.DurationVar(&cfg.OAuth.Refresh, "sasl-oauthbearer-jwks-refresh", time.Hour, "OAUTHBEARER: how often the JWKS URL is fetched again (sasl.oauthbearer.jwks.endpoint.refresh.ms)")
	f.StringVar(&cfg.OAuth.Issuer, "sasl-oauthbearer-expected-issuer", "", "OAUTHBEARER: the iss tokens must carry")
	f.StringSliceVar(&cfg.OAuth.Audience, "sasl-oauthbearer-expected-audience", nil, "OAUTHBEARER: audiences, one of which tokens must name in aud")
	f.StringVar(&cfg.OAuth.SubClaim, "sasl-oauthbearer-sub-claim-name", "sub", "OAUTHBEARER: the claim holding the principal's name")
	f.StringVar(&cfg.AdminPasswordFile, "admin-password-file", "", "create the super user admin with the password in this file (SCRAM-SHA-256 and SCRAM-SHA-512 credentials, which PLAIN logins use too) when the cluster has no such user")
	f.StringVar(&superUsers, "super-users", "", "super.users: principals allowed everything, semicolon-separated (User:alice;User:bob); the admin user always is one")
	f.BoolVar(&allowEveryone, "allow-everyone-if-no-acl-found", false, "allow.everyone.if.no.acl.found: a resource no ACL applies to is allowed to all (default: true unless a listener authenticates its clients)")
	f.Int64Var(&reauthMs, "connections-max-reauth-ms", 0, "connections.max.reauth.ms: SASL sessions last this long, then clients re-authenticate (KIP-368); 0: forever")
	f.StringVar(&cfg.P2PAddr, "p2p", cfg.P2PAddr, "CometBFT peer-to-peer listener host:port")
	f.StringVar(&cfg.P2PExternal, "p2p-external", "", "host:port other brokers dial to reach --p2p (default: the --p2p address)")
	f.StringSliceVar(&cfg.Peers, "peers", nil, "CometBFT peers to stay connected to, comma-separated nodeid@host:port")
	f.Int64Var(&cfg.SnapshotInterval, "snapshot-interval", 0, "in a cluster, take a state-sync snapshot every N heights (default 1000)")
	f.IntVar(&cfg.SnapshotKeep, "snapshot-keep", 0, "in a cluster, how many of the latest snapshots to keep and offer (default 2)")
	f.Int64Var(&cfg.RetainBlocks, "retain-blocks", 0, "in a cluster, keep this many blocks below the committed height for brokers catching up (default 10000)")
	f.StringVar(&cfg.RPCAddr, "rpc", "", "CometBFT RPC listener host:port, which brokers joining by state sync read headers from (default: none)")
	f.StringSliceVar(&cfg.StateSyncRPC, "state-sync-rpc", nil, "other brokers' CometBFT RPC host:port, comma-separated: an empty broker joins by state sync from their snapshots")
	f.Int32Var(&cfg.NodeID, "node-id", cfg.NodeID, "Kafka node id of this broker")
	f.BoolVar(&cfg.AutoCreateTopics, "auto-create-topics", cfg.AutoCreateTopics, "auto.create.topics.enable: create unknown topics on Metadata and Produce")
	f.Int32Var(&cfg.DefaultPartitions, "num-partitions", cfg.DefaultPartitions, "num.partitions: partitions of auto-created topics")
	f.IntVar(&cfg.MaxConnections, "max-connections", cfg.MaxConnections, "max.connections: while this many Kafka connections are open, new ones wait until one closes")
	f.IntVar(&cfg.MaxConnectionsPerIP, "max-connections-per-ip", cfg.MaxConnectionsPerIP, "max.connections.per.ip: a new Kafka connection from an address that already has this many is closed at once")
	f.IntVar(&cfg.MaxConnectionCreationRate, "max-connection-creation-rate", cfg.MaxConnectionCreationRate, "max.connection.creation.rate: Kafka connections accepted a second (over Kafka's 11 s window); beyond it new ones are held, up to 1 s each, before they are served")
	f.StringVar(&cfg.MaxConnectionsPerIPOverrides, "max-connections-per-ip-overrides", "", "max.connections.per.ip.overrides: per-host limits replacing --max-connections-per-ip, host:count,host:count (host names resolved at start)")
	f.DurationVar(&cfg.TimeoutCommit, "timeout-commit", 0, "CometBFT pause after each block (default 0: the next block starts at once)")
	f.DurationVar(&cfg.TimeoutPropose, "timeout-propose", 0, "how long brokers wait for a height's proposal before moving to the next round: what a height costs when its proposer is down (default 1s; 3s with --inline-batches, whose blocks carry the records)")
	f.BoolVar(&cfg.InlineBatches, "inline-batches", false, "carry record bytes inside CometBFT transactions instead of the certified data plane (for comparison; every broker of a cluster applies both)")
	f.Int64Var(&cfg.TenantBlockShare, "tenant-block-share", cfg.TenantBlockShare, "while more than one tenant produces, the bytes of records each may have in a block this broker proposes (the rest wait for the next block, so one tenant's bursts do not hold up another's records); 0: blocks take transactions in the order they came")
	f.BoolVar(&cfg.Pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the HTTP listener (for performance work; no authentication)")
	f.StringVar(&logLevel, "log-level", envOr("STELE_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env STELE_LOG_LEVEL)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

// withNodeFile returns cfg (the defaults with the command-line flags
// applied) overlaid with DATA/stele.json when that file exists: the file
// replaces the defaults, and every flag for which changed (cobra's
// Flags().Changed) is true keeps its command-line value. It reports whether
// a node file was read.
func withNodeFile(changed func(flag string) bool, cfg server.Config) (server.Config, bool, error) {
	nf, ok, err := server.ReadNodeFile(cfg.DataDir)
	if err != nil || !ok {
		return cfg, false, err
	}
	merged := cfg
	merged.ApplyNodeFile(nf)
	// The flags the node file has a say in, and how each flag's value is
	// put back when it was given.
	keep := []struct {
		flag    string
		restore func()
	}{
		{"node-id", func() { merged.NodeID = cfg.NodeID }},
		// --kafka given names the one listener: the node file's
		// listeners give way to it.
		{"kafka", func() { merged.KafkaAddr, merged.Listeners = cfg.KafkaAddr, "" }},
		{"listeners", func() { merged.Listeners = cfg.Listeners }},
		{"ssl-cert", func() { merged.TLS.Cert = cfg.TLS.Cert }},
		{"ssl-key", func() { merged.TLS.Key = cfg.TLS.Key }},
		{"ssl-ca", func() { merged.TLS.CA = cfg.TLS.CA }},
		{"ssl-client-auth", func() { merged.TLS.ClientAuth = cfg.TLS.ClientAuth }},
		{"ssl-crl", func() { merged.TLS.CRL = cfg.TLS.CRL }},
		{"http-tls", func() { merged.HTTPTLS = cfg.HTTPTLS }},
		{"sasl-enabled-mechanisms", func() { merged.SASLMechanisms = cfg.SASLMechanisms }},
		{"admin-password-file", func() { merged.AdminPasswordFile = cfg.AdminPasswordFile }},
		{"super-users", func() { merged.SuperUsers = cfg.SuperUsers }},
		{"http", func() { merged.HTTPAddr = cfg.HTTPAddr }},
		{"p2p", func() { merged.P2PAddr = cfg.P2PAddr }},
		{"advertise", func() { merged.AdvertisedKafka = cfg.AdvertisedKafka }},
		{"p2p-external", func() { merged.P2PExternal = cfg.P2PExternal }},
		{"peers", func() { merged.Peers = cfg.Peers }},
		{"rpc", func() { merged.RPCAddr = cfg.RPCAddr }},
		{"state-sync-rpc", func() { merged.StateSyncRPC = cfg.StateSyncRPC }},
	}
	for _, k := range keep {
		if changed(k.flag) {
			k.restore()
		}
	}
	return merged, true, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
