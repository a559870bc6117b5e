package httpapi

import (
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

func TestHealthAndMetrics(t *testing.T) {
	f, err := fsm.Open(fsm.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reg := prometheus.NewRegistry()
	b := broker.New(f, broker.Options{Registerer: reg})
	o := local.New(b.App(), local.Options{})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	b.Start(o)
	defer b.Close()
	if _, err := b.SubmitOne(context.Background(), fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
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
