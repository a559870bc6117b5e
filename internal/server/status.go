package server

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// clusterStatus gathers /v1/cluster: the chain's validators with the broker
// each one is, its power as the chain's membership left it (a validator
// removed, voted out or rotated out is listed with why), its last signed
// block (a replica's: the height its last statement that it is caught up
// named, fsm/cluster's alive.go) and whether that is within the live
// window Metadata leads by (from the state machine, so every broker
// reports the same), each broker's own
// height as it reports it (brokerHeights), this broker's height and app
// hash, and its CometBFT peers.
func (n *Node) clusterStatus(chainID string, genesisDir []cometbft.GenesisBroker) httpapi.ClusterStatus {
	h, hash := n.broker.Info()
	signers, now := n.broker.Liveness()
	st := httpapi.ClusterStatus{NodeID: n.cfg.NodeID, ChainID: chainID, Height: h, AppHash: strings.ToUpper(hex.EncodeToString(hash)),
		BlockTime: time.UnixMilli(now).UTC(), Validators: []httpapi.ValidatorView{}, Peers: []httpapi.PeerView{}}
	up := n.broker.Upgrade()
	st.AppVersion, st.MaxAppVersion, st.Upgrade = up.Version, up.MaxVersion, up.Plan
	k := n.kafkaServing.Load()
	if !n.started.Load() || k == nil { // still replaying, or not serving Kafka yet, at start
		return st
	}
	recs := n.fsm.ValidatorRecords()
	dir := n.fsm.Directory()
	vals := n.orderer.Validators()
	for _, b := range dir {
		if b.PubKey != nil { // added by the chain, or rotated: not in the genesis
			vals = append(vals, cometbft.ValidatorInfo{Address: strings.ToUpper(hex.EncodeToString(b.Validator[:])), PubKey: hex.EncodeToString(b.PubKey), Name: fmt.Sprintf("node%d", b.NodeID)})
		}
	}
	for _, r := range recs {
		// A key the directory no longer names (an added broker's key
		// rotated out) is listed with its record.
		a := strings.ToUpper(hex.EncodeToString(r.Address[:]))
		if !slices.ContainsFunc(vals, func(v cometbft.ValidatorInfo) bool { return strings.EqualFold(v.Address, a) }) {
			vals = append(vals, cometbft.ValidatorInfo{Address: a, PubKey: hex.EncodeToString(r.PubKey)})
		}
	}
	for _, v := range vals {
		vv := httpapi.ValidatorView{Address: v.Address, PubKey: v.PubKey, Power: v.Power, Name: v.Name, Role: httpapi.RoleValidator}
		since := int64(-1) // a replica signs by what it signed after it became one (kafka's members)
		for _, r := range recs {
			if !strings.EqualFold(hex.EncodeToString(r.Address[:]), v.Address) {
				continue
			}
			// The chain changed its power (fsm/cluster's membership.go):
			// the state says what it is now.
			vv.Power = r.Power
			switch {
			case r.Reason.Final():
				vv.Role = httpapi.RoleRemoved
				vv.Removed = &httpapi.RemovalView{Reason: r.Reason.String(), Height: r.ChangedAt, EvidenceHeight: r.EvidenceHeight}
			case r.Power == 0 && (r.Reason == fsm.ReasonAdded || r.Reason == fsm.ReasonRotatedIn):
				vv.Role = httpapi.RoleReplica // added (or a replica's key rotated), never promoted since
				since = r.ChangedAtMs
			case r.Power == 0:
				vv.Role = httpapi.RoleReplica
				vv.Demoted = &httpapi.RemovalView{Reason: r.Reason.String(), Height: r.ChangedAt}
				since = r.ChangedAtMs
			}
		}
		for _, b := range dir {
			if strings.EqualFold(hex.EncodeToString(b.Validator[:]), v.Address) {
				id := b.NodeID
				vv.NodeID, vv.Kafka, vv.HTTP = &id, b.Kafka, b.HTTP
				vv.AddedAt, vv.KeyRotatedAt = b.AddedAt, b.RotatedAt
				vv.Rack = b.Rack
			}
		}
		for _, s := range signers {
			if strings.EqualFold(hex.EncodeToString(s.Address), v.Address) {
				t := time.UnixMilli(s.LastTimeMs).UTC()
				vv.LastSignedHeight, vv.LastSignedTime = s.LastHeight, &t
				vv.Signing = s.LastTimeMs > since && k.Signing(s.LastTimeMs, now)
			}
		}
		st.Validators = append(st.Validators, vv)
	}
	n.brokerHeights(st.Validators, h)
	if len(genesisDir) == 0 && len(st.Validators) == 1 {
		// A single node without a broker directory: its one validator is
		// this broker.
		id := n.cfg.NodeID
		st.Validators[0].NodeID, st.Validators[0].Height = &id, &h
		st.Validators[0].Kafka = n.cfg.AdvertisedKafka
		if st.Validators[0].Kafka == "" {
			st.Validators[0].Kafka = n.KafkaAddr() // its first listener (listenKafka ran before HTTP served)
		}
	}
	for _, p := range n.orderer.Peers() {
		st.Peers = append(st.Peers, httpapi.PeerView{ID: p.ID, Addr: p.Addr, Outbound: p.Outbound, Height: p.Height})
	}
	return st
}

// brokerHeights fills in each listed broker's height: this broker's own
// (h), every other's from its /healthz, asked at once with a second to
// answer.
func (n *Node) brokerHeights(views []httpapi.ValidatorView, h int64) {
	client := &http.Client{Timeout: time.Second}
	if n.peerClient != nil {
		client.Transport = n.peerClient.Transport
	}
	var wg sync.WaitGroup
	for i := range views {
		v := &views[i]
		switch {
		case v.NodeID == nil || v.Role == httpapi.RoleRemoved:
			continue
		case *v.NodeID == n.cfg.NodeID:
			own := h
			v.Height = &own
			continue
		case v.HTTP == "":
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(n.peerScheme + v.HTTP + "/healthz")
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var health httpapi.Health
			if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&health) != nil || health.NodeID != *v.NodeID {
				return
			}
			v.Height = &health.Height
		}()
	}
	wg.Wait()
}
