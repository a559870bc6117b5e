package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pokt-network/smt"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// TestReadYourWrites: an append answers the height that committed it
// (body and Stele-Height); a read with min_height at or below the broker's
// height is served and sees the write; one above it waits for the height
// and, when it does not come, answers 503 with Retry-After; a malformed
// min_height is 400.
func TestReadYourWrites(t *testing.T) {
	defer func(d time.Duration) { minHeightWait = d }(minHeightWait)
	minHeightWait = 300 * time.Millisecond
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/topics/t/keys/k/events", "text/plain", strings.NewReader("one"))
	if err != nil {
		t.Fatal(err)
	}
	var a Appended
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || a.Height <= 0 || resp.Header.Get(HeightHeader) != strconv.FormatInt(a.Height, 10) {
		t.Fatalf("append: %d %+v, %s %q", resp.StatusCode, a, HeightHeader, resp.Header.Get(HeightHeader))
	}
	if h := b.Height(); a.Height > h {
		t.Fatalf("append answered height %d, the broker is at %d", a.Height, h)
	}

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	// A Kafka producer learns only its offset: the height is looked up.
	resp, body := get(fmt.Sprintf("/v1/topics/t/partitions/%d/offsets/%d", a.Partition, a.Offset))
	var oh OffsetHeight
	json.Unmarshal([]byte(body), &oh)
	if resp.StatusCode != 200 || oh.Height != a.Height || oh.BaseOffset != a.Offset || oh.LastOffset != a.Offset {
		t.Fatalf("the height of offset %d: %d %s, want height %d", a.Offset, resp.StatusCode, body, a.Height)
	}
	if resp, body := get(fmt.Sprintf("/v1/topics/t/partitions/%d/offsets/%d", a.Partition, a.Offset+1)); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("the height of an offset past the end: %d %s", resp.StatusCode, body)
	}
	resp, body = get(fmt.Sprintf("/v1/topics/t/keys/k/events?min_height=%d", a.Height))
	if resp.StatusCode != 200 || !strings.Contains(body, `"utf8":"one"`) {
		t.Fatalf("read at the append's height: %d %s", resp.StatusCode, body)
	}
	if h, _ := strconv.ParseInt(resp.Header.Get(HeightHeader), 10, 64); h < a.Height {
		t.Errorf("read served at height %d, below min_height %d", h, a.Height)
	}

	// A height not reached yet: the read waits for it.
	want := b.Height() + 1
	done := make(chan string, 1)
	go func() {
		resp, body := get(fmt.Sprintf("/v1/topics/t/keys/k/events?min_height=%d", want))
		done <- fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get(HeightHeader), body)
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := b.SubmitOne(context.Background(), fsm.Tick{}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"utf8":"one"`) {
		t.Errorf("a read waiting for the next height: %s", got)
	}

	// One that never comes in time: 503, retriable.
	resp, body = get(fmt.Sprintf("/v1/topics/t/keys/k/events?min_height=%d", b.Height()+100))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "min_height") {
		t.Errorf("min_height far ahead: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	for _, bad := range []string{"x", "-1"} {
		if resp, body := get("/v1/topics/t/keys?min_height=" + bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("min_height=%s: %d %s", bad, resp.StatusCode, body)
		}
	}
}

// TestTableAPI: a compacted topic served as a key-value table: the
// latest value of a key, its version and headers; a tombstone or a key
// never written is 404; a topic that is not compacted is 400.
func TestTableAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	ctx := context.Background()
	if r, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "accounts", Partitions: 2, ReplicationFactor: -1,
		Configs: []fsm.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}}); err != nil || r.Code != 0 {
		t.Fatalf("create: %+v %v", r, err)
	}
	produce := func(p int32, recs ...record.Record) {
		t.Helper()
		for i := range recs {
			recs[i].OffsetDelta = int32(i)
		}
		batch, err := record.Build(record.Header{FirstTimestamp: 1_700_000_000_000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "accounts", Partition: p, Records: batch}); err != nil || r.Code != 0 {
			t.Fatalf("produce: %+v %v", r, err)
		}
	}
	produce(0, record.Record{Key: []byte("a"), Value: []byte("1")}, record.Record{Key: []byte("b"), Value: []byte("x")},
		record.Record{Key: []byte("a"), Value: []byte("2"), Headers: []record.RecordHeader{{Key: "h", Value: []byte("v")}}})
	produce(0, record.Record{Key: []byte("b"), Value: nil}) // b deleted
	produce(1, record.Record{Key: []byte("c"), Value: []byte("3")})

	get := func(path string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.String(), resp.Header
	}
	code, body, hdr := get("/v1/tables/accounts/a?min_height=1")
	var e TableEntry
	json.Unmarshal([]byte(body), &e)
	if code != 200 || e.Value == nil || string(*e.Value) != "2" || e.Version != 2 || e.Partition != 0 || len(e.Headers) != 1 ||
		e.Headers[0].Key != "h" || hdr.Get("ETag") != `"2"` || e.Height != b.Height() {
		t.Errorf("a: %d %s %v", code, body, hdr)
	}
	if code, body, _ := get("/v1/tables/accounts/c"); code != 200 || !strings.Contains(body, `"utf8":"3"`) || !strings.Contains(body, `"partition":1`) {
		t.Errorf("c: %d %s", code, body)
	}
	if code, body, _ := get("/v1/tables/accounts/b"); code != 404 || !strings.Contains(body, "tombstone at 0-3") {
		t.Errorf("b, deleted: %d %s", code, body)
	}
	if code, body, _ := get("/v1/tables/accounts/nope"); code != 404 || !strings.Contains(body, "no value") {
		t.Errorf("a key never written: %d %s", code, body)
	}
	if code, body, _ := get("/v1/tables/t/a"); code != 400 || !strings.Contains(body, "not compacted") {
		t.Errorf("a topic not compacted: %d %s", code, body)
	}
	if code, body, _ := get("/v1/tables/none/a"); code != 404 {
		t.Errorf("no such topic: %d %s", code, body)
	}
}

// TestWaitAPI: POST /v1/wait answers once the group has committed past
// the offset (it has consumed the record), and 504 naming the committed
// offset when that does not happen within timeout_ms; malformed requests
// are 400.
func TestWaitAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	ctx := context.Background()
	commit := func(off int64) {
		t.Helper()
		if r, err := b.SubmitOne(ctx, fsm.OffsetCommit{Group: "billing", Generation: -1, Topic: "t", Partition: 0, Offset: off, LeaderEpoch: -1}); err != nil || r.Code != 0 {
			t.Fatalf("commit %d: %+v %v", off, r, err)
		}
	}
	wait := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/wait", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.String()
	}
	done := make(chan string, 1)
	go func() {
		code, body := wait(`{"topic":"t","partition":0,"offset":5,"group":"billing","timeout_ms":10000}`)
		done <- fmt.Sprint(code, " ", body)
	}()
	commit(3) // not past 5
	commit(5) // the next to read is 5: record 5 not consumed yet
	select {
	case got := <-done:
		t.Fatalf("wait answered before the group consumed offset 5: %s", got)
	case <-time.After(100 * time.Millisecond):
	}
	commit(6)
	if got := <-done; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"committed":6`) {
		t.Errorf("wait after the group committed 6: %s", got)
	}
	if code, body := wait(`{"topic":"t","partition":0,"offset":6,"group":"billing","timeout_ms":200}`); code != http.StatusGatewayTimeout || !strings.Contains(body, "committed offset 6") {
		t.Errorf("wait timing out: %d %s", code, body)
	}
	if code, body := wait(`{"topic":"t","partition":0,"offset":0,"group":"nobody","timeout_ms":100}`); code != http.StatusGatewayTimeout || !strings.Contains(body, "no offset") {
		t.Errorf("wait on a group without offsets: %d %s", code, body)
	}
	for _, bad := range []string{`{}`, `{"topic":"t","group":"g","offset":-1}`, `not json`, `{"topic":"t","group":"g","extra":1}`} {
		if code, body := wait(bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
}

// TestTableProofAPI: GET /v1/tables/{topic}/{key}/proof proves the topic's
// entry and the key's leaf in every partition at one height, each leading
// to the state root the app hash commits to, and carries the value of the
// version it proves latest (null for a deleted or absent key); a plain
// topic is 400. (The signed header is checked in test/cluster.)
func TestTableProofAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, SignedHeader: func(h int64) ([]byte, error) { return []byte("header"), nil }}))
	defer srv.Close()
	ctx := context.Background()
	if r, err := b.SubmitOne(ctx, fsm.CreateTopic{Name: "accounts", Partitions: 2, ReplicationFactor: -1,
		Configs: []fsm.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}}); err != nil || r.Code != 0 {
		t.Fatalf("create: %+v %v", r, err)
	}
	for _, rec := range []record.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("x")}, {Key: []byte("b")}} {
		batch, err := record.Build(record.Header{FirstTimestamp: 1_700_000_000_000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{rec})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := b.SubmitOne(ctx, fsm.Produce{Topic: "accounts", Partition: 1, Records: batch}); err != nil || r.Code != 0 {
			t.Fatalf("produce: %+v %v", r, err)
		}
	}
	prove := func(key string) (*proof.TableValue, []byte) {
		t.Helper()
		// The proof waits for the height after the state's (its header
		// carries the app hash): blocks are made until it answers.
		type answer struct {
			resp *http.Response
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			resp, err := http.Get(srv.URL + "/v1/tables/accounts/" + key + "/proof")
			done <- answer{resp, err}
		}()
		var a answer
		for i := 0; ; i++ {
			select {
			case a = <-done:
			case <-time.After(20 * time.Millisecond):
				b.SubmitOne(ctx, fsm.CreateTopic{Name: fmt.Sprintf("later-%s-%d", key, i), Partitions: 1, ReplicationFactor: -1})
				continue
			}
			break
		}
		resp, err := a.resp, a.err
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tp proof.TableProof
		if err := json.NewDecoder(resp.Body).Decode(&tp); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", key, resp.StatusCode, err)
		}
		if tp.Topic != "accounts" || string(tp.Key) != key || string(tp.Proof.SignedHeader) != "header" || len(tp.Proof.Entries) != 3 {
			t.Fatalf("%s: %+v", key, tp)
		}
		spec := smt.NewTrieSpec(sha256.New(), false)
		for _, e := range tp.Proof.Entries {
			var leaf []byte // nil: absent
			if e.Value != nil {
				leaf = proof.TrieValue(e.Value)
			}
			if ok, err := smt.VerifyProof(&smt.SparseMerkleProof{SideNodes: e.SideNodes, NonMembershipLeafData: e.NonMembershipLeafData}, tp.Proof.StateRoot, e.Key, leaf, &spec); !ok || err != nil {
				t.Fatalf("%s: entry %q does not lead to the state root: %v", key, e.Key, err)
			}
		}
		tv, err := proof.TableLatest("accounts", tp.Key, tp.Proof.Entries)
		if err != nil {
			t.Fatal(err)
		}
		return tv, tp.Value
	}
	if tv, v := prove("a"); !tv.Found || tv.Latest.Partition != 1 || tv.Latest.Offset != 0 || !tv.Has(v) || string(v) != "1" {
		t.Errorf("a: %+v %q", tv, v)
	}
	if tv, v := prove("b"); !tv.Found || !tv.Latest.Deleted || tv.Latest.Offset != 2 || v != nil {
		t.Errorf("b, deleted: %+v %q", tv, v)
	}
	if tv, v := prove("nope"); tv.Found || v != nil {
		t.Errorf("absent: %+v %q", tv, v)
	}
	resp, err := http.Get(srv.URL + "/v1/tables/t/a/proof")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 && resp.StatusCode != 404 {
		t.Errorf("a plain topic: %d", resp.StatusCode)
	}
}
