// Package httpapi serves Stele's HTTP endpoints: /healthz for liveness and
// readiness checks, /metrics for Prometheus and /v1/cluster for the
// consensus view (validators, their last signed blocks, peers). Later issues add the native
// API, the schema registry and the console here.
//
// httpapi imports broker; nothing below it imports httpapi.
package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stele-io/stele/internal/broker"
)

// Options configures the HTTP handler.
type Options struct {
	Broker   *broker.Broker
	Gatherer prometheus.Gatherer
	NodeID   int32
	// Cluster reports the consensus view for GET /v1/cluster.
	Cluster func() ClusterStatus
}

// Health is the body of /healthz.
type Health struct {
	Status  string `json:"status"`
	NodeID  int32  `json:"node_id"`
	Height  int64  `json:"height"`
	AppHash string `json:"app_hash"`
}

// New returns the handler for every endpoint.
func New(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		h, hash := opts.Broker.Info()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(Health{Status: "ok", NodeID: opts.NodeID, Height: h, AppHash: hex.EncodeToString(hash)})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/cluster", serveCluster(opts))
	return mux
}
