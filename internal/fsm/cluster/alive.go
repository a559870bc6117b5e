package cluster

// Replicas that are caught up (docs/cluster.md, "Read replicas"): from app
// version 10 (AliveVersion) a replica, a broker of the directory without
// voting power, signs with its validator key that it has applied the
// chain up to a height, and orders the statement (ReplicaAlive) every few
// seconds while it is not catching up (internal/server's alive.go). The
// chain records an accepted statement where it records commit signatures
// (trust's liveness.go): the replica counts as signing, at the block time
// of the block that ordered it, so Metadata makes it a partition leader
// as it does a validator that signs, and GET /v1/cluster shows it
// signing; every broker derives the same from the chain.
//
// A statement is accepted when it is signed by the key the directory
// names for its node id, for this chain, by a broker that is neither a
// validator with power (a validator's liveness is its commit signatures)
// nor out of the cluster (removed, voted out, or a key rotated out), for
// a height the chain has committed, at most MaxAliveLag blocks below the
// block that orders it (a replica that far behind is not caught up), and
// above the height of the key's last accepted statement (a statement
// replayed is refused). A replica still decides what it claims: a Byzantine one can
// say it is caught up when it is not. Leading a partition gives it
// nothing a client does not already trust the broker it talks to with
// (docs/cluster.md, "What a cluster guarantees").
//
// State, authenticated (one leaf per replica that made a statement):
//
//	u/replica-alive/<address>   the height its last accepted statement
//	                            named (u64), which the next must exceed
//
// The liveness record is the signers' (m/signers, outside the trie: it
// changes with every block, trust's liveness.go), which Metadata and GET
// /v1/cluster read; what a statement's result depends on is in the trie,
// so a broker restored from a snapshot decides as every other broker.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// AliveVersion is the app version from which replicas order ReplicaAlive.
const AliveVersion = 10

// KindReplicaAlive is a replica's signed statement that it is caught up.
const KindReplicaAlive core.Kind = 36

// MaxAliveLag is how many blocks below the block that orders it the
// height a ReplicaAlive names may be: a statement takes a certification
// and a block or two to be ordered.
const MaxAliveLag = 50

var (
	// aliveStatementPrefix opens an AliveStatement.
	aliveStatementPrefix = []byte("stele/replica-alive/v1\x00")
	replicaAlivePfx      = []byte("u/replica-alive/")
)

// aliveState is the height of each replica's last accepted statement.
type aliveState struct {
	aliveHeights map[[20]byte]int64
	aliveDirty   map[[20]byte]bool
}

// ReplicaAlive says that the broker with node id NodeID has applied chain
// ChainID up to Height, signed (Sig) with the key the directory names for
// it.
type ReplicaAlive struct {
	ChainID string
	NodeID  int32
	Height  int64
	Sig     [ed25519.SignatureSize]byte
}

func (ReplicaAlive) Kind() core.Kind { return KindReplicaAlive }

func (c ReplicaAlive) Encode(w *core.Writer) {
	w.Str(c.ChainID)
	w.I32(c.NodeID)
	w.I64(c.Height)
	w.B = append(w.B, c.Sig[:]...)
}

func decodeReplicaAlive(r *core.Reader) ReplicaAlive {
	c := ReplicaAlive{ChainID: r.Str(), NodeID: r.I32(), Height: r.I64()}
	copy(c.Sig[:], r.Take(ed25519.SignatureSize))
	return c
}

// AliveStatement is what the broker with node id nodeID signs to say it has
// applied chain chainID up to height.
func AliveStatement(chainID string, nodeID int32, height int64) []byte {
	w := &core.Writer{B: append([]byte(nil), aliveStatementPrefix...)}
	w.Str(chainID)
	w.I32(nodeID)
	w.I64(height)
	return w.B
}

// SignAlive returns the ReplicaAlive of the broker with node id nodeID,
// signed with key, for chain chainID at height.
func SignAlive(chainID string, nodeID int32, height int64, key ed25519.PrivateKey) ReplicaAlive {
	c := ReplicaAlive{ChainID: chainID, NodeID: nodeID, Height: height}
	copy(c.Sig[:], ed25519.Sign(key, AliveStatement(chainID, nodeID, height)))
	return c
}

// checkReplicaAlive is the stateless check of a ReplicaAlive.
func checkReplicaAlive(c ReplicaAlive) core.Result {
	switch {
	case c.ChainID == "" || len(c.ChainID) > trust.MaxChainID:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a replica's statement names the chain it is signed for, 1 to %d bytes, got %d", trust.MaxChainID, len(c.ChainID)))
	case c.NodeID < 0:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a broker's node id is not negative, got %d", c.NodeID))
	case c.Height <= 0:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a replica's statement names a committed height, got %d", c.Height))
	}
	return core.Result{}
}

// replicaAlive applies a ReplicaAlive.
func (f *Cluster) replicaAlive(c ReplicaAlive) core.Result {
	if f.opts.ChainID == "" {
		return core.Fail(kerr.ClusterAuthorizationFailed.Code, "this broker has no chain id to check a replica's statement against")
	}
	if c.ChainID != f.opts.ChainID {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the statement is for chain %q, and this is chain %q", c.ChainID, f.opts.ChainID))
	}
	b, ok := f.brokerByID(c.NodeID)
	if !ok {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node %d is no broker of this chain", c.NodeID))
	}
	if vs := f.Trust.Validators(); vs != nil {
		if _, ok := vs.Lookup(b.Validator); ok {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node %d is a validator: its commit signatures say it is alive", c.NodeID))
		}
	}
	key, _, res := f.changeTarget(b.Validator) // its key; refused when taken out for good
	if res.Code != 0 {
		return res
	}
	if len(key) != ed25519.PublicKeySize || !ed25519.Verify(key, AliveStatement(c.ChainID, c.NodeID, c.Height), c.Sig[:]) {
		return core.Fail(kerr.ClusterAuthorizationFailed.Code, fmt.Sprintf("the statement is not signed by node %d's key %X", c.NodeID, b.Validator))
	}
	switch last := f.aliveHeights[b.Validator]; {
	case c.Height >= f.Height:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node %d says it applied height %d, and the chain is at %d", c.NodeID, c.Height, f.Height-1))
	case c.Height < f.Height-MaxAliveLag:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node %d says it applied height %d, more than %d blocks below %d: it is not caught up", c.NodeID, c.Height, MaxAliveLag, f.Height))
	case c.Height <= last:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node %d's statement for height %d is not above its last, %d", c.NodeID, c.Height, last))
	}
	f.aliveHeights[b.Validator] = c.Height
	f.aliveDirty[b.Validator] = true
	f.Trust.RecordAlive(b.Validator, c.Height)
	return core.Result{}
}

// loadAlive reads the replicas' last statement heights.
func (f *Cluster) loadAlive() error {
	f.aliveHeights, f.aliveDirty = map[[20]byte]int64{}, map[[20]byte]bool{}
	return f.Store.Scan(replicaAlivePfx, func(k, v []byte) error {
		var a [20]byte
		if len(k) != len(replicaAlivePfx)+len(a) || len(v) != 8 {
			return fmt.Errorf("stele/fsm: bad replica statement record %x", k)
		}
		copy(a[:], k[len(replicaAlivePfx):])
		f.aliveHeights[a] = int64(binary.BigEndian.Uint64(v))
		return nil
	})
}

// persistAlive writes the heights the block changed, in address order.
func (f *Cluster) persistAlive(b *core.StateBatch) {
	if len(f.aliveDirty) == 0 {
		return
	}
	addrs := make([][20]byte, 0, len(f.aliveDirty))
	for a := range f.aliveDirty {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return bytes.Compare(addrs[i][:], addrs[j][:]) < 0 })
	for _, a := range addrs {
		b.Set(append(append([]byte(nil), replicaAlivePfx...), a[:]...), binary.BigEndian.AppendUint64(nil, uint64(f.aliveHeights[a])))
	}
	clear(f.aliveDirty)
}

// registerReplicaAlive registers ReplicaAlive, which app versions below
// AliveVersion do not decode (RegisterCluster calls it).
func registerReplicaAlive(r *core.Registry, _ *topics.TopicHooks) {
	s := core.RegisterModuleCommand(r, clusterOf, KindReplicaAlive, "ReplicaAlive", ModCluster, decodeReplicaAlive,
		func(c core.Command) core.Result { return checkReplicaAlive(c.(ReplicaAlive)) },
		func(f *Cluster, c ReplicaAlive, _ core.CmdAt) core.Result { return f.replicaAlive(c) })
	s.Since = AliveVersion
}
