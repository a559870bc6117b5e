package httpapi

// GET /v1/topics/{topic}/keys/{key}/events: a key's events, in order, from
// a version on (docs/keys.md, docs/openapi.yaml).
//
//	?from=V    the first offset to return (default: the key's latest
//	           snapshot record if it has one, else its first event)
//	?limit=N   at most N events (default 1000, at most 10000)
//	Accept: application/x-ndjson   one event per line instead of one document
//	Accept: text/event-stream      follow: Server-Sent Events, the events
//	                               from `from` (or after Last-Event-ID) on,
//	                               then each new one as it commits
//
// The key is the path segment, percent-decoded (any bytes). Byte fields are
// JSON strings when they are valid UTF-8, else base64 under a "_b64" name.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/stele"
)

const (
	defaultKeyLimit = 1000
	maxKeyLimit     = 10_000
)

// KeyEventsPage is the JSON body of a key's events.
type KeyEventsPage struct {
	Topic  string     `json:"topic"`
	Key    Bytes      `json:"key"`
	Events []KeyEvent `json:"events"`
	// Next is the from of the following page (the offset after the last
	// event returned), or from itself when there was none.
	Next int64 `json:"next"`
}

// KeyEvent is one event of a key.
type KeyEvent struct {
	Partition int32         `json:"partition"`
	Offset    int64         `json:"offset"`
	Timestamp int64         `json:"timestamp"` // ms since the epoch
	Value     *Bytes        `json:"value"`     // null: a tombstone
	Headers   []EventHeader `json:"headers,omitempty"`
	// Snapshot: the event summarises its key up to itself.
	Snapshot bool `json:"snapshot,omitempty"`
}

// EventHeader is one record header.
type EventHeader struct {
	Key   string `json:"key"`
	Value *Bytes `json:"value"`
}

// Bytes is a byte string in JSON: {"utf8": "..."} when it is valid UTF-8,
// {"b64": "..."} otherwise (pkg/stele.Bytes, which Go clients decode).
type Bytes = stele.Bytes

func bytesOrNull(b []byte) *Bytes {
	if b == nil {
		return nil
	}
	v := Bytes(b)
	return &v
}

// httpError writes a JSON error body.
func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{fmt.Sprintf(format, args...)})
}

func serveKeyEvents(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic, key := r.PathValue("topic"), []byte(r.PathValue("key"))
		if opts.Broker.View().Topic(topic) == nil {
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		}
		q := r.URL.Query()
		from := int64(0)
		if !q.Has("from") && r.Header.Get("Last-Event-ID") == "" {
			// From the key's latest snapshot, when it has one: it stands
			// for every event before it.
			if _, off, ok, err := opts.Broker.KeySnapshot(topic, key); err == nil && ok {
				from = off
			}
		}
		if v := q.Get("from"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				httpError(w, http.StatusBadRequest, "from=%q: want an offset, 0 or more", v)
				return
			}
			from = n
		}
		limit, ok := queryLimit(w, q)
		if !ok {
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			if id := r.Header.Get("Last-Event-ID"); id != "" {
				n, err := strconv.ParseInt(id, 10, 64)
				if err != nil || n < 0 {
					httpError(w, http.StatusBadRequest, "Last-Event-ID %q: want the offset of the last event received", id)
					return
				}
				from = n + 1
			}
			followKey(w, r, opts, topic, key, from)
			return
		}
		evs, err := opts.Broker.KeyEvents(topic, key, from, limit)
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, "reading %q of %q: %v", key, topic, err)
			return
		}
		page := KeyEventsPage{Topic: topic, Key: key, Events: make([]KeyEvent, 0, len(evs)), Next: from}
		for _, e := range evs {
			page.Events = append(page.Events, keyEvent(e))
			page.Next = e.Offset + 1
		}
		if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			for _, ev := range page.Events {
				enc.Encode(ev)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}
}

func keyEvent(e fsm.KeyEvent) KeyEvent {
	ev := KeyEvent{Partition: e.Partition, Offset: e.Offset, Timestamp: e.Timestamp, Value: bytesOrNull(e.Value), Snapshot: e.Snapshot}
	for _, h := range e.Headers {
		ev.Headers = append(ev.Headers, EventHeader{Key: h.Key, Value: bytesOrNull(h.Value)})
	}
	return ev
}

// keepAlive is how often an idle event stream gets a comment line, so
// that proxies and clients do not take it for dead.
const keepAlive = 15 * time.Second

// followKey streams key's events from offset from on as Server-Sent
// Events (id: the offset; data: the event as JSON), woken by every commit,
// until the client goes away.
func followKey(w http.ResponseWriter, r *http.Request, opts Options, topic string, key []byte, from int64) {
	streamEvents(w, r, opts, func(emit func(id, event string, data any)) (bool, error) {
		evs, err := opts.Broker.KeyEvents(topic, key, from, maxKeyLimit)
		if err != nil {
			return false, err
		}
		for _, e := range evs {
			emit(strconv.FormatInt(e.Offset, 10), "event", keyEvent(e))
			from = e.Offset + 1
		}
		return len(evs) == maxKeyLimit, nil
	})
}

// streamEvents answers r with Server-Sent Events: it calls poll, which
// emits the events it finds (id, event name, data as JSON) and says
// whether more are waiting; then again at once if so, else at the next
// commit, with a keep-alive comment every keepAlive, until the client goes
// away. An error of poll ends the stream with an error event.
func streamEvents(w http.ResponseWriter, r *http.Request, opts Options, poll func(emit func(id, event string, data any)) (more bool, err error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		httpError(w, http.StatusNotAcceptable, "this connection cannot stream events")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	// The server's ReadTimeout bounds a request's whole life by default: a
	// stream lives as long as its client.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		changed := opts.Broker.Changed()
		n := 0
		more, err := poll(func(id, event string, v any) {
			data, _ := json.Marshal(v)
			fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", id, event, data)
			n++
		})
		if err != nil {
			fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error())
			flusher.Flush()
			return
		}
		if n > 0 {
			flusher.Flush()
		}
		if more {
			continue
		}
		select {
		case <-changed:
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		case <-r.Context().Done():
			return
		}
	}
}

// maxAppendBytes bounds the body of an append; the topic's
// max.message.bytes then applies to the batch.
const maxAppendBytes = 8 << 20

// Appended is the body of a successful append.
type Appended struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"` // the event's version
	// Height is the block that committed it: a read with min_height at
	// least this sees it on any broker (read-your-writes).
	Height int64 `json:"height"`
}

// Conflict is the body of a 412: the key's version when the append was
// ordered (-1: no event yet).
type Conflict struct {
	Error   string `json:"error"`
	Version int64  `json:"version"`
}

// serveAppend is POST /v1/topics/{topic}/keys/{key}/events: the body is
// the new event's value, written to the partition Kafka's default
// partitioner gives the key (murmur2, as franz-go and the Java client), so
// it joins the events Kafka producers wrote. If-Match: "V" (or V) appends
// only if the key's latest version is V; If-None-Match: * only if it has
// no event yet; otherwise 412 with the version it is at.
func serveAppend(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic, key := r.PathValue("topic"), []byte(r.PathValue("key"))
		t := opts.Broker.View().Topic(topic)
		if t == nil {
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		}
		var expect string
		match, noneMatch := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
		switch {
		case match != "" && noneMatch != "":
			httpError(w, http.StatusBadRequest, "give If-Match or If-None-Match, not both")
			return
		case noneMatch != "":
			if strings.TrimSpace(noneMatch) != "*" {
				httpError(w, http.StatusBadRequest, "If-None-Match %q: only * (the key has no event yet) is understood", noneMatch)
				return
			}
			expect = "-1"
		case match != "":
			v, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(match), `"`), 10, 64)
			if err != nil || v < 0 {
				httpError(w, http.StatusBadRequest, "If-Match %q: want the version (offset) the key must be at, e.g. \"41\"", match)
				return
			}
			expect = strconv.FormatInt(v, 10)
		}
		value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAppendBytes))
		if err != nil {
			httpError(w, http.StatusRequestEntityTooLarge, "the value is over %d bytes", maxAppendBytes)
			return
		}
		rec := record.Record{Key: key, Value: value}
		if expect != "" {
			rec.Headers = append(rec.Headers, record.RecordHeader{Key: fsm.ExpectedVersionHeader, Value: []byte(expect)})
		}
		switch v := strings.ToLower(strings.TrimSpace(r.Header.Get("Stele-Snapshot"))); v {
		case "", "false":
		case "true":
			rec.Headers = append(rec.Headers, record.RecordHeader{Key: fsm.SnapshotHeader, Value: []byte("1")})
		default:
			httpError(w, http.StatusBadRequest, "Stele-Snapshot %q: want true or false", v)
			return
		}
		batch, err := record.Build(record.Header{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{rec})
		if err != nil {
			httpError(w, http.StatusBadRequest, "%v", err)
			return
		}
		partition := kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: key}, len(t.Partitions))
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := opts.Broker.SubmitOne(ctx, fsm.Produce{Topic: topic, Partition: int32(partition), Records: batch})
		switch {
		case err != nil:
			httpError(w, http.StatusServiceUnavailable, "the append was not confirmed (it may still be written): %v", err)
		case res.VersionConflict:
			if res.KeyVersion >= 0 {
				w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(res.KeyVersion, 10)))
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusPreconditionFailed)
			json.NewEncoder(w).Encode(Conflict{Error: res.Message, Version: res.KeyVersion})
		case res.Code == kerr.UnknownTopicOrPartition.Code:
			httpError(w, http.StatusNotFound, "%s", res.Message)
		case res.Code == kerr.MessageTooLarge.Code || res.Code == kerr.RecordListTooLarge.Code:
			httpError(w, http.StatusRequestEntityTooLarge, "%s", res.Message)
		case res.Code != 0:
			httpError(w, http.StatusBadRequest, "%s: %s", kerr.ErrorForCode(res.Code), res.Message)
		default:
			w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(res.BaseOffset, 10)))
			w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(Appended{Partition: int32(partition), Offset: res.BaseOffset, Height: res.Height})
		}
	}
}

// KeysPage is the body of GET /v1/topics/{topic}/keys.
type KeysPage struct {
	Topic string  `json:"topic"`
	Keys  []Bytes `json:"keys"`
	// After is the after of the next page (the last key of this one) when
	// the page is full; absent when there is no more.
	After *Bytes `json:"after,omitempty"`
}

// serveKeys is GET /v1/topics/{topic}/keys?prefix=P&after=A&limit=N: the
// topic's keys with a record in the log, in byte order, paged.
func serveKeys(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		q := r.URL.Query()
		limit, ok := queryLimit(w, q)
		if !ok {
			return
		}
		var after []byte
		if q.Has("after") {
			after = []byte(q.Get("after"))
		}
		keys, err := opts.Broker.Keys(topic, []byte(q.Get("prefix")), after, limit)
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, "listing the keys of %q: %v", topic, err)
			return
		}
		page := KeysPage{Topic: topic, Keys: make([]Bytes, 0, len(keys))}
		for _, k := range keys {
			page.Keys = append(page.Keys, k)
		}
		if len(keys) == limit {
			page.After = bytesOrNull(keys[len(keys)-1])
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}
}

// queryLimit reads ?limit= (default defaultKeyLimit), answering 400 and
// false when it is not 1 to maxKeyLimit.
func queryLimit(w http.ResponseWriter, q url.Values) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return defaultKeyLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxKeyLimit {
		httpError(w, http.StatusBadRequest, "limit=%q: want 1 to %d", v, maxKeyLimit)
		return 0, false
	}
	return n, true
}
