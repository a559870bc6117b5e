package httpapi

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
)

// Upgrades (docs/cluster.md, "Upgrades"): GET /v1/cluster/upgrade shows the
// app version, the scheduled upgrade and the votes towards another; POST
// submits validators' signed votes (a ScheduleUpgrade command), which name
// the chain they are signed for; GET shows this chain's id to sign for.

// UpgradeSignature is one validator's ed25519 signature of
// fsm.UpgradeStatement(chain_id, upgrade): its address in hex, the signature in base64.
type UpgradeSignature struct {
	Validator string `json:"validator"`
	Signature []byte `json:"signature"`
}

// UpgradeRequest is the body of POST /v1/cluster/upgrade.
type UpgradeRequest struct {
	// ChainID is the chain the votes are signed for; a broker of another
	// chain refuses them.
	ChainID    string             `json:"chain_id"`
	Height     int64              `json:"height"`
	Version    uint32             `json:"version"`
	Name       string             `json:"name"`
	Signatures []UpgradeSignature `json:"signatures"`
}

// UpgradeVoteView is a validator's vote for an upgrade not yet scheduled.
type UpgradeVoteView struct {
	Validator string          `json:"validator"`
	Upgrade   fsm.UpgradePlan `json:"upgrade"`
}

// UpgradeView is the body of GET /v1/cluster/upgrade and of a POST's
// answer: the committed app version (and the highest this broker's binary
// runs), the scheduled upgrade, and the votes towards another.
type UpgradeView struct {
	Height        int64             `json:"height"`
	ChainID       string            `json:"chain_id"`
	AppVersion    uint32            `json:"app_version"`
	MaxAppVersion uint32            `json:"max_app_version"`
	Scheduled     *fsm.UpgradePlan  `json:"scheduled,omitempty"`
	Votes         []UpgradeVoteView `json:"votes"`
}

func upgradeView(opts Options) UpgradeView {
	st := opts.Broker.Upgrade()
	v := UpgradeView{Height: st.Height, ChainID: st.ChainID, AppVersion: st.Version, MaxAppVersion: st.MaxVersion, Scheduled: st.Plan, Votes: []UpgradeVoteView{}}
	for _, vote := range st.Votes {
		v.Votes = append(v.Votes, UpgradeVoteView{Validator: hex.EncodeToString(vote.Validator[:]), Upgrade: vote.Plan})
	}
	return v
}

func serveUpgradeGet(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(upgradeView(opts))
	}
}

// decodeUpgradeRequest turns a POST body into the command it asks for.
func decodeUpgradeRequest(body []byte) (fsm.ScheduleUpgrade, error) {
	var req UpgradeRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fsm.ScheduleUpgrade{}, err
	}
	c := fsm.ScheduleUpgrade{ChainID: req.ChainID, Plan: fsm.UpgradePlan{Height: req.Height, Version: req.Version, Name: req.Name}}
	for _, s := range req.Signatures {
		var sig fsm.CertSig
		a, err := hex.DecodeString(s.Validator)
		if err != nil || len(a) != len(sig.Validator) {
			return fsm.ScheduleUpgrade{}, errBadField("validator address " + strconv.Quote(s.Validator) + ": want 40 hex digits")
		}
		if len(s.Signature) != len(sig.Signature) {
			return fsm.ScheduleUpgrade{}, errBadField("signature of " + s.Validator + ": want 64 bytes, got " + strconv.Itoa(len(s.Signature)))
		}
		copy(sig.Validator[:], a)
		copy(sig.Signature[:], s.Signature)
		c.Sigs = append(c.Sigs, sig)
	}
	return c, nil
}

type errBadField string

func (e errBadField) Error() string { return string(e) }

func serveUpgradePost(opts Options) http.HandlerFunc {
	return serveVote(opts, decodeUpgradeRequest, "{chain_id, height, version, name, signatures: [{validator, signature}]}", http.StatusBadRequest,
		func() any { return upgradeView(opts) })
}

// serveVote answers a POST of signed votes (an upgrade's, a membership
// change's): the body decoded into its command, checked, submitted and
// waited for; a refusal is 403 for a signature that does not authorize,
// policy for POLICY_VIOLATION, 400 for any other, and success the view.
func serveVote[C fsm.Command](opts Options, decode func([]byte) (C, error), shape string, policy int, view func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 256<<10))
		if err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		}
		c, err := decode(body)
		if err != nil {
			httpError(w, http.StatusBadRequest, "the body must be a JSON object %s: %v", shape, err)
			return
		}
		if res := fsm.CheckCommand(c); res.Code != 0 {
			httpError(w, http.StatusBadRequest, "%s", res.Message)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := opts.Broker.SubmitOne(ctx, c)
		switch {
		case err != nil:
			httpError(w, http.StatusServiceUnavailable, "the vote was not confirmed (it may still be applied): %v", err)
		case res.Code == kerr.ClusterAuthorizationFailed.Code:
			httpError(w, http.StatusForbidden, "%s", res.Message)
		case res.Code == kerr.PolicyViolation.Code:
			httpError(w, policy, "%s", res.Message)
		case res.Code != 0:
			httpError(w, http.StatusBadRequest, "%s", res.Message)
		default:
			w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(view())
		}
	}
}
