package httpapi

// Read-your-writes (issue 9, DESIGN.md §5): every write answers the height
// that committed it (Stele-Height), any read may ask to be served at or
// after a height (min_height), a producer may wait until a consumer group
// has consumed past its record (POST /v1/wait), and a compacted topic is
// served as a key-value table (GET /v1/tables/{topic}/{key}).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/pkg/proof"
)

// HeightHeader carries a height: on a write's answer, the block that
// committed it; on a read's, the height the broker had applied when it
// read (every write committed at or below it is seen).
const HeightHeader = "Stele-Height"

// minHeightWait is how long a read with min_height waits for the broker
// to apply that height before answering 503 (a variable for tests).
var minHeightWait = 5 * time.Second

// maxWaitTimeout caps POST /v1/wait's timeout_ms.
const maxWaitTimeout = 5 * time.Minute

// withMinHeight serves h once the broker has applied the height the
// min_height query parameter names (if any), within minHeightWait; else
// 503 with Retry-After. Every answer carries HeightHeader.
func withMinHeight(opts Options, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("min_height"); v != "" {
			want, err := strconv.ParseInt(v, 10, 64)
			if err != nil || want < 0 {
				httpError(w, http.StatusBadRequest, "min_height=%q: want a height, 0 or more", v)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), minHeightWait)
			defer cancel()
			if got, err := waitHeight(ctx, opts, want); err != nil {
				w.Header().Set("Retry-After", "1")
				w.Header().Set(HeightHeader, strconv.FormatInt(got, 10))
				httpError(w, http.StatusServiceUnavailable, "this broker has applied height %d, not yet %d (min_height); retry, or ask another broker", got, want)
				return
			}
		}
		w.Header().Set(HeightHeader, strconv.FormatInt(opts.Broker.Height(), 10))
		h.ServeHTTP(w, r)
	})
}

// waitHeight waits until the broker has committed height want; it returns
// the height it has reached.
func waitHeight(ctx context.Context, opts Options, want int64) (int64, error) {
	for {
		changed := opts.Broker.Changed()
		h := opts.Broker.Height()
		if h >= want {
			return h, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return opts.Broker.Height(), ctx.Err()
		}
	}
}

// TableEntry is the body of GET /v1/tables/{topic}/{key}: the key's
// latest value.
type TableEntry struct {
	Topic     string        `json:"topic"`
	Key       Bytes         `json:"key"`
	Partition int32         `json:"partition"`
	Version   int64         `json:"version"` // the record's offset
	Timestamp int64         `json:"timestamp"`
	Value     *Bytes        `json:"value"`
	Headers   []EventHeader `json:"headers"`
	Height    int64         `json:"height"`
}

// serveTable answers GET /v1/tables/{topic}/{key}: the latest committed
// record of key in a compacted topic (cleanup.policy compact or snapshot),
// 404 when the key has none or its latest is a tombstone. It is read from
// the key's authenticated leaves (fsm/keys' tables.go), so it is what GET
// /v1/tables/{topic}/{key}/proof proves.
func serveTable(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic, key := r.PathValue("topic"), []byte(r.PathValue("key"))
		t := opts.Broker.View().Topic(topic)
		if t == nil {
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		}
		if !t.Config.Compact && !t.Config.Snapshot {
			httpError(w, http.StatusBadRequest, "topic %q is not compacted (cleanup.policy %q): a table is served from a compact or snapshot topic", topic, t.Configs["cleanup.policy"])
			return
		}
		height := opts.Broker.Height()
		ev, ok, err := opts.Broker.TableLatest(topic, key)
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, "reading %q of %q: %v", key, topic, err)
			return
		case !ok:
			httpError(w, http.StatusNotFound, "key %q has no value in %q", key, topic)
			return
		}
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(ev.Offset, 10)))
		if ev.Value == nil {
			httpError(w, http.StatusNotFound, "key %q was deleted from %q (tombstone at %d-%d)", key, topic, ev.Partition, ev.Offset)
			return
		}
		out := TableEntry{Topic: topic, Key: Bytes(ev.Key), Partition: ev.Partition, Version: ev.Offset, Timestamp: ev.Timestamp,
			Value: bytesOrNull(ev.Value), Headers: []EventHeader{}, Height: height}
		for _, h := range ev.Headers {
			out.Headers = append(out.Headers, EventHeader{Key: h.Key, Value: bytesOrNull(h.Value)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	}
}

// WaitRequest is the body of POST /v1/wait.
type WaitRequest struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Group     string `json:"group"`
	TimeoutMs int64  `json:"timeout_ms"`
}

// WaitDone is the body of POST /v1/wait's 200: the group's committed
// offset (the next it will read), past the offset waited for.
type WaitDone struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	Height    int64  `json:"height"`
}

// serveWait answers POST /v1/wait once the group has committed an offset
// past the record at offset (it has consumed it), or 504 after timeout_ms
// (default 30 s, at most 5 min).
func serveWait(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req WaitRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			httpError(w, http.StatusBadRequest, "the body must be a JSON object {topic, partition, offset, group, timeout_ms}: %v", err)
			return
		}
		switch {
		case req.Topic == "" || req.Group == "":
			httpError(w, http.StatusBadRequest, "topic and group are required")
			return
		case req.Partition < 0 || req.Offset < 0 || req.TimeoutMs < 0:
			httpError(w, http.StatusBadRequest, "partition, offset and timeout_ms must be 0 or more")
			return
		}
		// A tenant's user names its tenant's topic and group.
		req.Topic, req.Group = qualified(r, req.Topic), qualified(r, req.Group)
		// What OffsetFetch needs: DESCRIBE on the group and the topic.
		if !allowed(r, fsm.ACLResourceGroup, fsm.ACLOpDescribe, req.Group) || !allowed(r, fsm.ACLResourceTopic, fsm.ACLOpDescribe, req.Topic) {
			httpError(w, http.StatusForbidden, "not authorized to describe group %q and topic %q", req.Group, req.Topic)
			return
		}
		timeout := 30 * time.Second
		if req.TimeoutMs > 0 {
			timeout = min(time.Duration(req.TimeoutMs)*time.Millisecond, maxWaitTimeout)
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		committed := int64(-1)
		for {
			changed := opts.Broker.Changed()
			height := opts.Broker.Height()
			if g := opts.Broker.Groups().Group(req.Group); g != nil {
				if o, ok := g.Offsets[req.Topic][req.Partition]; ok {
					committed = o.Offset
				}
			}
			if committed > req.Offset {
				w.Header().Set(HeightHeader, strconv.FormatInt(height, 10))
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(WaitDone{Group: req.Group, Topic: req.Topic, Partition: req.Partition, Committed: committed, Height: height})
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				if r.Context().Err() != nil {
					return // the client went away
				}
				httpError(w, http.StatusGatewayTimeout, "%s", waitTimeoutMessage(req, committed, timeout))
				return
			}
		}
	}
}

func waitTimeoutMessage(req WaitRequest, committed int64, timeout time.Duration) string {
	if committed < 0 {
		return fmt.Sprintf("group %q has committed no offset for %s-%d within %v", req.Group, req.Topic, req.Partition, timeout)
	}
	return fmt.Sprintf("group %q has committed offset %d for %s-%d, not past %d, within %v", req.Group, committed, req.Topic, req.Partition, req.Offset, timeout)
}

// serveTableProof answers GET /v1/tables/{topic}/{key}/proof with the
// proof.TableProof of key in a table topic: the state proof of the topic's
// entry and the key's leaf in every partition at one height, the signed
// header of the next, and the value of the version it proves latest (null
// when the key has none or was deleted). It answers 200 for an absent key
// too: the absence is what is proven.
func serveTableProof(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic, key := r.PathValue("topic"), []byte(r.PathValue("key"))
		if opts.SignedHeader == nil {
			httpError(w, http.StatusNotFound, "this broker does not serve proofs")
			return
		}
		sp, _, value, err := opts.Broker.ProveTable(topic, key)
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		case errors.Is(err, fsm.ErrNotTable):
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		case !stateProofError(w, err, fmt.Sprintf("proving %q of %q", key, topic)):
			return
		}
		var ok bool
		if sp.SignedHeader, ok = stateHeader(w, r, opts, sp.Height); !ok {
			return
		}
		sp.Validators = headerValidators(opts, sp.Height+1)
		w.Header().Set("Content-Type", "application/json")
		tp := proof.TableProof{Topic: topic, Key: key, Value: value, Proof: sp}
		byzantineTable(&tp)
		json.NewEncoder(w).Encode(tp)
	}
}
