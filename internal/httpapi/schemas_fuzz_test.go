package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm"
)

// FuzzRegistryBodies: whatever body a client sends to the registry's
// routes that take one, the broker answers 200 or one of Confluent's
// error bodies with its status, never fails inside, and keeps serving.
func FuzzRegistryBodies(f *testing.F) {
	b, reg := startBrokerAt(f, fsm.SchemasVersion)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg}))
	f.Cleanup(srv.Close)
	routes := []struct{ method, path string }{
		{"POST", "/subjects/s/versions"},
		{"POST", "/subjects/s"},
		{"POST", "/compatibility/subjects/s/versions"},
		{"POST", "/compatibility/subjects/s/versions/latest"},
		{"PUT", "/config"},
		{"PUT", "/config/s"},
		{"PUT", "/mode"},
	}
	for i := range routes {
		f.Add(uint8(i), `{"schema":"{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"}]}"}`)
		f.Add(uint8(i), `{"schema":"\"int\"","schemaType":"AVRO","references":[{"name":"x","subject":"s","version":1}]}`)
		f.Add(uint8(i), `{"compatibility":"FULL","mode":"READWRITE"}`)
		f.Add(uint8(i), `{"schema":"{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\",\"A\"]}"}`)
		f.Add(uint8(i), "\x00{")
	}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		r := routes[int(route)%len(routes)]
		req, _ := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if r.method == "PUT" && r.path == "/mode" {
				// Leave the registry writable for the next input.
				req, _ := http.NewRequest("PUT", srv.URL+"/mode", strings.NewReader(`{"mode":"READWRITE"}`))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			return
		}
		var e RegistryError
		if err := json.Unmarshal(raw, &e); err != nil || e.ErrorCode == 0 || e.Message == "" {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, resp.StatusCode, raw)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, resp.StatusCode, raw)
		}
		status := e.ErrorCode
		for status >= 1000 {
			status /= 10
		}
		if status != resp.StatusCode {
			t.Fatalf("error code %d under status %d", e.ErrorCode, resp.StatusCode)
		}
	})
}
