package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
)

// TestUpgradeAPI: GET shows the running version; a malformed vote is 400;
// a well-formed one this broker's chain cannot count (it has no validator
// set) is 403, and nothing is recorded.
func TestUpgradeAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	get := func() UpgradeView {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/cluster/upgrade")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v UpgradeView
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %d %v", resp.StatusCode, err)
		}
		return v
	}
	if v := get(); v.AppVersion != 1 || v.MaxAppVersion != fsm.MaxAppVersion || v.Scheduled != nil || len(v.Votes) != 0 || v.Height < 1 {
		t.Fatalf("GET = %+v", v)
	}
	post := func(body string) int {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/cluster/upgrade", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sig := `"signature":"` + string(bytes.Repeat([]byte("A"), 86)) + `=="`
	for body, want := range map[string]int{
		`{"height":`: 400,
		`{"height":90,"version":2,"signatures":[{"validator":"zz",` + sig + `}]}`:                                                            400,
		`{"height":90,"version":2,"signatures":[]}`:                                                                                          400,
		`{"height":90,"version":2,"extra":1}`:                                                                                                400,
		`{"height":90,"version":2,"signatures":[{"validator":"0102030405060708090a0b0c0d0e0f1011121314",` + sig + `}]}`:                      400, // names no chain
		`{"chain_id":"stele-x","height":90,"version":2,"signatures":[{"validator":"0102030405060708090a0b0c0d0e0f1011121314",` + sig + `}]}`: 403,
	} {
		if got := post(body); got != want {
			t.Errorf("POST %s: %d, want %d", body, got, want)
		}
	}
	if v := get(); v.Scheduled != nil || len(v.Votes) != 0 {
		t.Fatalf("after refused votes: %+v", v)
	}
}

// FuzzUpgradeRequest: any body either fails to decode or gives a command
// that encodes its fields as given.
func FuzzUpgradeRequest(f *testing.F) {
	f.Add([]byte(`{"chain_id":"stele-x","height":90,"version":2,"name":"v2","signatures":[{"validator":"0102030405060708090a0b0c0d0e0f1011121314","signature":"` +
		string(bytes.Repeat([]byte("A"), 86)) + `=="}]}`))
	f.Add([]byte(`{"height":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeUpgradeRequest(body)
		if err != nil {
			return
		}
		var req UpgradeRequest
		if json.Unmarshal(body, &req) != nil || req.ChainID != c.ChainID || req.Height != c.Plan.Height || req.Version != c.Plan.Version || req.Name != c.Plan.Name || len(req.Signatures) != len(c.Sigs) {
			t.Fatalf("decoded %+v from %q", c, body)
		}
		for i, s := range req.Signatures {
			if !reflect.DeepEqual(s.Signature, c.Sigs[i].Signature[:]) {
				t.Fatalf("signature %d changed", i)
			}
		}
		fsm.CheckCommand(c) // must not panic
	})
}
