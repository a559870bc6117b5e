package server

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// A replica says it is caught up (fsm/cluster's alive.go): every
// aliveInterval, while this broker is a replica of the directory (no
// voting power, not taken out), runs an app version that has the
// statement, and is not catching up, it orders its statement, signed with
// its validator key, that it has applied the chain up to its last
// committed height. The chain records it as signing, so Metadata makes it
// a partition leader like a validator that signs, and GET /v1/cluster
// shows it signing. A validator's liveness is its commit signatures: it
// says nothing.

// aliveInterval is how often a replica orders its statement: a few times
// within the live window (10 s of block time), so one lost or late does
// not cost it its partitions.
const aliveInterval = 2 * time.Second

// sayAlive orders this broker's statements while it is a replica, until
// the node closes.
func (n *Node) sayAlive(chainID string) {
	defer n.bg.Done()
	t := time.NewTicker(aliveInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			n.aliveOnce(chainID)
		case <-n.done:
			return
		}
	}
}

// aliveOnce orders one statement, if this broker is a replica that keeps
// up, and waits for its block (the next tick comes after).
func (n *Node) aliveOnce(chainID string) {
	k := n.key.Load()
	if n.fsm == nil || k == nil || !n.started.Load() || n.orderer.CatchingUp() {
		return
	}
	if n.fsm.Upgrade().Version < fsm.AliveVersion {
		return
	}
	key := ed25519.PrivateKey(*k)
	addr, _ := n.chainKey()
	self := sha256.Sum256(key.Public().(ed25519.PublicKey)) // CometBFT's address: its first 20 bytes
	if addr == ([20]byte{}) || addr != [20]byte(self[:20]) {
		return // not in the directory, or the chain's key is not the one this broker signs with yet
	}
	if vs := n.fsm.CommittedValidators(); vs != nil {
		if _, ok := vs.Lookup(addr); ok {
			return // a validator: its commit signatures say it is alive
		}
	}
	for _, r := range n.fsm.Members().Records {
		if r.Address == addr && r.Reason.Final() {
			return // taken out of the cluster
		}
	}
	h, _ := n.fsm.Info()
	if h <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.broker.SubmitOne(ctx, fsm.SignAlive(chainID, n.cfg.NodeID, h, key))
	switch {
	case err != nil:
		n.log.Debug("a replica's statement that it is caught up was not ordered", "height", h, "err", err)
	case res.Code != 0:
		n.log.Debug("a replica's statement that it is caught up was refused", "height", h, "code", res.Code, "reason", res.Message)
	}
}
