package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
)

// startBroker runs a broker on the local (single-node) orderer with one
// topic and returns it with its metrics registry.
func startBroker(tb testing.TB) (*broker.Broker, *prometheus.Registry) {
	tb.Helper()
	return startBrokerAt(tb, 0)
}

// startBrokerAt is startBroker on a chain that starts at app version v
// (0: version 1).
func startBrokerAt(tb testing.TB, v uint32) (*broker.Broker, *prometheus.Registry) {
	f, err := fsm.Open(fsm.Options{Dir: tb.TempDir(), GenesisAppVersion: v})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	reg := prometheus.NewRegistry()
	b := broker.New(f, broker.Options{Registerer: reg})
	o := local.New(b.App(), local.Options{})
	if err := o.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	b.Start(o)
	tb.Cleanup(func() { b.Close(); o.Stop() })
	if _, err := b.SubmitOne(context.Background(), fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}); err != nil {
		tb.Fatal(err)
	}
	return b, reg
}

func TestHealthAndMetrics(t *testing.T) {
	b, reg := startBroker(t)
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, NodeID: 3}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if h.Status != "ok" || h.NodeID != 3 || h.Height != 1 || len(h.AppHash) != 64 {
		t.Fatalf("healthz: %+v", h)
	}

	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "stele_block_height 1") {
		t.Fatalf("/metrics lacks the block height:\n%s", body)
	}

	resp, err = http.Post(srv.URL+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz: %d", resp.StatusCode)
	}
}

// FuzzHTTPRequest serves arbitrary HTTP/1.1 requests (whatever
// http.ReadRequest accepts of the input, as the server would) through every
// endpoint: each is answered with a valid status, nothing panics.
func FuzzHTTPRequest(f *testing.F) {
	b, reg := startBroker(f)
	h := New(Options{Broker: b, Gatherer: reg, NodeID: 1, Cluster: func() ClusterStatus { return ClusterStatus{NodeID: 1} },
		Security: &Security{BasicOverPlaintext: true, AllowIfNoACL: true}})
	for _, seed := range []string{
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text\r\n\r\n",
		"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/cluster HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"GET /%2e%2e/healthz?x=%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"DELETE /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET /v1/topics/t/partitions/0/proof?offset=0&min_height=1 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/topics/t/partitions/0/offsets/0 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/tables/t/k?min_height=x HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/wait HTTP/1.1\r\nHost: x\r\nContent-Length: 74\r\n\r\n{\"topic\":\"t\",\"partition\":0,\"offset\":0,\"group\":\"g\",\"timeout_ms\":1}",
		"GET /v1/cluster/genesis HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/cluster/headers?from=1&limit=2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/producer-keys/alice HTTP/1.1\r\nHost: x\r\n\r\n",
		"PUT /v1/producer-keys/alice HTTP/1.1\r\nHost: x\r\nContent-Length: 41\r\n\r\n{\"public_key\":\"AAAA\",\"proof\":\"AAAA\"}",
		"GET /v1/cluster/upgrade HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/topics/t/records?subject=orders.*.fr.%3E&from=0:1&limit=3 HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\n\r\n",
		"GET /v1/topics/t/records?subject=%3E&time=17&partition=0 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/topics/t/subjects?prefix=orders.eu&after=orders.eu.fr&limit=2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/topics/t/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWxpY2U6cHc=\r\n\r\n",
		"GET /v1/topics/t/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Basic !!!\r\n\r\n",
		"POST /v1/admin/signed HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n{\"principal\":\"a\",\"seq\":1,\"signature\":\"AAAA\",\"command\":\"AgA=\"}",
		"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Length: 37\r\n\r\n{\"name\":\"acme\",\"quotas\":{\"topics\":1}}",
		"PUT /v1/tenants/acme/quotas HTTP/1.1\r\nHost: x\r\nContent-Length: 35\r\n\r\n{\"set\":{\"groups\":2},\"remove\":[\"x\"]}",
		"DELETE /v1/tenants/acme HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/tenants/acme?min_height=1 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/share-groups/g/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 57\r\n\r\n{\"member\":\"m\",\"topic\":\"t\",\"max_records\":5,\"wait_ms\":1}",
		"POST /v1/share-groups/g/acknowledge HTTP/1.1\r\nHost: x\r\nContent-Length: 82\r\n\r\n{\"member\":\"m\",\"acks\":[{\"topic\":\"t\",\"partition\":0,\"offset\":0,\"type\":\"accept\"}]}",
		"DELETE /v1/share-groups/g/members/m HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/share-groups?min_height=1 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/cluster/upgrade HTTP/1.1\r\nHost: x\r\nContent-Length: 128\r\n\r\n{\"height\":90,\"version\":2,\"name\":\"v2\",\"signatures\":[{\"validator\":\"0102030405060708090a0b0c0d0e0f1011121314\",\"signature\":\"AAAA\"}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code < 100 || rec.Code > 599 {
			t.Fatalf("status %d for %s %s", rec.Code, req.Method, req.URL)
		}
	})
}
