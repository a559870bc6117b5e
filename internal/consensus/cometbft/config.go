package cometbft

import (
	"bufio"
	stded25519 "crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
)

// ErrConfig is wrapped by every error Config.Validate and ParseConfig return.
var ErrConfig = errors.New("stele/consensus/cometbft: invalid config")

// Default values of Config. See DefaultConfig for why each was chosen.
const (
	DefaultP2PListen      = "tcp://127.0.0.1:26656"
	DefaultTimeoutPropose = 1 * time.Second
	// InlineTimeoutPropose is CometBFT's own default, for blocks that carry
	// record bytes (serve --inline-batches, bench/cometbft): 18 MiB
	// proposals take longer than a second to reach every validator on the
	// 2-core machine, and with 1 s four validators ordered 8.7 and 9.3 MB/s
	// of 1 KiB records instead of 10.8 and 11.2.
	InlineTimeoutPropose                           = 3 * time.Second
	DefaultTimeoutCommit             time.Duration = 0
	DefaultCreateEmptyBlocksInterval               = 2 * time.Second
	peerGossipSleep                                = 5 * time.Millisecond
	p2pFlushThrottle                               = 2 * time.Millisecond
	DefaultMaxTxBytes                              = 16 << 20
	DefaultMempoolSize                             = 10000
	DefaultMempoolMaxTxsBytes                      = 256 << 20
	DefaultP2PRate                                 = 64 << 20
)

// p2pMaxPacketPayload is CometBFT's max_packet_msg_payload_size. Peers must
// agree on it (a peer rejects larger packets), so it is fixed here rather
// than configurable: 64 KiB, one block part, instead of CometBFT's 1 KiB,
// which splits every large transaction and block part into tiny packets.
const p2pMaxPacketPayload = 64 << 10

// Config is the node-local configuration of the embedded CometBFT node. The
// chain-wide settings (validators, block size, the largest transaction) live
// in the genesis written by Init; see InitOptions.
//
// The node runs with these settings; config/config.toml under Home is
// written once by Init for CometBFT's own tools (inspect, rollback) and is
// not read back.
type Config struct {
	// Home is CometBFT's home directory (config/ and data/ below it).
	Home string
	// Moniker names this node to its peers.
	Moniker string
	// P2PListen is the peer-to-peer listen address, "tcp://host:port".
	P2PListen string
	// ExternalAddress is the "host:port" peers should dial when it differs
	// from P2PListen (empty: none advertised).
	ExternalAddress string
	// PersistentPeers are the peers to keep connections to, each
	// "nodeid@host:port" (InitCluster fills them in).
	PersistentPeers []string
	// RPCListen is CometBFT's RPC listen address; empty disables the RPC
	// server (Stele serves its own APIs).
	RPCListen string
	// TimeoutPropose is how long validators wait for a proposal before
	// prevoting nil; it must cover PrepareProposal and block propagation.
	TimeoutPropose time.Duration
	// TimeoutCommit is the pause after a commit before the next height
	// starts, the block interval knob.
	TimeoutCommit time.Duration
	// CreateEmptyBlocksInterval makes an empty block after this long without
	// transactions, so block time (the state machine's only clock) keeps
	// advancing while idle. Zero means never: block time then stands still
	// until the next transaction.
	CreateEmptyBlocksInterval time.Duration
	// MaxTxBytes is the largest transaction this node's mempool admits. It
	// is capped at the chain's max_tx_bytes from the genesis.
	MaxTxBytes int64
	// MempoolSize and MempoolMaxTxsBytes bound the mempool in transactions
	// and in bytes; Submit returns consensus.ErrMempoolFull beyond them.
	MempoolSize        int
	MempoolMaxTxsBytes int64
	// P2PRate is the send and the receive rate limit of one peer
	// connection, in bytes per second.
	P2PRate int64
	// StateSync lets a node with an empty state join from a peer's
	// application snapshot (statesync.go). It needs the application to
	// implement consensus.Snapshotter and the peers to serve RPC.
	StateSync StateSyncConfig
	// KeyRotation, when set, says which validator key the chain names for
	// this broker (rotation.go): once it names the key in NextKeyFile, the
	// broker signs with that key from the height CometBFT counts it, and
	// OnKey (when set) is called with it at once, for the signatures the
	// state machine checks against its own set (the data plane's).
	KeyRotation KeyRotation
	OnKey       func(stded25519.PrivateKey)
}

// DefaultConfig returns the defaults for a node whose home is home.
//
//   - TimeoutPropose 1 s instead of CometBFT's 3 s. Every validator takes
//     its turn to propose, a crashed one included, and its heights wait
//     this long for a proposal that never comes, so with one broker of four
//     down one height in four costs it. bench/broker-down.sh (produce at
//     100 records/s of 1 KiB, node3 SIGKILLed; docs/benchmarks.md), medians
//     of 3, p50/p99: 2.26/4.17 s with 3 s, 1.17/2.17 s with 1 s, against
//     0.09/0.14 s with all four up. A proposal takes 16 ms to arrive at
//     p50 under full load on the 2-core machine, and a round that times
//     out only costs the next round (each waits 500 ms longer), so 1 s
//     leaves room for slow links without a 3 s stall. Four brokers under
//     full produce load (certificates only in blocks) reached 73 and 70
//     MB/s with 1 s, 67 and 77 with 3 s. Blocks that carry record bytes
//     are another matter: see InlineTimeoutPropose.
//   - TimeoutCommit 0: a produce is answered only after its block commits,
//     and the pause after a commit adds straight to produce latency; worse,
//     each block with transactions is followed by an (empty) block signing
//     its app hash, so a steady producer pays the pause twice. Measured with
//     BenchmarkProduceToCommit (1 KiB transactions, one validator, one
//     producer waiting on each commit), median produce-to-commit: 0 s: 9.7
//     ms; 10 ms: 17.8 ms; 50 ms: 55.5 ms; 200 ms: 205 ms. Batching needs no
//     pause: transactions arriving while a block is being made all go into
//     the next one.
//   - CreateEmptyBlocksInterval 2 s: blocks are made only for transactions
//     (create_empty_blocks = false) plus one empty block per 2 s while idle,
//     enough for time-based retention and timeouts driven by block time, and
//     near-zero idle CPU.
//   - MaxTxBytes 16 MiB and a mempool bounded to 10000 transactions and
//     256 MiB (CometBFT's 1 GB default let a 4-node test stall).
//   - P2PRate 64 MiB/s per connection instead of 5 MB/s, which caps a
//     cluster's throughput far below the machine's.
func DefaultConfig(home string) Config {
	return Config{
		Home:                      home,
		Moniker:                   "stele",
		P2PListen:                 DefaultP2PListen,
		TimeoutPropose:            DefaultTimeoutPropose,
		TimeoutCommit:             DefaultTimeoutCommit,
		CreateEmptyBlocksInterval: DefaultCreateEmptyBlocksInterval,
		MaxTxBytes:                DefaultMaxTxBytes,
		MempoolSize:               DefaultMempoolSize,
		MempoolMaxTxsBytes:        DefaultMempoolMaxTxsBytes,
		P2PRate:                   DefaultP2PRate,
		StateSync:                 StateSyncConfig{Mode: StateSyncOff},
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Home == "":
		return bad("home directory not set")
	case strings.ContainsAny(c.Moniker, "\n\r"):
		return bad("moniker %q contains a line break", c.Moniker)
	case c.TimeoutPropose <= 0:
		return bad("timeout_propose %v must be positive", c.TimeoutPropose)
	case c.TimeoutCommit < 0:
		return bad("timeout_commit %v is negative", c.TimeoutCommit)
	case c.CreateEmptyBlocksInterval < 0:
		return bad("create_empty_blocks_interval %v is negative", c.CreateEmptyBlocksInterval)
	case c.MaxTxBytes <= 0:
		return bad("max_tx_bytes %d must be positive", c.MaxTxBytes)
	case c.MempoolSize <= 0:
		return bad("mempool_size %d must be positive", c.MempoolSize)
	case c.MempoolMaxTxsBytes < c.MaxTxBytes:
		return bad("mempool_max_txs_bytes %d is smaller than max_tx_bytes %d", c.MempoolMaxTxsBytes, c.MaxTxBytes)
	case c.P2PRate <= 0:
		return bad("p2p_rate %d must be positive", c.P2PRate)
	}
	if err := checkListen(c.P2PListen); err != nil {
		return bad("p2p_listen: %v", err)
	}
	if c.RPCListen != "" {
		if err := checkListen(c.RPCListen); err != nil {
			return bad("rpc_listen: %v", err)
		}
	}
	if err := c.StateSync.validate(); err != nil {
		return bad("%v", err)
	}
	if c.ExternalAddress != "" {
		if _, _, err := net.SplitHostPort(c.ExternalAddress); err != nil {
			return bad("external_address %q: want host:port", c.ExternalAddress)
		}
	}
	for _, p := range c.PersistentPeers {
		if err := checkPeer(p); err != nil {
			return bad("persistent peer %q: %v", p, err)
		}
	}
	return nil
}

// checkListen accepts "tcp://host:port" (CometBFT also takes unix sockets,
// which Stele has no use for).
func checkListen(addr string) error {
	hostport, ok := strings.CutPrefix(addr, "tcp://")
	if !ok {
		return fmt.Errorf("%q: want tcp://host:port", addr)
	}
	if _, port, err := net.SplitHostPort(hostport); err != nil || port == "" {
		return fmt.Errorf("%q: want tcp://host:port", addr)
	}
	return nil
}

// checkPeer accepts "nodeid@host:port" with a 40-hex-digit node ID.
func checkPeer(p string) error {
	id, hostport, ok := strings.Cut(p, "@")
	if !ok {
		return errors.New("want nodeid@host:port")
	}
	if b, err := hex.DecodeString(id); err != nil || len(b) != 20 {
		return errors.New("node ID must be 40 hex digits")
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return errors.New("want nodeid@host:port")
	}
	return nil
}

// String returns the text form of c, one "key = value" line per setting;
// ParseConfig reads it back.
func (c Config) String() string {
	keys := [...]string{
		"home", "moniker", "p2p_listen", "external_address", "persistent_peers", "rpc_listen",
		"timeout_propose", "timeout_commit", "create_empty_blocks_interval",
		"max_tx_bytes", "mempool_size", "mempool_max_txs_bytes", "p2p_rate",
		"state_sync", "state_sync_rpc_servers", "state_sync_discovery_time", "state_sync_chunk_timeout",
	}
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, c.get(k))
	}
	return b.String()
}

func (c *Config) get(key string) string {
	switch key {
	case "home":
		return c.Home
	case "moniker":
		return c.Moniker
	case "p2p_listen":
		return c.P2PListen
	case "external_address":
		return c.ExternalAddress
	case "persistent_peers":
		return strings.Join(c.PersistentPeers, ",")
	case "rpc_listen":
		return c.RPCListen
	case "timeout_propose":
		return c.TimeoutPropose.String()
	case "timeout_commit":
		return c.TimeoutCommit.String()
	case "create_empty_blocks_interval":
		return c.CreateEmptyBlocksInterval.String()
	case "max_tx_bytes":
		return strconv.FormatInt(c.MaxTxBytes, 10)
	case "mempool_size":
		return strconv.Itoa(c.MempoolSize)
	case "mempool_max_txs_bytes":
		return strconv.FormatInt(c.MempoolMaxTxsBytes, 10)
	case "p2p_rate":
		return strconv.FormatInt(c.P2PRate, 10)
	case "state_sync":
		return c.StateSync.Mode
	case "state_sync_rpc_servers":
		return strings.Join(c.StateSync.RPCServers, ",")
	case "state_sync_discovery_time":
		return c.StateSync.DiscoveryTime.String()
	case "state_sync_chunk_timeout":
		return c.StateSync.ChunkRequestTimeout.String()
	}
	return ""
}

func (c *Config) set(key, v string) error {
	var err error
	switch key {
	case "home":
		c.Home = v
	case "moniker":
		c.Moniker = v
	case "p2p_listen":
		c.P2PListen = v
	case "external_address":
		c.ExternalAddress = v
	case "persistent_peers":
		c.PersistentPeers = splitList(v)
	case "rpc_listen":
		c.RPCListen = v
	case "timeout_propose":
		c.TimeoutPropose, err = time.ParseDuration(v)
	case "timeout_commit":
		c.TimeoutCommit, err = time.ParseDuration(v)
	case "create_empty_blocks_interval":
		c.CreateEmptyBlocksInterval, err = time.ParseDuration(v)
	case "max_tx_bytes":
		c.MaxTxBytes, err = strconv.ParseInt(v, 10, 64)
	case "mempool_size":
		c.MempoolSize, err = strconv.Atoi(v)
	case "mempool_max_txs_bytes":
		c.MempoolMaxTxsBytes, err = strconv.ParseInt(v, 10, 64)
	case "p2p_rate":
		c.P2PRate, err = strconv.ParseInt(v, 10, 64)
	case "state_sync":
		c.StateSync.Mode = v
	case "state_sync_rpc_servers":
		c.StateSync.RPCServers = splitList(v)
	case "state_sync_discovery_time":
		c.StateSync.DiscoveryTime, err = time.ParseDuration(v)
	case "state_sync_chunk_timeout":
		c.StateSync.ChunkRequestTimeout, err = time.ParseDuration(v)
	default:
		return fmt.Errorf("unknown key %q", key)
	}
	return err
}

// splitList splits a comma-separated list, dropping blank items; nil when
// there are none.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ParseConfig reads the text form written by Config.String: "key = value"
// lines, blank lines and lines starting with '#' ignored. Keys not given
// keep their DefaultConfig value. It does not Validate the result.
func ParseConfig(text string) (Config, error) {
	c := DefaultConfig("")
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Config{}, fmt.Errorf("%w: line %d: want key = value", ErrConfig, n)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if seen[k] {
			return Config{}, fmt.Errorf("%w: line %d: %q given twice", ErrConfig, n, k)
		}
		seen[k] = true
		if err := c.set(k, v); err != nil {
			return Config{}, fmt.Errorf("%w: line %d: %s: %v", ErrConfig, n, k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return c, nil
}

// cometConfig builds CometBFT's configuration from c. chainMaxTxBytes is
// the chain's largest transaction (from the genesis): the mempool never
// admits more.
func (c Config) cometConfig(chainMaxTxBytes int64) *cmtcfg.Config {
	cc := cmtcfg.DefaultConfig()
	cc.SetRoot(filepath.Clean(c.Home))
	cc.Moniker = c.Moniker
	cc.ProxyApp = "" // the application is in-process
	cc.DBBackend = "goleveldb"
	cc.LogFormat = cmtcfg.LogFormatPlain

	cc.RPC.ListenAddress = c.RPCListen
	cc.RPC.GRPCListenAddress = ""
	cc.RPC.PprofListenAddress = ""

	cc.P2P.ListenAddress = c.P2PListen
	cc.P2P.ExternalAddress = c.ExternalAddress
	cc.P2P.PersistentPeers = strings.Join(c.PersistentPeers, ",")
	cc.P2P.PexReactor = false // a closed validator set: persistent peers only
	cc.P2P.AddrBookStrict = false
	cc.P2P.AllowDuplicateIP = true
	cc.P2P.SendRate = c.P2PRate
	cc.P2P.RecvRate = c.P2PRate
	cc.P2P.MaxPacketMsgPayloadSize = p2pMaxPacketPayload
	// A message written to a peer connection goes out at the next flush,
	// which CometBFT makes flush_throttle_timeout (10 ms by default) after
	// the first write since the last one: each step of a height (the
	// proposal, the prevotes, the precommits) and each transaction's way to
	// the proposer waited that long on loopback. bench/commit.sh on four
	// brokers of the 2-core machine, 3 alternating 30 s runs each
	// (docs/benchmarks.md, "A consumer that commits after every record"), 10
	// ms -> 2 ms: a synchronous commit on an idle cluster p50 88-90 -> 53-58
	// ms; beside 100 records/s of produce, commit p50 90-95 -> 69-77 ms,
	// produce p50 97-105 -> 72-82 ms. The p99s fell too in those runs
	// (produce 290-404 -> 118-161 ms), but two later runs of the final build
	// gave 240-268 ms against 153-199 for the build before it an hour
	// earlier: the tail follows the machine's state more than this setting.
	// Open-loop produce (4 alternating 15 s runs each): 44-57 MB/s -> 40-58
	// MB/s (means 51.0 and 48.1), within the runs' spread; four idle brokers
	// (bench/idle.sh, 4 alternating runs) 12.1-15.9 % of a core -> 11.9-15.8
	// %. 1 ms and 0 measured like 2 ms (one run each); gossiping at 1 ms
	// instead of 5 ms as well made the loaded p99s 330-530 ms (busier loops
	// on shared cores), so the gossip sleep stays.
	cc.P2P.FlushThrottleTimeout = p2pFlushThrottle

	cc.Mempool.Type = cmtcfg.MempoolTypeFlood
	cc.Mempool.Recheck = false // CheckTx depends on nothing a block changes
	cc.Mempool.Broadcast = true
	cc.Mempool.Size = c.MempoolSize
	cc.Mempool.MaxTxsBytes = c.MempoolMaxTxsBytes
	cc.Mempool.MaxTxBytes = int(min(c.MaxTxBytes, chainMaxTxBytes))

	cc.Consensus.TimeoutPropose = c.TimeoutPropose
	cc.Consensus.TimeoutCommit = c.TimeoutCommit
	cc.Consensus.SkipTimeoutCommit = false
	cc.Consensus.CreateEmptyBlocks = false
	cc.Consensus.CreateEmptyBlocksInterval = c.CreateEmptyBlocksInterval
	// The consensus reactor's gossip routines sleep this long whenever they
	// have nothing to send, so each step of a height (proposal, prevotes,
	// precommits) waited up to CometBFT's default 100 ms to reach a peer:
	// about 400 ms from produce to commit with four brokers even when idle.
	cc.Consensus.PeerGossipSleepDuration = peerGossipSleep

	cc.TxIndex.Indexer = "null"
	cc.Instrumentation.Prometheus = false
	// FinalizeBlock results are hashed into the next header and kept by the
	// application; CometBFT need keep only the last one (for crash recovery).
	cc.Storage.DiscardABCIResponses = true
	return cc
}
