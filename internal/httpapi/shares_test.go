package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/record"
)

// TestShareGroupsHTTP (docs/share-groups.md, docs/openapi.json): two
// members of a share group acquire a topic's records over HTTP, each
// record once; an acknowledgement of a record another member holds is
// refused (INVALID_RECORD_STATE) and changes nothing; a released record
// comes again with its delivery count up; a member that leaves releases
// what it holds; the group is listed and described.
func TestShareGroupsHTTP(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	var recs []record.Record
	for i := range 6 {
		recs = append(recs, record.Record{OffsetDelta: int32(i), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	batch, err := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || r.Code != 0 {
		t.Fatalf("produce: %v %+v", err, r)
	}
	if r, err := b.SubmitOne(context.Background(), fsm.SetShareGroupConfigs{Group: "g", Configs: []fsm.ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}); err != nil || r.Code != 0 {
		t.Fatalf("config: %v %+v", err, r)
	}
	post := func(path string, body any, out any) int {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil && resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	acquire := func(member string, n int32) []ShareRecord {
		t.Helper()
		var out ShareAcquired
		if code := post("/v1/share-groups/g/acquire", ShareAcquireRequest{Member: member, Topic: "t", MaxRecords: n}, &out); code != http.StatusOK {
			t.Fatalf("acquire for %s: %d", member, code)
		}
		return out.Records
	}
	offsets := func(rs []ShareRecord) (out []int64) {
		for _, r := range rs {
			out = append(out, r.Offset)
		}
		return out
	}
	a := acquire("a", 3)
	if !slices.Equal(offsets(a), []int64{0, 1, 2}) || string(*a[0].Value) != "v0" || a[0].DeliveryCount != 1 {
		t.Fatalf("a acquired %+v", a)
	}
	if got := offsets(acquire("b", 10)); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("b acquired %v", got)
	}
	var acked ShareAcked
	post("/v1/share-groups/g/acknowledge", ShareAckRequest{Member: "b", Acks: []ShareAck{{Topic: "t", Partition: 0, Offset: 0, Type: "accept"}}}, &acked)
	if acked.Acks[0].Error == "" {
		t.Fatalf("b accepted a's record: %+v", acked)
	}
	acked = ShareAcked{}
	post("/v1/share-groups/g/acknowledge", ShareAckRequest{Member: "a", Acks: []ShareAck{{Topic: "t", Partition: 0, Offset: 0, Type: "accept"},
		{Topic: "t", Partition: 0, Offset: 1, Type: "release"}}}, &acked)
	if acked.Acks[0].Error != "" || acked.Acks[1].Error != "" {
		t.Fatalf("a's acknowledgements: %+v", acked)
	}
	if got := acquire("b", 10); len(got) != 1 || got[0].Offset != 1 || got[0].DeliveryCount != 2 {
		t.Fatalf("after a released 1, b acquired %+v", got)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/share-groups/g/members/a", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("leave: %v %v", err, resp)
	}
	if got := offsets(acquire("b", 10)); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after a left, b acquired %v, want a's 2", got)
	}
	resp, err = http.Get(srv.URL + "/v1/share-groups/g")
	if err != nil {
		t.Fatal(err)
	}
	var g ShareGroupInfo
	json.NewDecoder(resp.Body).Decode(&g)
	resp.Body.Close()
	if g.Group != "g" || len(g.Members) != 1 || g.Members[0].Member != "b" || len(g.Partitions) != 1 || g.Partitions[0].StartOffset != 1 || g.Partitions[0].Acquired != 5 {
		t.Fatalf("described: %+v", g)
	}
	if code := post("/v1/share-groups/g/acquire", ShareAcquireRequest{Member: "a", Topic: "nope"}, nil); code != http.StatusNotFound {
		t.Fatalf("an unknown topic: %d", code)
	}
	if code := post("/v1/share-groups/g/acknowledge", ShareAckRequest{Member: "b", Acks: []ShareAck{{Topic: "t", Type: "maybe"}}}, nil); code != http.StatusBadRequest {
		t.Fatalf("an unknown type: %d", code)
	}
}

// TestShareGroupsHTTPFilters (docs/share-groups.md "Over HTTP"): members
// acquire by key prefix and by subject pattern, each only the records
// its filter matches, the records passed over staying for the others; an
// acquisition that waits wakes for a matching record produced later; a
// bad pattern is refused (400), and a chain below app version 16 answers
// a filtered acquisition 501.
func TestShareGroupsHTTPFilters(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	produce := func(keySubjects ...string) {
		t.Helper()
		var recs []record.Record
		for i := 0; i+1 < len(keySubjects); i += 2 {
			recs = append(recs, record.Record{OffsetDelta: int32(i / 2), Key: []byte(keySubjects[i]), Value: []byte("v"),
				Headers: []record.RecordHeader{{Key: "stele-subject", Value: []byte(keySubjects[i+1])}}})
		}
		batch, err := record.Build(record.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := b.SubmitOne(context.Background(), fsm.Produce{Topic: "t", Partition: 0, Records: batch}); err != nil || r.Code != 0 {
			t.Fatalf("produce: %v %+v", err, r)
		}
	}
	produce("eu-1", "orders.eu.created", "us-1", "orders.us.created", "eu-2", "orders.eu.paid", "us-2", "orders.us.paid")
	if r, err := b.SubmitOne(context.Background(), fsm.SetShareGroupConfigs{Group: "g", Configs: []fsm.ShareConfigEntry{{Name: "share.auto.offset.reset", Value: "earliest"}}}); err != nil || r.Code != 0 {
		t.Fatalf("config: %v %+v", err, r)
	}
	acquire := func(req ShareAcquireRequest) (int, []int64) {
		t.Helper()
		body, _ := json.Marshal(req)
		resp, err := http.Post(srv.URL+"/v1/share-groups/g/acquire", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out ShareAcquired
		var offs []int64
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Records {
				offs = append(offs, r.Offset)
			}
		}
		return resp.StatusCode, offs
	}
	if code, offs := acquire(ShareAcquireRequest{Member: "a", Topic: "t", Subject: "orders.*.paid"}); code != http.StatusOK || !slices.Equal(offs, []int64{2, 3}) {
		t.Fatalf("by subject: %d %v", code, offs)
	}
	if code, offs := acquire(ShareAcquireRequest{Member: "b", Topic: "t", KeyPrefix: "eu-"}); code != http.StatusOK || !slices.Equal(offs, []int64{0}) {
		t.Fatalf("by key prefix: %d %v", code, offs)
	}
	if code, _ := acquire(ShareAcquireRequest{Member: "b", Topic: "t", Subject: "orders..eu"}); code != http.StatusBadRequest {
		t.Fatalf("a bad pattern: %d", code)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		produce("us-3", "orders.us.created", "eu-3", "orders.eu.created")
	}()
	if code, offs := acquire(ShareAcquireRequest{Member: "b", Topic: "t", KeyPrefix: "eu-", WaitMs: 10000}); code != http.StatusOK || !slices.Equal(offs, []int64{5}) {
		t.Fatalf("waiting by key prefix: %d %v", code, offs)
	}
	if code, offs := acquire(ShareAcquireRequest{Member: "c", Topic: "t"}); code != http.StatusOK || !slices.Equal(offs, []int64{1, 4}) {
		t.Fatalf("unfiltered, after the filters: %d %v", code, offs)
	}

	old, oldReg := startBrokerAt(t, fsm.ShareFilterVersion-1)
	oldSrv := httptest.NewServer(New(Options{Broker: old, Gatherer: oldReg}))
	defer oldSrv.Close()
	body, _ := json.Marshal(ShareAcquireRequest{Member: "a", Topic: "t", KeyPrefix: "eu-"})
	resp, err := http.Post(oldSrv.URL+"/v1/share-groups/g/acquire", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("a filter under version 15: %d", resp.StatusCode)
	}
}
