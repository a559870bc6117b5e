package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// ProducerKey is the body of PUT and GET /v1/producer-keys/{principal}
// (docs/signed-producers.md). Keys and signatures are standard base64.
type ProducerKey struct {
	Principal string `json:"principal,omitempty"`
	PublicKey []byte `json:"public_key"`
	// Proof is the new key's ed25519 signature of the registration
	// (pkg/proof.RegistrationMessage); Endorsement the current key's, when
	// the principal has one. PUT only.
	Proof       []byte `json:"proof,omitempty"`
	Endorsement []byte `json:"endorsement,omitempty"`
	Height      int64  `json:"height,omitempty"`
}

// serveProducerKeyPut registers or rotates a principal's key.
func serveProducerKeyPut(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req ProducerKey
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			httpError(w, http.StatusBadRequest, "the body must be a JSON object {public_key, proof, endorsement}: %v", err)
			return
		}
		c := fsm.RegisterProducerKey{Principal: r.PathValue("principal"), PublicKey: req.PublicKey, Proof: req.Proof, Endorsement: req.Endorsement}
		if res := fsm.CheckCommand(c); res.Code != 0 {
			httpError(w, http.StatusBadRequest, "%s", res.Message)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := opts.Broker.SubmitOne(ctx, c)
		switch {
		case err != nil:
			httpError(w, http.StatusServiceUnavailable, "the registration was not confirmed (it may still be applied): %v", err)
		case res.Code != 0 && strings.Contains(res.Message, "endorsed"):
			httpError(w, http.StatusConflict, "%s", res.Message)
		case res.Code != 0:
			httpError(w, http.StatusBadRequest, "%s", res.Message)
		default:
			w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(ProducerKey{Principal: c.Principal, PublicKey: c.PublicKey, Height: res.Height})
		}
	}
}

// serveProducerKeyGet answers a principal's registered key.
func serveProducerKeyGet(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.PathValue("principal")
		k, err := opts.Broker.ProducerKey(p)
		switch {
		case errors.Is(err, fsm.ErrNoProducerKey):
			httpError(w, http.StatusNotFound, "principal %q has no registered key", p)
		case err != nil:
			httpError(w, http.StatusInternalServerError, "%v", err)
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(ProducerKey{Principal: p, PublicKey: k})
		}
	}
}
