package httpapi

import (
	"context"
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
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "%v", err)
			return
		case errors.Is(err, fsm.ErrOffsetOutOfRange):
			httpError(w, http.StatusRequestedRangeNotSatisfiable, "%v", err)
			return
		case errors.Is(err, fsm.ErrNoProof):
			httpError(w, http.StatusNotFound, "%v", err)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, "proving %s-%d offset %d: %v", topic, part, off, err)
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
			Height: bp.Height, Digest: bp.Digest, Root: bp.Root, Path: &bp.Path, SignedHeader: sh,
		})
	}
}

// signedHeader waits for the signed header of height, polling while the
// height is not committed.
func signedHeader(ctx context.Context, opts Options, height int64) ([]byte, error) {
	for {
		sh, err := opts.SignedHeader(height)
		if err == nil {
			return sh, nil
		}
		if committed, _ := opts.Broker.Info(); committed > height {
			return nil, err // committed and still not there: pruned, not archived
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(20 * time.Millisecond):
		}
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
