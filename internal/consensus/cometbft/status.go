package cometbft

import (
	"encoding/hex"
	"time"

	cs "github.com/cometbft/cometbft/consensus"
	"github.com/cometbft/cometbft/types"
)

// PeerInfo is one connected CometBFT peer.
type PeerInfo struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Outbound bool   `json:"outbound"`
	// Height is the height the peer last told us it is at (0: unknown).
	Height int64 `json:"height"`
}

// ValidatorInfo is one validator of the chain (from the genesis: the
// validator set does not change yet).
type ValidatorInfo struct {
	Address string `json:"address"`
	PubKey  string `json:"pub_key"`
	Power   int64  `json:"power"`
	Name    string `json:"name"`
}

// Peers returns the connected peers (nil when the node is not running).
func (o *Orderer) Peers() []PeerInfo {
	n := o.Node()
	if n == nil {
		return nil
	}
	var out []PeerInfo
	for _, p := range n.Switch().Peers().Copy() {
		pi := PeerInfo{ID: string(p.ID()), Outbound: p.IsOutbound()}
		if a := p.SocketAddr(); a != nil {
			pi.Addr = a.DialString()
		}
		if ps, ok := p.Get(types.PeerStateKey).(*cs.PeerState); ok {
			pi.Height = ps.GetHeight()
		}
		out = append(out, pi)
	}
	return out
}

// Validators returns the chain's validators (nil when the node is not
// running).
func (o *Orderer) Validators() []ValidatorInfo {
	n := o.Node()
	if n == nil {
		return nil
	}
	var out []ValidatorInfo
	for _, v := range n.GenesisDoc().Validators {
		out = append(out, ValidatorInfo{Address: v.Address.String(), PubKey: hex.EncodeToString(v.PubKey.Bytes()), Power: v.Power, Name: v.Name})
	}
	return out
}

// behindMargin is how many heights a peer may be ahead of this node before
// this node counts as catching up: one block in flight, one being gossiped.
const behindMargin = 2

// CatchingUp reports whether this node's state is known or likely to be
// behind the chain: it is not running yet, it is block- or state-syncing, a
// peer is working on a height more than behindMargin above ours, or it has
// committed nothing for longer than three empty-block intervals (it is cut
// off from the majority, or the chain is stalled: either way it cannot tell
// whether what it holds is current). A broker catching up must not answer
// reads as if its log were current.
func (o *Orderer) CatchingUp() bool {
	n := o.Node()
	if n == nil {
		return true
	}
	if n.ConsensusReactor().WaitSync() {
		return true
	}
	if o.cfg.CreateEmptyBlocksInterval > 0 {
		o.mu.Lock()
		a := o.mu.abci
		o.mu.Unlock()
		if a != nil {
			last := a.lastCommit.Load()
			if last == 0 || time.Since(time.Unix(0, last)) > 3*o.cfg.CreateEmptyBlocksInterval {
				return true
			}
		}
	}
	next := n.BlockStore().Height() + 1 // the height we are working on
	for _, p := range o.Peers() {
		if p.Height > next+behindMargin {
			return true
		}
	}
	return false
}
