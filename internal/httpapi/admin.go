package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
)

// Signed administration (docs/security.md, "Signed administration"):
// GET /v1/admin/signed tells a signer the chain to sign for and whether
// stele.admin.signed is on; POST submits one signed command (an
// fsm.SignedAdmin) and answers its outcome. The route needs no other
// authentication: the signature is checked by every broker in the
// deterministic apply, against the principal's registered key and the
// ACLs in the state, so the broker that takes the request can only drop
// it, never change or forge it.

// SignedAdminStatus is the body of GET /v1/admin/signed.
type SignedAdminStatus struct {
	ChainID string `json:"chain_id"`
	// Enabled is stele.admin.signed as committed.
	Enabled bool  `json:"enabled"`
	Height  int64 `json:"height"`
}

// SignedAdminRequest is the body of POST /v1/admin/signed: Command is
// fsm.EncodeCommand's bytes, Signature the principal's ed25519 signature
// of pkg/proof.AdminMessage(chain id, principal, seq, command), both
// standard base64.
type SignedAdminRequest struct {
	Principal string `json:"principal"`
	Seq       uint64 `json:"seq"`
	Signature []byte `json:"signature"`
	Command   []byte `json:"command"`
}

// SignedAdminResult is the answer of POST /v1/admin/signed: the command
// applied, at Height; or, with an error status, Error, ErrorCode (Kafka's
// name of the state machine's code) and Code (its number).
type SignedAdminResult struct {
	Command   string `json:"command"`
	Height    int64  `json:"height,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
	Code      int16  `json:"code,omitempty"`
	Error     string `json:"error,omitempty"`
	// Removed is a DeleteTenant's: how many of each kind it removed.
	Removed map[string]int `json:"removed,omitempty"`
	// BytesNeeded is a DeployPlugin's or PluginChunk's: how many bytes of
	// the module are still to come (0: the deployment is in effect).
	BytesNeeded *int `json:"bytes_needed,omitempty"`
}

func serveSignedAdminGet(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h, _ := opts.Broker.Info()
		st := opts.Broker.Upgrade()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(SignedAdminStatus{ChainID: st.ChainID, Enabled: opts.Broker.BrokerConfigs().AdminSigned(), Height: h})
	}
}

func serveSignedAdminPost(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req SignedAdminRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			httpError(w, http.StatusBadRequest, "the body must be a JSON object {principal, seq, signature, command}: %v", err)
			return
		}
		c := fsm.SignedAdmin{Principal: req.Principal, Seq: req.Seq, Signature: req.Signature, Command: req.Command}
		name := ""
		if inner, err := fsm.DecodeCommand(req.Command); err == nil {
			name = fsm.KindName(inner.Kind())
		}
		answer := func(status int, res SignedAdminResult) {
			res.Command = name
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(res)
		}
		if res := fsm.CheckCommand(c); res.Code != 0 {
			answer(http.StatusBadRequest, SignedAdminResult{ErrorCode: codeName(res.Code), Code: res.Code, Error: res.Message})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := opts.Broker.SubmitOne(ctx, c)
		switch {
		case err != nil:
			httpError(w, http.StatusServiceUnavailable, "the command was not confirmed (it may still be applied; its sequence is spent once it is): %v", err)
		case res.Code != 0:
			answer(signedAdminStatus(res.Code), SignedAdminResult{Height: res.Height, ErrorCode: codeName(res.Code), Code: res.Code, Error: res.Message})
		default:
			w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
			out := SignedAdminResult{Height: res.Height}
			for _, n := range res.Counts {
				if n.What == fsm.PluginBytesNeeded {
					out.BytesNeeded = &n.N
					continue
				}
				if out.Removed == nil {
					out.Removed = map[string]int{}
				}
				out.Removed[n.What] = n.N
			}
			answer(http.StatusOK, out)
		}
	}
}

// signedAdminStatus is the HTTP status of a refused signed command: 401
// for a signature that does not authenticate its principal, 403 for a
// principal the ACLs do not allow, 404 for what does not exist, 400 else.
func signedAdminStatus(code int16) int {
	switch code {
	case kerr.SaslAuthenticationFailed.Code:
		return http.StatusUnauthorized
	case kerr.TopicAuthorizationFailed.Code, kerr.GroupAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Code, kerr.TransactionalIDAuthorizationFailed.Code, kerr.PolicyViolation.Code:
		return http.StatusForbidden
	case kerr.UnknownTopicOrPartition.Code, kerr.GroupIDNotFound.Code, kerr.ResourceNotFound.Code:
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

func codeName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			return ke.Message
		}
		return err.Error()
	}
	return ""
}
