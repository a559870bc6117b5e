package httpapi

// Subjects (docs/subjects.md, docs/openapi.json).
//
// GET /v1/topics/{topic}/records?subject=PATTERN: the committed records
// whose subject matches the pattern (`*` one token, `>` the rest), as a
// read_committed consumer sees them, partition by partition in offset
// order. The broker reads only the batches whose subject summary may
// match.
//
//	?partition=N   one partition (default: every partition)
//	?from=O        start at offset O in each partition (default: the log
//	               start); earliest or latest (each partition's log start,
//	               or its end: only records committed from now on); or a
//	               cursor P:O,P:O,... (the Stele-Next header of the
//	               previous page) for each partition's own
//	?time=MS       start in each partition at the first record whose
//	               timestamp is MS or later (ListOffsets by time)
//	?limit=N       at most N records (default 1000, at most 10000)
//	Accept: application/x-ndjson   one record per line
//	Accept: text/event-stream      follow: Server-Sent Events (id: the
//	                               cursor after the record), the matches
//	                               from the start on, then each new one as
//	                               it commits; Last-Event-ID resumes
//
// GET /v1/topics/{topic}/subjects?prefix=P&after=S&limit=N: the subjects
// seen in the topic, in byte order, with how many records were given each
// (prefix: whole leading tokens, orders.eu lists orders.eu and
// orders.eu.fr but not orders.europe).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/subject"
)

// SubjectRecord is one record read by subject.
type SubjectRecord struct {
	Partition int32         `json:"partition"`
	Offset    int64         `json:"offset"`
	Timestamp int64         `json:"timestamp"` // ms since the epoch
	Subject   string        `json:"subject"`
	Key       *Bytes        `json:"key"`   // null: no key
	Value     *Bytes        `json:"value"` // null: a tombstone
	Headers   []EventHeader `json:"headers,omitempty"`
	// KeyTyped and ValueTyped are the key and value decoded with their
	// schemas, with ?format=json (typed.go).
	KeyTyped   *Typed `json:"key_typed,omitempty"`
	ValueTyped *Typed `json:"value_typed,omitempty"`
}

// SubjectRecordsPage is the JSON body of a read by subject.
type SubjectRecordsPage struct {
	Topic   string          `json:"topic"`
	Subject string          `json:"subject"`
	Records []SubjectRecord `json:"records"`
	// Next is the cursor the following page starts from (from=Next): each
	// partition's offset after what this page looked at.
	Next string `json:"next"`
	// Scanned is what the read cost the broker.
	Scanned SubjectScan `json:"scanned"`
}

// SubjectScan says what a read by subject cost: batches read because their
// summary may match, batches skipped on their summary alone, and the bytes
// of the batches read.
type SubjectScan struct {
	BatchesRead    int64 `json:"batches_read"`
	BatchesSkipped int64 `json:"batches_skipped"`
	BytesRead      int64 `json:"bytes_read"`
}

// SubjectsPage is the JSON body of a topic's subjects.
type SubjectsPage struct {
	Topic    string         `json:"topic"`
	Subjects []SubjectCount `json:"subjects"`
	// Next is the after of the following page; empty when this one is the
	// last.
	Next string `json:"next,omitempty"`
}

// SubjectCount is a subject and how many records the topic was given with
// it (whether retention, compaction or an aborted transaction removed some
// since).
type SubjectCount struct {
	Subject string `json:"subject"`
	Records uint64 `json:"records"`
}

// serveSubjectRecords is GET /v1/topics/{topic}/records.
func serveSubjectRecords(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		t := opts.Broker.View().Topic(topic)
		if t == nil {
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		}
		q := r.URL.Query()
		// Without subject=, every record is read (the log, batch after
		// batch); with it, only the matching ones (the summaries).
		var pat *subject.Pattern
		if q.Has("subject") {
			p, err := subject.ParsePattern(q.Get("subject"))
			if err != nil {
				httpError(w, http.StatusBadRequest, "subject=%q: %v", q.Get("subject"), err)
				return
			}
			pat = &p
		}
		limit, ok := queryLimit(w, q)
		if !ok {
			return
		}
		typed := false
		switch f := q.Get("format"); f {
		case "", "bytes":
		case "json":
			typed = true
		default:
			httpError(w, http.StatusBadRequest, "format=%q: bytes (the default) or json (keys and values decoded with their registered schemas)", f)
			return
		}
		from, status, err := startPositions(t, q, r.Header.Get("Last-Event-ID"))
		if err != nil {
			httpError(w, status, "%v", err)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			followSubject(w, r, opts, topic, pat, from, typed)
			return
		}
		recs, next, stats, err := readRecords(opts, topic, pat, from, limit)
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, "reading %q by subject: %v", topic, err)
			return
		}
		page := SubjectRecordsPage{Topic: topic, Subject: patternText(pat), Records: make([]SubjectRecord, 0, len(recs)), Next: cursor(next),
			Scanned: SubjectScan{stats.BatchesRead, stats.BatchesSkipped, stats.BytesRead}}
		for _, rec := range recs {
			out := subjectRecord(rec)
			if typed {
				opts.typed.typeRecord(opts, topic, &out)
			}
			page.Records = append(page.Records, out)
		}
		w.Header().Set("Stele-Next", page.Next)
		if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			for _, rec := range page.Records {
				enc.Encode(rec)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}
}

// startPositions is where a read by subject starts in each partition:
// from the query's partition, from and time, or a resumed stream's
// Last-Event-ID (a cursor). The status is the HTTP status of an error.
func startPositions(t *fsm.TopicView, q url.Values, lastEventID string) (map[int32]int64, int, error) {
	n := int32(len(t.Partitions))
	parts := make([]int32, 0, n)
	if v := q.Get("partition"); v != "" {
		p, err := strconv.ParseInt(v, 10, 32)
		if err != nil || p < 0 || int32(p) >= n {
			return nil, http.StatusBadRequest, fmt.Errorf("partition=%q: topic %q has partitions 0 to %d", v, t.Name, n-1)
		}
		parts = append(parts, int32(p))
	} else {
		for p := range n {
			parts = append(parts, p)
		}
	}
	from := make(map[int32]int64, len(parts))
	if lastEventID != "" {
		c, err := parseCursor(lastEventID, n)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("Last-Event-ID %q: %v", lastEventID, err)
		}
		return c, 0, nil
	}
	fromQ, timeQ := q.Get("from"), q.Get("time")
	switch {
	case fromQ != "" && timeQ != "":
		return nil, http.StatusBadRequest, errors.New("give from or time, not both")
	case strings.Contains(fromQ, ":"):
		c, err := parseCursor(fromQ, n)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("from=%q: %v", fromQ, err)
		}
		for p := range c {
			if !slices.Contains(parts, p) {
				delete(c, p)
			}
		}
		return c, 0, nil
	case fromQ == "earliest" || fromQ == "latest":
		for _, p := range parts {
			from[p] = 0
			if fromQ == "latest" {
				from[p] = t.Partitions[p].LastStableOffset()
			}
		}
	case fromQ != "":
		o, err := strconv.ParseInt(fromQ, 10, 64)
		if err != nil || o < 0 {
			return nil, http.StatusBadRequest, fmt.Errorf("from=%q: want an offset (0 or more), earliest, latest, or a cursor P:O,P:O", fromQ)
		}
		for _, p := range parts {
			from[p] = o
		}
	case timeQ != "":
		ms, err := strconv.ParseInt(timeQ, 10, 64)
		if err != nil || ms < 0 {
			return nil, http.StatusBadRequest, fmt.Errorf("time=%q: want milliseconds since the epoch", timeQ)
		}
		for _, p := range parts {
			off, _, found, err := t.Partitions[p].OffsetForTimestamp(ms)
			if err != nil {
				return nil, http.StatusInternalServerError, fmt.Errorf("finding time %d in partition %d: %v", ms, p, err)
			}
			if !found {
				off = t.Partitions[p].HighWatermark()
			}
			from[p] = off
		}
	default:
		for _, p := range parts {
			from[p] = 0
		}
	}
	return from, 0, nil
}

// cursor writes each partition's position as P:O,P:O in partition order.
func cursor(pos map[int32]int64) string {
	ps := make([]int32, 0, len(pos))
	for p := range pos {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", p, pos[p])
	}
	return b.String()
}

// parseCursor reads cursor's text for a topic of n partitions.
func parseCursor(s string, n int32) (map[int32]int64, error) {
	out := map[int32]int64{}
	for _, part := range strings.Split(s, ",") {
		ps, os, ok := strings.Cut(part, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, errors.New("want partition:offset pairs separated by commas, such as 0:12,1:40")
		}
		if int32(p) >= n {
			return nil, fmt.Errorf("the topic has no partition %d", p)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("partition %d is given twice", p)
		}
		out[int32(p)] = o
	}
	return out, nil
}

func subjectRecord(r fsm.SubjectRecord) SubjectRecord {
	out := SubjectRecord{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Subject: string(r.Subject),
		Key: bytesOrNull(r.Key), Value: bytesOrNull(r.Value)}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, EventHeader{Key: h.Key, Value: bytesOrNull(h.Value)})
	}
	return out
}

// readRecords reads topic's records matching pat, or all of them when pat
// is nil.
func readRecords(opts Options, topic string, pat *subject.Pattern, from map[int32]int64, limit int) ([]fsm.SubjectRecord, map[int32]int64, fsm.SubjectReadStats, error) {
	if pat == nil {
		return opts.Broker.AllRecords(topic, from, limit)
	}
	return opts.Broker.SubjectRecords(topic, *pat, from, limit)
}

// patternText is pat as text ("" for none: every record).
func patternText(pat *subject.Pattern) string {
	if pat == nil {
		return ""
	}
	return pat.String()
}

// followSubject streams the records of topic whose subject matches pat,
// from the positions from on, as Server-Sent Events (id: the cursor after
// the record; data: the record as JSON), woken by every commit, until the
// client goes away.
func followSubject(w http.ResponseWriter, r *http.Request, opts Options, topic string, pat *subject.Pattern, from map[int32]int64, typed bool) {
	pos := from
	streamEvents(w, r, opts, func(emit func(id, event string, data any)) (bool, error) {
		recs, next, _, err := readRecords(opts, topic, pat, pos, maxKeyLimit)
		if err != nil {
			return false, err
		}
		for _, rec := range recs {
			pos[rec.Partition] = rec.Offset + 1
			out := subjectRecord(rec)
			if typed {
				opts.typed.typeRecord(opts, topic, &out)
			}
			emit(cursor(pos), "record", out)
		}
		pos = next
		return len(recs) == maxKeyLimit, nil
	})
}

// serveSubjects is GET /v1/topics/{topic}/subjects.
func serveSubjects(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		q := r.URL.Query()
		prefix := []byte(q.Get("prefix"))
		if len(prefix) > 0 {
			if err := subject.Check(prefix); err != nil {
				httpError(w, http.StatusBadRequest, "prefix=%q: %v", prefix, err)
				return
			}
		}
		var after []byte
		if q.Has("after") {
			after = []byte(q.Get("after"))
		}
		limit, ok := queryLimit(w, q)
		if !ok {
			return
		}
		counts, err := opts.Broker.SubjectCounts(topic, prefix, after, limit)
		switch {
		case errors.Is(err, fsm.ErrUnknownTopic):
			httpError(w, http.StatusNotFound, "topic %q does not exist", topic)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, "listing the subjects of %q: %v", topic, err)
			return
		}
		page := SubjectsPage{Topic: topic, Subjects: make([]SubjectCount, 0, len(counts))}
		for _, c := range counts {
			page.Subjects = append(page.Subjects, SubjectCount{Subject: string(c.Subject), Records: c.Records})
		}
		if len(counts) == limit {
			page.Next = string(counts[len(counts)-1].Subject)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(page)
	}
}
