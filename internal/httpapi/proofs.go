package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/pkg/proof"
)

// proofHeaderWait bounds how long a proof request waits for the signed
// header of the height after its batch's block: CometBFT makes that block
// right after any block that changed the app hash, so it comes within a
// height's time unless the cluster has lost its quorum.
const proofHeaderWait = 5 * time.Second

// serveProof answers GET /v1/topics/{topic}/partitions/{partition}/proof
// ?offset=N with the proof.Batch of the stored batch holding offset N.
func serveProof(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		part, err := strconv.ParseInt(r.PathValue("partition"), 10, 32)
		if err != nil || part < 0 {
			httpError(w, http.StatusBadRequest, "partition %q: want a partition number", r.PathValue("partition"))
			return
		}
		off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
		if err != nil || off < 0 {
			httpError(w, http.StatusBadRequest, "offset=%q: want an offset, 0 or more", r.URL.Query().Get("offset"))
			return
		}
		if opts.SignedHeader == nil {
			httpError(w, http.StatusNotFound, "this broker does not serve proofs")
			return
		}
		bp, err := opts.Broker.ProveBatch(topic, int32(part), off)
		if !proofError(w, err, topic, part, off) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), proofHeaderWait)
		defer cancel()
		sh, err := signedHeader(ctx, opts, bp.Height+1)
		if err != nil {
			w.Header().Set("Retry-After", "1")
			httpError(w, http.StatusServiceUnavailable, "the signed header of height %d, which carries the app hash of the batch's block: %v", bp.Height+1, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(proof.Batch{
			Topic: bp.Topic, TopicID: hex.EncodeToString(bp.TopicID[:]), Partition: bp.Partition,
			BaseOffset: bp.BaseOffset, LastOffset: bp.LastOffset, Batch: bp.Batch,
			Height: bp.Height, Digest: bp.Digest, StateRoot: bp.StateRoot, Root: bp.Root, Path: &bp.Path, SignedHeader: sh,
			Validators: headerValidators(opts, bp.Height+1),
		})
	}
}

// OffsetHeight is the body of GET .../partitions/{p}/offsets/{offset}.
type OffsetHeight struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	Offset     int64  `json:"offset"`
	BaseOffset int64  `json:"batch_base_offset"`
	LastOffset int64  `json:"batch_last_offset"`
	// Height is the block that committed the record: a Kafka producer's
	// read-your-writes height (min_height).
	Height int64 `json:"height"`
}

// serveOffsetHeight answers GET /v1/topics/{topic}/partitions/{partition}
// /offsets/{offset}: the height that committed the record at offset.
func serveOffsetHeight(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		part, err1 := strconv.ParseInt(r.PathValue("partition"), 10, 32)
		off, err2 := strconv.ParseInt(r.PathValue("offset"), 10, 64)
		if err1 != nil || err2 != nil || part < 0 || off < 0 {
			httpError(w, http.StatusBadRequest, "partition %q, offset %q: want numbers, 0 or more", r.PathValue("partition"), r.PathValue("offset"))
			return
		}
		height, base, last, err := opts.Broker.BatchHeight(topic, int32(part), off)
		if !proofError(w, err, topic, part, off) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(OffsetHeight{Topic: topic, Partition: int32(part), Offset: off, BaseOffset: base, LastOffset: last, Height: height})
	}
}

// proofError answers err, if any, as a proof or height lookup's failure;
// it reports whether there was none.
func proofError(w http.ResponseWriter, err error, topic string, part, off int64) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, fsm.ErrUnknownTopic):
		httpError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, fsm.ErrOffsetOutOfRange):
		httpError(w, http.StatusRequestedRangeNotSatisfiable, "%v", err)
	case errors.Is(err, fsm.ErrNoProof):
		httpError(w, http.StatusNotFound, "%v", err)
	default:
		httpError(w, http.StatusInternalServerError, "%s-%d offset %d: %v", topic, part, off, err)
	}
	return false
}

// serveStateProof answers GET /v1/state/proof?key=K[&key=K...] (each key
// base64url without padding, at most proof.MaxStateProofKeys) with the
// proof.StateProof of those keys of the committed state: their values or
// absence, and the signed header of the height after the state's.
func serveStateProof(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := r.URL.Query()["key"]
		if len(raw) == 0 || len(raw) > proof.MaxStateProofKeys {
			httpError(w, http.StatusBadRequest, "%d key parameters: give 1 to %d (base64url, no padding)", len(raw), proof.MaxStateProofKeys)
			return
		}
		keys := make([][]byte, len(raw))
		for i, k := range raw {
			b, err := base64.RawURLEncoding.DecodeString(k)
			if err != nil || len(b) == 0 {
				httpError(w, http.StatusBadRequest, "key %q: want the key's bytes in base64url without padding", k)
				return
			}
			keys[i] = b
		}
		if opts.SignedHeader == nil {
			httpError(w, http.StatusNotFound, "this broker does not serve proofs")
			return
		}
		sp, err := opts.Broker.ProveState(keys...)
		if !stateProofError(w, err, "proving the state") {
			return
		}
		var ok bool
		if sp.SignedHeader, ok = stateHeader(w, r, opts, sp.Height); !ok {
			return
		}
		sp.Validators = headerValidators(opts, sp.Height+1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(sp)
	}
}

// signedHeader waits until the broker has committed height (its header is
// then in the block store, and archived before CometBFT may prune it) and
// returns that height's signed header.
// stateProofError answers a state proof's error (404 for a key that
// cannot be proven, 503 to ask again when the state moved, 500 else) and
// reports whether there was none.
func stateProofError(w http.ResponseWriter, err error, doing string) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, fsm.ErrNoProof):
		httpError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, fsm.ErrStateMoved):
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "%v", err)
	default:
		httpError(w, http.StatusInternalServerError, "%s: %v", doing, err)
	}
	return false
}

// stateHeader returns the signed header of height+1, which carries the
// app hash of the state at height, waiting for it up to proofHeaderWait;
// without it, it answers 503 with Retry-After and returns false.
func stateHeader(w http.ResponseWriter, r *http.Request, opts Options, height int64) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), proofHeaderWait)
	defer cancel()
	sh, err := signedHeader(ctx, opts, height+1)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "the signed header of height %d, which carries the app hash of the state's block: %v", height+1, err)
		return nil, false
	}
	return sh, true
}

// headerValidators is the validator set the header of height names, when
// it is not the genesis set (Options.HeaderValidators).
func headerValidators(opts Options, height int64) []byte {
	if opts.HeaderValidators == nil {
		return nil
	}
	return opts.HeaderValidators(height)
}

func signedHeader(ctx context.Context, opts Options, height int64) ([]byte, error) {
	if _, err := waitHeight(ctx, opts, height); err != nil {
		return nil, err
	}
	return opts.SignedHeader(height)
}

// HeadersPage is the body of GET /v1/cluster/headers: the signed headers
// this broker holds from From on (its archive keeps those whose app hash
// changed, its block store recent ones), at most Limit heights looked at.
type HeadersPage struct {
	From    int64          `json:"from"`
	Next    int64          `json:"next"` // the height to ask from next
	Headers []SignedHeader `json:"headers"`
}

// SignedHeader is one height's header with the commit that signed it
// (protobuf-encoded CometBFT SignedHeader).
type SignedHeader struct {
	Height       int64  `json:"height"`
	SignedHeader []byte `json:"signed_header"`
	// Validators is the set the header names when it is not the genesis
	// set (protobuf-encoded CometBFT ValidatorSet).
	Validators []byte `json:"validators,omitempty"`
}

// serveHeaders answers GET /v1/cluster/headers?from=H&limit=N (N heights,
// default and at most 1000): what an auditor compares between brokers.
func serveHeaders(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if opts.SignedHeader == nil {
			httpError(w, http.StatusNotFound, "this broker does not serve headers")
			return
		}
		q := r.URL.Query()
		from, err := strconv.ParseInt(q.Get("from"), 10, 64)
		if err != nil || from < 1 {
			httpError(w, http.StatusBadRequest, "from=%q: want a height, 1 or more", q.Get("from"))
			return
		}
		limit := int64(1000)
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.ParseInt(v, 10, 64); err != nil || limit < 1 || limit > 1000 {
				httpError(w, http.StatusBadRequest, "limit=%q: want 1 to 1000", v)
				return
			}
		}
		top, _ := opts.Broker.Info()
		page := HeadersPage{From: from, Next: from, Headers: []SignedHeader{}}
		for h := from; h < from+limit && h <= top; h++ {
			page.Next = h + 1
			if sh, err := opts.SignedHeader(h); err == nil {
				page.Headers = append(page.Headers, SignedHeader{Height: h, SignedHeader: sh, Validators: headerValidators(opts, h)})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}
}

// serveGenesis answers GET /v1/cluster/genesis with the chain's genesis
// document: what a verifying client trusts. Fetched from a broker it is
// only as good as that broker; the client pins it on first use.
func serveGenesis(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if opts.Genesis == nil {
			httpError(w, http.StatusNotFound, "this broker does not serve its genesis")
			return
		}
		doc, err := opts.Genesis()
		if err != nil {
			httpError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	}
}
