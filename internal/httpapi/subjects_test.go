package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/subject"
)

// TestSubjectRecordsAPI: GET /v1/topics/{topic}/records?subject= returns
// exactly the records whose subject matches, for every pattern shape,
// from an offset, a cursor or a time, a page at a time (Stele-Next), as
// JSON or NDJSON, skipping batches whose summary cannot match; a produce
// with an invalid subject is refused and writes nothing; bad patterns and
// parameters are 400, unknown topics 404; /subjects lists the subjects
// with their counts, by prefix, a page at a time.
func TestSubjectRecordsAPI(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	produce := func(partition int32, ts int64, subjects ...string) fsm.Result {
		t.Helper()
		var recs []record.Record
		for i, s := range subjects {
			r := record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Value: []byte("v:" + s)}
			if s != "" {
				r.Headers = []record.RecordHeader{{Key: subject.Header, Value: []byte(s)}}
			}
			recs = append(recs, r)
		}
		batch, err := record.Build(record.Header{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: partition, Records: batch})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if _, err := b.SubmitOne(context.Background(), fsm.CreatePartitions{Name: "t", Count: 2}); err != nil {
		t.Fatal(err)
	}
	const t0 = int64(1_700_000_000_000)
	for i := range 20 {
		if res := produce(int32(i%2), t0+int64(i)*1000, "orders.eu.fr.created", "orders.us.ny.paid", ""); res.Code != 0 {
			t.Fatalf("produce: %+v", res)
		}
	}
	produce(0, t0+30_000, "audit.login")
	if res := produce(1, t0, "orders.eu.fr.created", "orders..bad"); res.Code == 0 || !strings.Contains(fmt.Sprint(res.RecordErrors), "empty token") {
		t.Fatalf("an invalid subject: %+v", res)
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
	page := func(path string) SubjectRecordsPage {
		t.Helper()
		resp := get(path, "")
		var p SubjectRecordsPage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		if resp.Header.Get("Stele-Next") != p.Next {
			t.Fatalf("Stele-Next %q, next %q", resp.Header.Get("Stele-Next"), p.Next)
		}
		return p
	}
	q := func(pattern string) string { return "/v1/topics/t/records?subject=" + url.QueryEscape(pattern) }
	for pattern, want := range map[string]int{
		"orders.eu.fr.created": 20, "orders.*.fr.created": 20, "orders.>": 40, ">": 41, "*": 0, "orders.*.*.*": 40,
		"orders.*.ny.>": 20, "audit.*": 1, "audit.>": 1, "orders.eu": 0, "nothing": 0,
	} {
		p := page(q(pattern))
		if len(p.Records) != want {
			t.Fatalf("%q: %d records, want %d", pattern, len(p.Records), want)
		}
		for _, r := range p.Records {
			if !subject.MustPattern(pattern).Match([]byte(r.Subject)) || string(*r.Value) != "v:"+r.Subject {
				t.Fatalf("%q gave %+v", pattern, r)
			}
		}
	}
	// A rare subject: every batch but one skipped unread.
	if p := page(q("audit.login")); p.Scanned.BatchesRead != 1 || p.Scanned.BatchesSkipped != 20 || p.Next != "0:31,1:30" {
		t.Fatalf("audit.login: scanned %+v next %q", p.Scanned, p.Next)
	}
	// Pages: the cursor of one page starts the next, and together they
	// are the whole answer.
	var all []string
	next := ""
	for range 100 {
		path := q("orders.>") + "&limit=7"
		if next != "" {
			path += "&from=" + url.QueryEscape(next)
		}
		p := page(path)
		if len(p.Records) == 0 {
			break
		}
		for _, r := range p.Records {
			all = append(all, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
		}
		next = p.Next
	}
	if len(all) != 40 || all[0] != "0/0" || all[39] != "1/28" {
		t.Fatalf("paged: %d records %v", len(all), all)
	}
	if p := page(q("orders.>") + "&partition=1&from=27"); len(p.Records) != 2 || p.Records[0].Offset != 27 || p.Next != "1:30" {
		t.Fatalf("partition 1 from 27: %+v next %q", p.Records, p.Next)
	}
	if p := page(q(">") + "&from=latest"); len(p.Records) != 0 || p.Next != "0:31,1:30" {
		t.Fatalf("from latest: %+v next %q", p.Records, p.Next)
	}
	if p := page(q("audit.>") + "&from=earliest"); len(p.Records) != 1 {
		t.Fatalf("from earliest: %+v", p.Records)
	}
	if p := page(q("orders.eu.>") + fmt.Sprintf("&time=%d", t0+18_000)); len(p.Records) != 2 || p.Records[0].Timestamp != t0+18_000 {
		t.Fatalf("from a time: %+v", p.Records)
	}
	// NDJSON.
	resp := get(q("audit.>"), "application/x-ndjson")
	var r SubjectRecord
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Subject != "audit.login" || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("NDJSON: %+v %v", r, err)
	}
	// Bad input.
	for path, code := range map[string]int{
		"/v1/topics/t/records?format=avro":               400,
		q("orders..eu"):                                  400,
		q("orders.>.eu"):                                 400,
		q("ord*"):                                        400,
		q("a b"):                                         400,
		q(">") + "&from=-1":                              400,
		q(">") + "&from=0:1,0:2":                         400,
		q(">") + "&from=9:1":                             400,
		q(">") + "&from=1&time=5":                        400,
		q(">") + "&partition=2":                          400,
		q(">") + "&limit=0":                              400,
		"/v1/topics/nope/records?subject=a":              404,
		"/v1/topics/t/subjects?prefix=a..b":              400,
		"/v1/topics/nope/subjects":                       404,
		q(strings.Repeat("a.", 127) + "aa"):              400,
		"/v1/topics/t/records?subject=%FF":               400,
		"/v1/topics/t/subjects?limit=100000":             400,
		q(">") + "&from=" + url.QueryEscape("0:1,x:2"):   400,
		q(">") + "&time=" + url.QueryEscape("yesterday"): 400,
	} {
		if resp := get(path, ""); resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}

	// Subjects with counts, by prefix, a page at a time.
	subs := func(path string) SubjectsPage {
		t.Helper()
		resp := get(path, "")
		var p SubjectsPage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return p
	}
	if p := subs("/v1/topics/t/subjects"); fmt.Sprint(p.Subjects) != "[{audit.login 1} {orders.eu.fr.created 20} {orders.us.ny.paid 20}]" || p.Next != "" {
		t.Fatalf("subjects: %+v", p)
	}
	if p := subs("/v1/topics/t/subjects?prefix=orders.us"); fmt.Sprint(p.Subjects) != "[{orders.us.ny.paid 20}]" {
		t.Fatalf("subjects under orders.us: %+v", p)
	}
	if p := subs("/v1/topics/t/subjects?prefix=orders.u"); len(p.Subjects) != 0 {
		t.Fatalf("subjects under orders.u (not a whole token): %+v", p)
	}
	if p := subs("/v1/topics/t/subjects?limit=2"); len(p.Subjects) != 2 || p.Next != "orders.eu.fr.created" {
		t.Fatalf("a page of 2: %+v", p)
	} else if p := subs("/v1/topics/t/subjects?limit=2&after=" + p.Next); fmt.Sprint(p.Subjects) != "[{orders.us.ny.paid 20}]" {
		t.Fatalf("the next page: %+v", p)
	}
}

// TestSubjectRecordsFollow: with Accept: text/event-stream the matches come
// as Server-Sent Events whose id is the cursor after the record, then each
// new one as it commits; reconnecting with Last-Event-ID resumes after it.
func TestSubjectRecordsFollow(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	produce := func(subjects ...string) {
		t.Helper()
		var recs []record.Record
		for i, s := range subjects {
			recs = append(recs, record.Record{OffsetDelta: int32(i), Value: []byte(s), Headers: []record.RecordHeader{{Key: subject.Header, Value: []byte(s)}}})
		}
		batch, err := record.Build(record.Header{FirstTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || res.Code != 0 {
			t.Fatalf("produce: %+v %v", res, err)
		}
	}
	produce("a.x", "b.x", "a.y")
	follow := func(lastID string) (*bufio.Reader, func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/topics/t/records?subject=a.*", nil)
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
	next := func(r *bufio.Reader) string {
		t.Helper()
		var id string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimSpace(line[4:])
			case strings.HasPrefix(line, "data: "):
				var rec SubjectRecord
				if err := json.Unmarshal([]byte(line[6:]), &rec); err != nil {
					t.Fatal(err)
				}
				return id + " " + rec.Subject
			}
		}
	}
	r, stop := follow("")
	for _, want := range []string{"0:1 a.x", "0:3 a.y"} {
		if got := next(r); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	produce("b.z", "a.z")
	if got := next(r); got != "0:5 a.z" {
		t.Fatalf("followed %q, want 0:5 a.z", got)
	}
	stop()
	r, stop = follow("0:3")
	defer stop()
	if got := next(r); got != "0:5 a.z" {
		t.Fatalf("after Last-Event-ID 0:3: %q, want 0:5 a.z", got)
	}
}
