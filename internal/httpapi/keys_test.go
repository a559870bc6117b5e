package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// TestKeyEventsAPI: GET /v1/topics/{topic}/keys/{key}/events returns the
// key's events in order, with from and limit, as one JSON document or as
// NDJSON; binary keys and values travel percent-encoded and in base64;
// unknown topics are 404 and bad parameters 400.
func TestKeyEventsAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	var recs []record.Record
	keys := []string{"acct-1", "acct-2", "acct-1", "bin\x00\xff", "acct-1"}
	for i, k := range keys {
		v := []byte(fmt.Sprintf("v%d", i))
		if k == "bin\x00\xff" {
			v = []byte{0xff, 0xfe}
		}
		recs = append(recs, record.Record{OffsetDelta: int32(i), Key: []byte(k), Value: v,
			Headers: []record.RecordHeader{{Key: "h", Value: []byte("x")}}})
	}
	batch, err := record.Build(record.Header{FirstTimestamp: 1_700_000_000_000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || res.Code != 0 {
		t.Fatalf("produce: %+v %v", res, err)
	}

	get := func(path, accept string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	page := func(path string) KeyEventsPage {
		t.Helper()
		resp := get(path, "")
		var p KeyEventsPage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return p
	}
	offsets := func(p KeyEventsPage) []int64 {
		var out []int64
		for _, e := range p.Events {
			out = append(out, e.Offset)
		}
		return out
	}

	p := page("/v1/topics/t/keys/acct-1/events")
	if fmt.Sprint(offsets(p)) != "[0 2 4]" || p.Next != 5 || string(p.Key) != "acct-1" {
		t.Fatalf("acct-1: offsets %v next %d key %q", offsets(p), p.Next, p.Key)
	}
	if e := p.Events[1]; string(*e.Value) != "v2" || e.Timestamp != 1_700_000_000_000 || len(e.Headers) != 1 || string(*e.Headers[0].Value) != "x" {
		t.Fatalf("acct-1 event 2: %+v", e)
	}
	if p := page("/v1/topics/t/keys/acct-1/events?from=1&limit=1"); fmt.Sprint(offsets(p)) != "[2]" || p.Next != 3 {
		t.Fatalf("from=1 limit=1: offsets %v next %d", offsets(p), p.Next)
	}
	if p := page("/v1/topics/t/keys/acct-1/events?from=5"); len(p.Events) != 0 || p.Next != 5 {
		t.Fatalf("from=5: %+v", p)
	}
	if p := page("/v1/topics/t/keys/nobody/events"); len(p.Events) != 0 || p.Events == nil {
		t.Fatalf("a key without events: %+v (want an empty list, not null)", p)
	}

	// A binary key, percent-encoded; its value is not UTF-8.
	resp := get("/v1/topics/t/keys/"+url.PathEscape("bin\x00\xff")+"/events", "")
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	ev := raw["events"].([]any)[0].(map[string]any)
	if ev["offset"] != 3.0 || ev["value"].(map[string]any)["b64"] != "//4=" {
		t.Fatalf("binary key: %v", raw)
	}

	// NDJSON: one event per line.
	resp = get("/v1/topics/t/keys/acct-1/events", "application/x-ndjson")
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	var lines []KeyEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e KeyEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("NDJSON line %q: %v", sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 3 || lines[2].Offset != 4 {
		t.Fatalf("NDJSON: %+v", lines)
	}

	for path, code := range map[string]int{
		"/v1/topics/nope/keys/a/events":           404,
		"/v1/topics/t/keys/a/events?from=-1":      400,
		"/v1/topics/t/keys/a/events?from=x":       400,
		"/v1/topics/t/keys/a/events?limit=0":      400,
		"/v1/topics/t/keys/a/events?limit=100000": 400,
	} {
		resp := get(path, "")
		var body struct{ Error string }
		if err := json.NewDecoder(resp.Body).Decode(&body); resp.StatusCode != code || err != nil || body.Error == "" {
			t.Errorf("GET %s: %d %q %v, want %d with an error message", path, resp.StatusCode, body.Error, err, code)
		}
	}
}

// TestKeyEventsFollow: with Accept: text/event-stream the key's events come
// as Server-Sent Events (id = offset), then each new one as it commits; a
// client reconnecting with Last-Event-ID gets only what came after.
func TestKeyEventsFollow(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	produce := func(values ...string) {
		t.Helper()
		var recs []record.Record
		for i, v := range values {
			recs = append(recs, record.Record{OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(v)})
		}
		batch, err := record.Build(record.Header{FirstTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || res.Code != 0 {
			t.Fatalf("produce: %+v %v", res, err)
		}
	}
	produce("a", "b")
	follow := func(lastID string) (*bufio.Reader, func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/topics/t/keys/k/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("follow: %v %v", resp, err)
		}
		return bufio.NewReader(resp.Body), func() { cancel(); resp.Body.Close() }
	}
	// next reads one event: its id and value.
	next := func(r *bufio.Reader) (string, string) {
		t.Helper()
		var id string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			switch {
			case len(line) > 4 && line[:4] == "id: ":
				id = line[4 : len(line)-1]
			case len(line) > 6 && line[:6] == "data: ":
				var e KeyEvent
				if err := json.Unmarshal([]byte(line[6:]), &e); err != nil {
					t.Fatal(err)
				}
				return id, string(*e.Value)
			}
		}
	}
	r, stop := follow("")
	for _, want := range []string{"0 a", "1 b"} {
		if id, v := next(r); id+" "+v != want {
			t.Fatalf("event %s %s, want %s", id, v, want)
		}
	}
	produce("c")
	if id, v := next(r); id != "2" || v != "c" {
		t.Fatalf("followed event %s %s, want 2 c", id, v)
	}
	stop()
	r, stop = follow("1")
	defer stop()
	if id, v := next(r); id != "2" || v != "c" {
		t.Fatalf("after Last-Event-ID 1: %s %s, want 2 c", id, v)
	}
}

// TestOpenAPIListsEveryRoute: docs/openapi.json is valid JSON and documents
// exactly the routes New serves, with their methods.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	data, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	var documented []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	slices.Sort(documented)
	if want := slices.Sorted(slices.Values(routes)); !slices.Equal(documented, want) {
		t.Fatalf("docs/openapi.json documents %v\nthe handler serves %v", documented, want)
	}
}

// TestKeyAppendAPI: POST appends the body as the key's next event; with
// If-None-Match: * or If-Match: "V" only if the key is at that version,
// else 412 with the version it is at and nothing written; racing appends
// for one version: exactly one wins.
func TestKeyAppendAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	post := func(key, value string, hdr ...string) (int, http.Header, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/topics/t/keys/"+url.PathEscape(key)+"/events", strings.NewReader(value))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, resp.Header, body
	}
	if code, h, body := post("acct", "opened", "If-None-Match", "*"); code != 201 || body["offset"] != 0.0 || h.Get("ETag") != `"0"` {
		t.Fatalf("first append: %d %v %v", code, h, body)
	}
	if code, h, body := post("acct", "again", "If-None-Match", "*"); code != 412 || body["version"] != 0.0 || h.Get("ETag") != `"0"` || body["error"] == "" {
		t.Fatalf("If-None-Match on a key with an event: %d %v %v", code, h, body)
	}
	if code, _, body := post("acct", "credited", "If-Match", `"0"`); code != 201 || body["offset"] != 1.0 {
		t.Fatalf("If-Match 0: %d %v", code, body)
	}
	if code, _, body := post("acct", "stale", "If-Match", "0"); code != 412 || body["version"] != 1.0 {
		t.Fatalf("a stale If-Match: %d %v", code, body)
	}
	if code, _, body := post("acct", "free"); code != 201 || body["offset"] != 2.0 {
		t.Fatalf("an unconditional append: %d %v", code, body)
	}
	for name, hdr := range map[string][]string{
		"If-Match not a number": {"If-Match", "soon"},
		"If-None-Match not *":   {"If-None-Match", `"3"`},
		"both preconditions":    {"If-Match", "2", "If-None-Match", "*"},
		"a negative If-Match":   {"If-Match", "-1"},
	} {
		if code, _, body := post("acct", "x", hdr...); code != 400 || body["error"] == "" {
			t.Errorf("%s: %d %v", name, code, body)
		}
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/topics/nope/keys/a/events", strings.NewReader("x"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown topic: %v %v", resp, err)
	}

	// Eight writers race for version 2: one wins, seven get 412.
	codes := make(chan int, 8)
	for i := range 8 {
		go func() {
			code, _, _ := post("acct", fmt.Sprint("racer-", i), "If-Match", "2")
			codes <- code
		}()
	}
	won := 0
	for range 8 {
		switch c := <-codes; c {
		case 201:
			won++
		case 412:
		default:
			t.Fatalf("a racing append got %d", c)
		}
	}
	if won != 1 {
		t.Fatalf("%d racing appends for version 2 won, want exactly 1", won)
	}
	evs, err := b.KeyEvents("t", []byte("acct"), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, e := range evs {
		values = append(values, string(e.Value))
	}
	if len(values) != 4 || values[0] != "opened" || values[1] != "credited" || values[2] != "free" || !strings.HasPrefix(values[3], "racer-") {
		t.Fatalf("the key's events: %v", values)
	}
}

// TestKeysAPI: GET /v1/topics/{topic}/keys lists keys in byte order, by
// prefix, a page at a time with after.
func TestKeysAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	var recs []record.Record
	for i, k := range []string{"user-2", "order-1", "user-1", "user-10", "user-1", "bin\x00"} {
		recs = append(recs, record.Record{OffsetDelta: int32(i), Key: []byte(k), Value: []byte("v")})
	}
	batch, err := record.Build(record.Header{FirstTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || res.Code != 0 {
		t.Fatalf("produce: %+v %v", res, err)
	}
	list := func(query string) ([]string, *string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/topics/t/keys" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p KeysPage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET keys%s: %d %v", query, resp.StatusCode, err)
		}
		out := []string{}
		for _, k := range p.Keys {
			out = append(out, string(k))
		}
		var after *string
		if p.After != nil {
			s := string(*p.After)
			after = &s
		}
		return out, after
	}
	if got, after := list(""); fmt.Sprint(got) != "[bin\x00 order-1 user-1 user-10 user-2]" || after != nil {
		t.Fatalf("all keys: %q, after %v", got, after)
	}
	if got, _ := list("?prefix=user-1"); fmt.Sprint(got) != "[user-1 user-10]" {
		t.Fatalf("prefix user-1: %q", got)
	}
	got, after := list("?prefix=user-&limit=2")
	if fmt.Sprint(got) != "[user-1 user-10]" || after == nil || *after != "user-10" {
		t.Fatalf("page 1: %q, after %v", got, after)
	}
	if got, after := list("?prefix=user-&limit=2&after=" + url.QueryEscape(*after)); fmt.Sprint(got) != "[user-2]" || after != nil {
		t.Fatalf("page 2: %q, after %v", got, after)
	}
	for path, code := range map[string]int{"/v1/topics/nope/keys": 404, "/v1/topics/t/keys?limit=0": 400} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}
}

// TestKeySnapshotAPI: an append with Stele-Snapshot: true writes a
// snapshot record; reading the key without from starts at its latest
// snapshot (marked "snapshot": true), with from=0 at its first event.
func TestKeySnapshotAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	post := func(value, snapshot string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/topics/t/keys/acct/events", strings.NewReader(value))
		if snapshot != "" {
			req.Header.Set("Stele-Snapshot", snapshot)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	read := func(query string) []string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/topics/t/keys/acct/events" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p KeyEventsPage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range p.Events {
			s := string(*e.Value)
			if e.Snapshot {
				s += "*"
			}
			out = append(out, s)
		}
		return out
	}
	if got := read(""); len(got) != 0 {
		t.Fatalf("no event yet: %v", got)
	}
	for _, c := range []struct{ value, snapshot string }{{"e0", ""}, {"s1", "true"}, {"e2", "false"}, {"s3", "true"}, {"e4", ""}} {
		if code := post(c.value, c.snapshot); code != 201 {
			t.Fatalf("append %s: %d", c.value, code)
		}
	}
	if got := read(""); fmt.Sprint(got) != "[s3* e4]" {
		t.Fatalf("from the latest snapshot: %v", got)
	}
	if got := read("?from=0"); fmt.Sprint(got) != "[e0 s1* e2 s3* e4]" {
		t.Fatalf("from 0: %v", got)
	}
	if code := post("x", "maybe"); code != 400 {
		t.Fatalf("Stele-Snapshot: maybe: %d", code)
	}
}
