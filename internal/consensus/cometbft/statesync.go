package cometbft

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	cmtmath "github.com/cometbft/cometbft/libs/math"
	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	"github.com/cometbft/cometbft/node"
	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
	sm "github.com/cometbft/cometbft/state"
	"github.com/cometbft/cometbft/statesync"
	"github.com/cometbft/cometbft/types"
	"github.com/cometbft/cometbft/version"
)

// State sync: a node whose CometBFT state is empty (new, or wiped) restores
// an application snapshot from its peers, then fetches the blocks after it
// by block sync, instead of replaying every block from genesis, which is
// impossible once peers have pruned old blocks.
//
// CometBFT checks the snapshot's app hash against a header it verifies
// itself. Its own light client needs a trusted height and header hash from
// the operator; this node instead trusts the validators in its genesis
// and verifies every header it needs as CometBFT's light client skips to
// a header (genesisStateProvider): the header's own validator set hashes
// to the header's and more than two thirds of its power signed the
// commit, and genesis validators holding more than a third of the
// genesis power signed it too. The membership changes since the genesis
// (fsm/cluster's membership.go) need not be replayed, as long as more
// than a third of the genesis power still signs: a broker joining a
// cluster that has replaced most of its genesis validators cannot state-
// sync (the error says so), and replays from genesis instead. Headers,
// validator sets and consensus parameters are fetched over CometBFT's RPC
// from the peers listed in StateSyncConfig.RPCServers, whose nodes must
// serve RPC (Config.RPCListen); a peer that serves anything unverifiable is
// skipped for the next.

// State sync modes (StateSyncConfig.Mode).
const (
	// StateSyncOff never state-syncs: a node with an empty state replays
	// blocks from genesis.
	StateSyncOff = "off"
	// StateSyncOn state-syncs whenever the node starts with an empty
	// CometBFT state and has peers.
	StateSyncOn = "on"
	// StateSyncAuto state-syncs a node that starts with an empty
	// application state if a peer's RPC reports that its earliest block is
	// above the chain's first (blocks were pruned, so replay from genesis
	// cannot work); otherwise it replays. A fresh cluster may run with it.
	StateSyncAuto = "auto"
)

// Defaults of StateSyncConfig.
const (
	// DefaultDiscoveryTime is how long a syncing node collects snapshot
	// offers before choosing (CometBFT's minimum is 5 s).
	DefaultDiscoveryTime = 10 * time.Second
	// DefaultChunkRequestTimeout is how long it waits for a chunk before
	// asking another peer.
	DefaultChunkRequestTimeout = 10 * time.Second
)

// StateSyncConfig configures state sync.
type StateSyncConfig struct {
	// Mode is StateSyncOff (the default when empty), StateSyncOn or
	// StateSyncAuto.
	Mode string
	// RPCServers are the peers' CometBFT RPC addresses (host:port or
	// http://host:port), at least one, for headers and consensus parameters.
	RPCServers []string
	// DiscoveryTime: see DefaultDiscoveryTime (0 means the default).
	DiscoveryTime time.Duration
	// ChunkRequestTimeout: see DefaultChunkRequestTimeout (0 means the default).
	ChunkRequestTimeout time.Duration
}

func (c StateSyncConfig) validate() error {
	switch c.Mode {
	case "", StateSyncOff:
		return nil
	case StateSyncOn, StateSyncAuto:
	default:
		return fmt.Errorf("state_sync %q: want off, on or auto", c.Mode)
	}
	if len(c.RPCServers) == 0 {
		return errors.New("state_sync needs state_sync_rpc_servers")
	}
	for _, s := range c.RPCServers {
		if strings.TrimSpace(s) == "" || strings.ContainsAny(s, " ,") {
			return fmt.Errorf("state_sync_rpc_servers: bad address %q", s)
		}
	}
	if c.DiscoveryTime != 0 && c.DiscoveryTime < 5*time.Second {
		return fmt.Errorf("state_sync_discovery_time %v: at least 5s (CometBFT's minimum)", c.DiscoveryTime)
	}
	if c.ChunkRequestTimeout < 0 {
		return fmt.Errorf("state_sync_chunk_timeout %v is negative", c.ChunkRequestTimeout)
	}
	return nil
}

func (c StateSyncConfig) enabled() bool { return c.Mode == StateSyncOn || c.Mode == StateSyncAuto }

// wantStateSync decides whether this start state-syncs. appHeight is the
// application's Info height; CometBFT itself skips state sync when its own
// state is not empty.
func (c StateSyncConfig) wantStateSync(ctx context.Context, chainID string, initialHeight, appHeight int64, logger *slog.Logger) bool {
	switch {
	case !c.enabled() || appHeight > 0:
		return false
	case c.Mode == StateSyncOn:
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, server := range c.RPCServers {
		client, err := rpcClient(server)
		if err != nil {
			continue
		}
		st, err := client.Status(ctx)
		if err != nil {
			logger.Info("state sync: peer RPC not reachable", "server", server, "err", err)
			continue
		}
		if st.NodeInfo.Network == chainID && st.SyncInfo.EarliestBlockHeight > max(initialHeight, 1) {
			logger.Info("state sync: peers have pruned blocks; syncing from a snapshot",
				"server", server, "earliest_block", st.SyncInfo.EarliestBlockHeight)
			return true
		}
	}
	return false
}

// ErrStranded is returned by Start when this broker's state is behind every
// block its peers still keep: block sync cannot bring it up to date, and
// CometBFT state-syncs only an empty node.
var ErrStranded = errors.New("stele/consensus/cometbft: the broker is behind every block its peers keep")

// stranded asks every RPC server for the lowest height it keeps and returns
// it when all of them answered for this chain and none keeps the block
// after appHeight; a peer that does not answer might, so then it returns
// false.
func (c StateSyncConfig) stranded(ctx context.Context, chainID string, appHeight int64, logger *slog.Logger) (int64, bool) {
	if !c.enabled() || appHeight == 0 || len(c.RPCServers) == 0 {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lowest := int64(0)
	for _, server := range c.RPCServers {
		client, err := rpcClient(server)
		if err != nil {
			return 0, false
		}
		st, err := client.Status(ctx)
		if err != nil || st.NodeInfo.Network != chainID {
			logger.Info("catching up: peer RPC not reachable", "server", server, "err", err)
			return 0, false
		}
		if st.SyncInfo.EarliestBlockHeight <= appHeight+1 {
			return 0, false
		}
		if lowest == 0 || st.SyncInfo.EarliestBlockHeight < lowest {
			lowest = st.SyncInfo.EarliestBlockHeight
		}
	}
	return lowest, true
}

// ErrUnverifiable is wrapped by the state provider's errors when no RPC
// server served a header that verifies against the genesis validators.
var ErrUnverifiable = errors.New("stele/consensus/cometbft: no verifiable light block")

// genesisStateProvider is a statesync.StateProvider that verifies every
// light block against the genesis validator set (see the top of this file).
type genesisStateProvider struct {
	genesis   sm.State
	providers []provider.Provider
	clients   []*rpchttp.HTTP
	logger    *slog.Logger
}

var _ statesync.StateProvider = (*genesisStateProvider)(nil)

func newGenesisStateProvider(doc *types.GenesisDoc, servers []string, logger *slog.Logger) (*genesisStateProvider, error) {
	st, err := sm.MakeGenesisState(doc)
	if err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: state sync: %w", err)
	}
	p := &genesisStateProvider{genesis: st, logger: logger}
	for _, s := range servers {
		c, err := rpcClient(s)
		if err != nil {
			return nil, fmt.Errorf("%w: state sync RPC server %q: %v", ErrConfig, s, err)
		}
		p.clients = append(p.clients, c)
		p.providers = append(p.providers, lighthttp.NewWithClient(st.ChainID, c))
	}
	return p, nil
}

// rpcClient makes a client of a CometBFT RPC server.
func rpcClient(server string) (*rpchttp.HTTP, error) {
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	return rpchttp.NewWithTimeout(server, "/websocket", 5)
}

// verify checks that lb is a header of this chain committed by more than
// two thirds of the power of the validator set it carries (which hashes
// to the header's), among whose signers genesis validators hold more than
// a third of the genesis power.
func (p *genesisStateProvider) verify(lb *types.LightBlock, height int64) error {
	if lb.Height != height {
		return fmt.Errorf("asked for height %d, got %d", height, lb.Height)
	}
	if err := lb.ValidateBasic(p.genesis.ChainID); err != nil { // the set hashes to ValidatorsHash
		return err
	}
	vals := p.genesis.Validators
	if bytes.Equal(lb.ValidatorsHash, vals.Hash()) {
		return vals.VerifyCommitLight(p.genesis.ChainID, lb.Commit.BlockID, lb.Height, lb.Commit)
	}
	if err := lb.ValidatorSet.VerifyCommitLight(p.genesis.ChainID, lb.Commit.BlockID, lb.Height, lb.Commit); err != nil {
		return err
	}
	if err := vals.VerifyCommitLightTrusting(p.genesis.ChainID, lb.Commit, cmtmath.Fraction{Numerator: 1, Denominator: 3}); err != nil {
		return fmt.Errorf("the validator set changed since the genesis, and the genesis validators signing this header hold a third of the genesis power or less (%w): this broker cannot verify the chain's headers from its genesis; start it without state sync to replay the chain", err)
	}
	return nil
}

// lightBlock returns the verified light block at height from the first
// RPC server that serves one.
func (p *genesisStateProvider) lightBlock(ctx context.Context, height int64) (*types.LightBlock, error) {
	var errs []error
	for i, prov := range p.providers {
		lb, err := prov.LightBlock(ctx, height)
		if err == nil {
			if err = p.verify(lb, height); err != nil {
				p.logger.Warn("state sync: peer served a light block that does not verify", "server", p.clients[i].Remote(), "height", height, "err", err)
			}
		}
		if err == nil {
			return lb, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.clients[i].Remote(), err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w at height %d: %w", ErrUnverifiable, height, errors.Join(errs...))
}

// AppHash implements statesync.StateProvider: the app hash after height,
// from header height+1. Header height+2 must exist too (State needs it).
func (p *genesisStateProvider) AppHash(ctx context.Context, height uint64) ([]byte, error) {
	next, err := p.lightBlock(ctx, int64(height)+1)
	if err != nil {
		return nil, err
	}
	if _, err := p.lightBlock(ctx, int64(height)+2); err != nil {
		return nil, err
	}
	return next.AppHash, nil
}

// Commit implements statesync.StateProvider.
func (p *genesisStateProvider) Commit(ctx context.Context, height uint64) (*types.Commit, error) {
	lb, err := p.lightBlock(ctx, int64(height))
	if err != nil {
		return nil, err
	}
	return lb.Commit, nil
}

// State implements statesync.StateProvider, as CometBFT's light client
// provider does: height is the snapshot's (last) block, height+1 the
// current one, height+2 the next.
func (p *genesisStateProvider) State(ctx context.Context, height uint64) (sm.State, error) {
	last, err := p.lightBlock(ctx, int64(height))
	if err != nil {
		return sm.State{}, err
	}
	cur, err := p.lightBlock(ctx, int64(height)+1)
	if err != nil {
		return sm.State{}, err
	}
	next, err := p.lightBlock(ctx, int64(height)+2)
	if err != nil {
		return sm.State{}, err
	}
	if !cur.LastBlockID.Equals(last.Commit.BlockID) || !next.LastBlockID.Equals(cur.Commit.BlockID) {
		return sm.State{}, fmt.Errorf("%w: headers %d-%d do not chain", ErrUnverifiable, height, height+2)
	}
	params, err := p.consensusParams(ctx, cur)
	if err != nil {
		return sm.State{}, err
	}
	st := sm.State{
		ChainID:       p.genesis.ChainID,
		InitialHeight: p.genesis.InitialHeight,

		LastBlockHeight: last.Height,
		LastBlockTime:   last.Time,
		LastBlockID:     last.Commit.BlockID,
		AppHash:         cur.AppHash,
		LastResultsHash: cur.LastResultsHash,

		LastValidators:              last.ValidatorSet,
		Validators:                  cur.ValidatorSet,
		NextValidators:              next.ValidatorSet,
		LastHeightValidatorsChanged: next.Height,

		ConsensusParams:                  params,
		LastHeightConsensusParamsChanged: cur.Height,
	}
	st.Version.Consensus = cur.Version
	st.Version.Software = version.TMCoreSemVer
	return st, nil
}

// consensusParams fetches the consensus parameters in force at lb's height
// and checks them against its header.
func (p *genesisStateProvider) consensusParams(ctx context.Context, lb *types.LightBlock) (types.ConsensusParams, error) {
	var errs []error
	for _, c := range p.clients {
		h := lb.Height
		res, err := c.ConsensusParams(ctx, &h)
		if err == nil && !bytes.Equal(res.ConsensusParams.Hash(), lb.ConsensusHash) {
			err = errors.New("consensus parameters do not match the header")
		}
		if err == nil {
			return res.ConsensusParams, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.Remote(), err))
	}
	return types.ConsensusParams{}, fmt.Errorf("%w: consensus parameters at height %d: %w", ErrUnverifiable, lb.Height, errors.Join(errs...))
}

// stateSyncOptions switches state sync on in cc, with the genesis-rooted
// state provider, when this start should state-sync (wantStateSync), and
// returns the node options that carry the provider.
func (o *Orderer) stateSyncOptions(ctx context.Context, doc *types.GenesisDoc, cc *cmtcfg.Config) ([]node.Option, error) {
	ss := o.cfg.StateSync
	appHeight, _ := o.app.Info()
	if lowest, ok := ss.stranded(ctx, doc.ChainID, appHeight, o.logger); ok {
		return nil, fmt.Errorf("%w: its state is at height %d and every peer keeps blocks from height %d on, "+
			"so it cannot catch up by block sync; rebuild it by state sync (docs/cluster.md, \"Catching up and joining\")",
			ErrStranded, appHeight, lowest)
	}
	if !ss.wantStateSync(ctx, doc.ChainID, doc.InitialHeight, appHeight, o.logger) {
		return nil, nil
	}
	sp, err := newGenesisStateProvider(doc, ss.RPCServers, o.logger.With("module", "statesync"))
	if err != nil {
		return nil, err
	}
	// Set after cc.ValidateBasic: CometBFT's check demands a trusted
	// height and hash, which the genesis-rooted provider does not use.
	cc.StateSync.Enable = true
	cc.StateSync.RPCServers = ss.RPCServers
	cc.StateSync.TempDir = filepath.Join(o.cfg.Home, "data")
	cc.StateSync.DiscoveryTime = cmp.Or(ss.DiscoveryTime, DefaultDiscoveryTime)
	cc.StateSync.ChunkRequestTimeout = cmp.Or(ss.ChunkRequestTimeout, DefaultChunkRequestTimeout)
	o.logger.Info("state sync: restoring a snapshot from peers", "rpc_servers", ss.RPCServers)
	return []node.Option{node.StateProvider(sp)}, nil
}
