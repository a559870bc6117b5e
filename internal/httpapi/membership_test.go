package httpapi

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMembershipAPI: GET shows epoch 0 and no votes; a malformed vote is
// 400, and so is a well-formed one on this broker's chain, which runs app
// version 1 (membership changes need 7); nothing is recorded.
func TestMembershipAPI(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	defer srv.Close()
	get := func() MembershipView {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/cluster/membership")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v MembershipView
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %d %v", resp.StatusCode, err)
		}
		return v
	}
	if v := get(); v.Epoch != 0 || len(v.Votes) != 0 || v.Height < 1 {
		t.Fatalf("GET = %+v", v)
	}
	sig := `"signature":"` + string(bytes.Repeat([]byte("A"), 86)) + `=="`
	val := `"validator":"0102030405060708090a0b0c0d0e0f1011121314"`
	for body, want := range map[string]int{
		`{"epoch":`: 400,
		`{"chain_id":"c","epoch":0,"validator":"zz","power":0,"signatures":[{` + val + `,` + sig + `}]}`: 400,
		`{"chain_id":"c","epoch":0,` + val + `,"power":-1,"signatures":[{` + val + `,` + sig + `}]}`:     400,
		`{"chain_id":"c","epoch":0,` + val + `,"power":0,"signatures":[]}`:                               400,
		`{"chain_id":"c","epoch":0,` + val + `,"power":0,"extra":1}`:                                     400,
		`{"epoch":0,` + val + `,"power":0,"signatures":[{` + val + `,` + sig + `}]}`:                     400, // names no chain
		`{"chain_id":"c","epoch":0,` + val + `,"power":0,"signatures":[{` + val + `,` + sig + `}]}`:      400, // version 1
	} {
		resp, err := http.Post(srv.URL+"/v1/cluster/membership", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST %s: %d, want %d", body, resp.StatusCode, want)
		}
	}
	if v := get(); v.Epoch != 0 || len(v.Votes) != 0 {
		t.Fatalf("after refused votes: %+v", v)
	}
}

// FuzzMembershipRequest: any body either fails to decode or gives a
// command that carries its fields as given.
func FuzzMembershipRequest(f *testing.F) {
	f.Add([]byte(`{"chain_id":"stele-x","epoch":3,"validator":"0102030405060708090a0b0c0d0e0f1011121314","power":10,"signatures":[{"validator":"0102030405060708090a0b0c0d0e0f1011121314","signature":"` +
		string(bytes.Repeat([]byte("A"), 86)) + `=="}]}`))
	f.Add([]byte(`{"epoch":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeMembershipRequest(body)
		if err != nil {
			return
		}
		var req MembershipRequest
		if json.Unmarshal(body, &req) != nil || req.ChainID != c.ChainID || req.Epoch != c.Change.Epoch || req.Power != c.Change.Power || req.Remove != c.Change.Remove || len(req.Signatures) != len(c.Sigs) {
			t.Fatalf("decoded %+v from %q", c, body)
		}
		if !bytes.Equal(req.AdminSignature, c.AdminSig) {
			t.Fatalf("admin signature %x decoded as %x", req.AdminSignature, c.AdminSig)
		}
		if a, _ := hex.DecodeString(req.Validator); !bytes.Equal(a, c.Change.Validator[:]) {
			t.Fatalf("validator %q decoded as %X", req.Validator, c.Change.Validator)
		}
		for i, s := range req.Signatures {
			if a, _ := hex.DecodeString(s.Validator); !bytes.Equal(a, c.Sigs[i].Validator[:]) || !bytes.Equal(s.Signature, c.Sigs[i].Signature[:]) {
				t.Fatalf("signature %d decoded as %+v from %+v", i, c.Sigs[i], s)
			}
		}
	})
}
