package httpapi

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/stele-io/stele/internal/fsm"
)

// Membership changes (docs/cluster.md, "Membership"): GET
// /v1/cluster/membership shows the membership epoch and the validators'
// votes towards a change; POST submits validators' signed votes for one
// (a ChangeMembership command: a validator's power, 0 to demote it to a
// replica), or the cluster administrator's. As for upgrades, the
// signatures are the authority: the route needs no login, and one broker
// cannot change the set alone.

// MembershipRequest is the body of POST /v1/cluster/membership: the
// change, the chain and membership epoch it is signed for, and the
// signatures of fsm.MembershipStatement.
type MembershipRequest struct {
	ChainID   string `json:"chain_id"`
	Epoch     uint64 `json:"epoch"`
	Validator string `json:"validator"` // the changed validator's address, hex
	Power     int64  `json:"power"`
	// Remove takes the broker out of the cluster for good (power 0).
	Remove     bool               `json:"remove,omitempty"`
	Signatures []UpgradeSignature `json:"signatures"`
	// AdminSignature is the cluster administrator's signature of the
	// statement (the key the genesis names, DIR/admin.key): it applies the
	// change alone.
	AdminSignature []byte `json:"admin_signature,omitempty"`
	// Broker, when set, adds a broker to the cluster as a replica
	// (stele cluster add): Validator is its key's address, Power 0.
	Broker *BrokerView `json:"broker,omitempty"`
}

// BrokerView is a broker a membership change adds: its node id, its
// validator key (hex) and the addresses (host:port) clients reach its
// Kafka listener and peers its HTTP API at.
type BrokerView struct {
	NodeID int32  `json:"node_id"`
	PubKey string `json:"pub_key"`
	Kafka  string `json:"kafka"`
	HTTP   string `json:"http"`
	// Rack is its rack (Kafka's broker.rack): consumers that name it
	// read from this broker (KIP-392). Empty for none.
	Rack string `json:"rack,omitempty"`
}

// MembershipVoteView is a validator's vote for a change not yet applied.
type MembershipVoteView struct {
	Voter     string      `json:"voter"`
	Epoch     uint64      `json:"epoch"`
	Validator string      `json:"validator"`
	Power     int64       `json:"power"`
	Remove    bool        `json:"remove,omitempty"`
	Broker    *BrokerView `json:"broker,omitempty"`
}

// BrokerViewOf is the JSON form of a change's broker (nil when it adds
// none).
func BrokerViewOf(e fsm.BrokerEntry) *BrokerView {
	if e.IsZero() {
		return nil
	}
	return &BrokerView{NodeID: e.NodeID, PubKey: hex.EncodeToString(e.PubKey[:]), Kafka: e.Kafka, HTTP: e.HTTP, Rack: e.Rack}
}

// Entry is the change's broker b describes.
func (b *BrokerView) Entry() (fsm.BrokerEntry, error) {
	if b == nil {
		return fsm.BrokerEntry{}, nil
	}
	e := fsm.BrokerEntry{NodeID: b.NodeID, Kafka: b.Kafka, HTTP: b.HTTP, Rack: b.Rack}
	k, err := hex.DecodeString(b.PubKey)
	if err != nil || len(k) != len(e.PubKey) {
		return e, errBadField("broker pub_key " + strconv.Quote(b.PubKey) + ": want the new broker's ed25519 key, 64 hex digits")
	}
	copy(e.PubKey[:], k)
	return e, nil
}

// MembershipView is the body of GET /v1/cluster/membership and of a
// POST's answer.
type MembershipView struct {
	Height  int64                `json:"height"`
	ChainID string               `json:"chain_id"`
	Epoch   uint64               `json:"epoch"`
	Votes   []MembershipVoteView `json:"votes"`
}

func membershipView(opts Options) MembershipView {
	st := opts.Broker.Membership()
	h, _ := opts.Broker.Info()
	v := MembershipView{Height: h, ChainID: st.ChainID, Epoch: st.Epoch, Votes: []MembershipVoteView{}}
	for _, vote := range st.Votes {
		v.Votes = append(v.Votes, MembershipVoteView{Voter: hex.EncodeToString(vote.Validator[:]), Epoch: vote.Change.Epoch,
			Validator: hex.EncodeToString(vote.Change.Validator[:]), Power: vote.Change.Power, Remove: vote.Change.Remove,
			Broker: BrokerViewOf(vote.Change.Broker)})
	}
	return v
}

func serveMembershipGet(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(membershipView(opts))
	}
}

// decodeMembershipRequest turns a POST body into the command it asks for.
func decodeMembershipRequest(body []byte) (fsm.ChangeMembership, error) {
	var req MembershipRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fsm.ChangeMembership{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fsm.ChangeMembership{}, errBadField("the body holds more than one JSON object")
	}
	c := fsm.ChangeMembership{ChainID: req.ChainID, Change: fsm.MembershipChange{Epoch: req.Epoch, Power: req.Power, Remove: req.Remove}}
	if len(req.AdminSignature) > 0 {
		c.AdminSig = req.AdminSignature
	}
	a, err := hex.DecodeString(req.Validator)
	if err != nil || len(a) != len(c.Change.Validator) {
		return fsm.ChangeMembership{}, errBadField("validator " + strconv.Quote(req.Validator) + ": want the changed validator's address, 40 hex digits")
	}
	copy(c.Change.Validator[:], a)
	if c.Change.Broker, err = req.Broker.Entry(); err != nil {
		return fsm.ChangeMembership{}, err
	}
	for _, s := range req.Signatures {
		var sig fsm.CertSig
		a, err := hex.DecodeString(s.Validator)
		if err != nil || len(a) != len(sig.Validator) {
			return fsm.ChangeMembership{}, errBadField("signer address " + strconv.Quote(s.Validator) + ": want 40 hex digits")
		}
		if len(s.Signature) != len(sig.Signature) {
			return fsm.ChangeMembership{}, errBadField("signature of " + s.Validator + ": want 64 bytes, got " + strconv.Itoa(len(s.Signature)))
		}
		copy(sig.Validator[:], a)
		copy(sig.Signature[:], s.Signature)
		c.Sigs = append(c.Sigs, sig)
	}
	return c, nil
}

func serveMembershipPost(opts Options) http.HandlerFunc {
	return serveVote(opts, decodeMembershipRequest, "{chain_id, epoch, validator, power, remove, broker: {node_id, pub_key, kafka, http}, signatures: [{validator, signature}], admin_signature}", http.StatusConflict,
		func() any { return membershipView(opts) })
}
