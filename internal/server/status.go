package server

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/httpapi"
)

// clusterStatus gathers /v1/cluster: the chain's validators with the broker
// each one is and its last signed block (from the state machine, so every
// broker reports the same), this broker's height and app hash, and its
// CometBFT peers.
func (n *Node) clusterStatus(chainID string, dir []cometbft.GenesisBroker) httpapi.ClusterStatus {
	h, hash := n.broker.Info()
	signers, now := n.broker.Liveness()
	st := httpapi.ClusterStatus{NodeID: n.cfg.NodeID, ChainID: chainID, Height: h, AppHash: strings.ToUpper(hex.EncodeToString(hash)),
		BlockTime: time.UnixMilli(now).UTC(), Validators: []httpapi.ValidatorView{}, Peers: []httpapi.PeerView{}}
	up := n.broker.Upgrade()
	st.AppVersion, st.MaxAppVersion, st.Upgrade = up.Version, up.MaxVersion, up.Plan
	if !n.started.Load() { // still replaying at start
		return st
	}
	for _, v := range n.orderer.Validators() {
		vv := httpapi.ValidatorView{Address: v.Address, PubKey: v.PubKey, Power: v.Power, Name: v.Name}
		for _, b := range dir {
			if strings.EqualFold(b.Validator, v.Address) {
				id := b.NodeID
				vv.NodeID, vv.Kafka = &id, b.Kafka
			}
		}
		for _, s := range signers {
			if strings.EqualFold(hex.EncodeToString(s.Address), v.Address) {
				t := time.UnixMilli(s.LastTimeMs).UTC()
				vv.LastSignedHeight, vv.LastSignedTime = s.LastHeight, &t
			}
		}
		st.Validators = append(st.Validators, vv)
	}
	for _, p := range n.orderer.Peers() {
		st.Peers = append(st.Peers, httpapi.PeerView{ID: p.ID, Addr: p.Addr, Outbound: p.Outbound, Height: p.Height})
	}
	return st
}
