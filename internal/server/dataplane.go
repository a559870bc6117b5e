package server

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/dataplane"
	"github.com/stele-io/stele/internal/fsm"
)

// startDataPlane opens the batch store (DATA/batches) and the data plane:
// this broker signs with its validator key and pushes batches to the other
// brokers of the directory (the genesis's, and those the chain added, with
// the keys the chain names for them) at their HTTP addresses.
func (n *Node) startDataPlane(home, chainID string, appState cometbft.GenesisAppState, vals *fsm.ValidatorSet, reg prometheus.Registerer) error {
	key, self, err := cometbft.ValidatorKey(home)
	if err != nil {
		return err
	}
	n.key.Store(&key)
	// Under --http-tls the peers' HTTP ports serve TLS too (every broker
	// of a cluster is started alike), verified against --ssl-ca.
	scheme, client := "http://", (*http.Client)(nil)
	if n.cfg.HTTPTLS {
		lt, err := n.tlsOnce()
		if err != nil {
			return fmt.Errorf("stele/server: --http-tls: %w", err)
		}
		tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute, TLSClientConfig: lt.ClientConfig(), ForceAttemptHTTP2: false}
		scheme, client = "https://", &http.Client{Transport: tr}
	}
	n.peerScheme, n.peerClient = scheme, client
	var peers []dataplane.Peer
	for _, b := range appState.Brokers {
		raw, err := hex.DecodeString(b.Validator)
		if err != nil || len(raw) != 20 {
			return fmt.Errorf("stele/server: genesis broker %d: validator %q is not a 20-byte hex address", b.NodeID, b.Validator)
		}
		var v [20]byte
		copy(v[:], raw)
		if v == self {
			continue
		}
		if b.HTTP == "" {
			return fmt.Errorf("stele/server: genesis broker %d has no HTTP address for the data plane", b.NodeID)
		}
		peers = append(peers, dataplane.Peer{Validator: v, URL: scheme + b.HTTP})
	}
	if n.batches, err = dataplane.OpenStore(filepath.Join(n.cfg.DataDir, "batches"), dataplane.StoreOptions{Logger: n.log.With("component", "batches")}); err != nil {
		return err
	}
	n.plane, err = dataplane.New(dataplane.Options{
		Store:      n.batches,
		Key:        key,
		Validators: vals,
		Current:    n.validators,
		Peers:      peers,
		Directory:  func() []dataplane.Peer { return n.currentPlaneView(scheme, vals).peers },
		Excluded:   func(a [20]byte) bool { return n.currentPlaneView(scheme, vals).excluded[a] },
		KeyOf: func(a [20]byte) (ed25519.PublicKey, bool) {
			k, ok := n.currentPlaneView(scheme, vals).keys[a]
			return k, ok
		},
		Height:        n.height,
		ChainID:       chainID,
		Bound:         n.certificatesBound,
		MaxBatchBytes: int(appState.MaxTxBytes),
		RetainHeights: n.cfg.RetainBlocks,
		Logger:        n.log.With("component", "dataplane"),
		Metrics:       dataplane.NewMetrics(reg),
		Client:        client,
		Blocks:        n.blockTxs,
	})
	return err
}

// prefetcher starts fetching a block's missing batches, and while catching
// up the next blocks' (dataplane.Plane).
type prefetcher interface {
	Prefetch(txs [][]byte) (release func())
	Ahead(height int64, catchingUp bool)
}

// prefetchingApp has the data plane fetch a block's certified batches that
// this broker lacks, several at once, before the state machine applies
// the block and asks for them one after another (fsm.BatchSource): one
// block missing n batches then waits about one fetch, not n. The fetches
// the block did not claim end when it has been applied. While the broker
// is catching up (catchingUp), the data plane also fetches the batches of
// the next few blocks, asking a peer what they are, so that block sync
// does not wait for a round trip per block.
type prefetchingApp struct {
	consensus.Application
	batches    prefetcher
	catchingUp func() bool
}

// AppVersion and FinalizedAppVersion pass the broker's app version on
// (consensus.Versioned), which embedding alone would hide.
func (a prefetchingApp) AppVersion() uint64 {
	return a.Application.(consensus.Versioned).AppVersion()
}

func (a prefetchingApp) FinalizedAppVersion() uint64 {
	return a.Application.(consensus.Versioned).FinalizedAppVersion()
}

// FinalizedValidatorUpdates and Validators pass the broker's validator
// set on (consensus.Membership).
func (a prefetchingApp) FinalizedValidatorUpdates() []consensus.ValidatorUpdate {
	if m, ok := a.Application.(consensus.Membership); ok {
		return m.FinalizedValidatorUpdates()
	}
	return nil
}

func (a prefetchingApp) Validators() []consensus.ValidatorUpdate {
	if m, ok := a.Application.(consensus.Membership); ok {
		return m.Validators()
	}
	return nil
}

// OpenProposal and CheckProposal pass the broker's consensus.Proposer on.
func (a prefetchingApp) OpenProposal(height int64, now time.Time) [][]byte {
	return a.Application.(consensus.Proposer).OpenProposal(height, now)
}

func (a prefetchingApp) CheckProposal(height int64, now time.Time, txs [][]byte) error {
	return a.Application.(consensus.Proposer).CheckProposal(height, now, txs)
}

// ScheduleProposal passes the broker's consensus.Scheduler on.
func (a prefetchingApp) ScheduleProposal(height int64, now time.Time, txs [][]byte, sizes []int64, room int64) []int {
	return a.Application.(consensus.Scheduler).ScheduleProposal(height, now, txs, sizes, room)
}

var (
	_ consensus.Versioned  = prefetchingApp{}
	_ consensus.Proposer   = prefetchingApp{}
	_ consensus.Scheduler  = prefetchingApp{}
	_ consensus.Membership = prefetchingApp{}
)

func (a prefetchingApp) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	a.batches.Ahead(b.Height, a.catchingUp())
	release := a.batches.Prefetch(b.Txs)
	defer release()
	return a.Application.FinalizeBlock(b)
}

// catchingUp reports whether this broker is catching up (true before its
// consensus exists: it is replaying stored blocks).
func (n *Node) catchingUp() bool {
	o := n.consensus.Load()
	return o == nil || o.CatchingUp()
}

// blockTxs returns the transactions of the committed block at height, if
// this broker's block store holds it (the data plane serves them to peers
// catching up).
func (n *Node) blockTxs(height int64) ([][]byte, bool) {
	o := n.consensus.Load()
	if o == nil {
		return nil, false
	}
	return o.BlockTxs(height)
}

// validators is the validator set as of the last commit (nil until the
// state machine is open: the data plane then uses the genesis set).
func (n *Node) validators() *fsm.ValidatorSet {
	if n.fsm == nil {
		return nil
	}
	return n.fsm.CommittedValidators()
}

// planeView is what the data plane reads of the membership as of the last
// commit, derived once per change of it: the other brokers of the
// directory with the keys the chain names for them, less those taken out
// (whom batches are pushed to); the validator keys taken out (removed,
// voted out, or rotated out: their pushes are refused); and every key the
// chain has named, taken out or not (what authenticates a request: a
// broker taken out still fetches the batches of the blocks up to the one
// that took it out, or it would never apply that block).
type planeView struct {
	members  *fsm.Members
	peers    []dataplane.Peer
	excluded map[[20]byte]bool
	keys     map[[20]byte]ed25519.PublicKey
}

// currentPlaneView is the planeView of the last commit's membership (nil
// peers, nobody excluded, until the state machine is open: the data plane
// then uses the genesis peers).
func (n *Node) currentPlaneView(scheme string, genesis *fsm.ValidatorSet) *planeView {
	if n.fsm == nil {
		return &planeView{}
	}
	m := n.fsm.Members()
	if v := n.planeView.Load(); v != nil && v.members == m {
		return v
	}
	v := &planeView{members: m, excluded: map[[20]byte]bool{}, keys: map[[20]byte]ed25519.PublicKey{}}
	for _, r := range m.Records {
		if r.Reason.Final() {
			v.excluded[r.Address] = true
		}
		v.keys[r.Address] = r.PubKey
	}
	for _, b := range m.Directory {
		pub := b.PubKey
		if pub == nil {
			if g, ok := genesis.Lookup(b.Validator); ok {
				pub = g.PubKey
			}
		}
		if pub != nil {
			v.keys[b.Validator] = pub
		}
		if b.NodeID == n.cfg.NodeID || v.excluded[b.Validator] || b.HTTP == "" {
			continue
		}
		v.peers = append(v.peers, dataplane.Peer{Validator: b.Validator, URL: scheme + b.HTTP, PubKey: pub})
	}
	if v.peers == nil {
		v.peers = []dataplane.Peer{} // a directory of this broker alone: no peers, not the genesis's
	}
	n.planeView.Store(v)
	return v
}

// chainKey is the validator key the chain names for this broker's node id
// and the height of the change that named it (0: the genesis's), as of
// the last commit (cometbft.KeyRotation).
func (n *Node) chainKey() ([20]byte, int64) {
	if n.fsm == nil {
		return [20]byte{}, 0
	}
	for _, b := range n.fsm.Members().Directory {
		if b.NodeID == n.cfg.NodeID {
			return b.Validator, b.RotatedAt
		}
	}
	return [20]byte{}, 0
}

// rotatedKey makes the data plane, and a replica's statements (alive.go),
// sign with the key the chain rotated this broker's to
// (cometbft.Config.OnKey).
func (n *Node) rotatedKey(key ed25519.PrivateKey) {
	n.key.Store(&key)
	if n.plane != nil {
		n.plane.SetKey(key)
	}
}

// height is the last committed height (0 until the state machine is open).
func (n *Node) height() int64 {
	if n.fsm == nil {
		return 0
	}
	h, _ := n.fsm.Info()
	return h
}

// certificatesBound reports whether the batches certified now must name
// the chain (fsm.FSM.CertificatesBound; false until the state machine is
// open).
func (n *Node) certificatesBound() bool {
	return n.fsm != nil && n.fsm.CertificatesBound()
}

// pruneBatches drops stored batches no certificate can still name, every
// ten seconds until the node closes.
func (n *Node) pruneBatches() {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			n.plane.Prune(n.height())
		case <-n.done:
			return
		}
	}
}
