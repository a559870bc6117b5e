// Package httpapi serves Stele's HTTP endpoints: /healthz for liveness and
// readiness checks, /metrics for Prometheus, /v1/cluster for the consensus
// view (validators, their last signed blocks, peers), upgrades
// (/v1/cluster/upgrade, upgrade.go), membership changes
// (/v1/cluster/membership, membership.go), signed administration
// (/v1/admin/signed, admin.go), tenants (/v1/tenants, tenants.go), the
// AsyncAPI document (/v1/asyncapi, asyncapi.go) and the native API's
// key streams (/v1/topics/{topic}/keys/..., keys.go) and reads by subject
// (/v1/topics/{topic}/records?subject=, /v1/topics/{topic}/subjects,
// subjects.go), and Confluent's Schema Registry API (/subjects, /schemas,
// /config, /mode, /compatibility: schemas.go). Later issues add the
// rest of the native API and the console here.
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
	// SignedHeader returns the protobuf-encoded CometBFT SignedHeader of a
	// height, for proofs (nil: this broker serves none).
	SignedHeader func(height int64) ([]byte, error)
	// HeaderValidators returns the validator set the header of a height
	// names when that is not the genesis set (nil when it is, or when this
	// broker does not hold it): a protobuf-encoded CometBFT ValidatorSet,
	// which proofs carry so that light clients follow the change
	// (pkg/proof's VerifyHeaderWith). Nil: proofs carry none.
	HeaderValidators func(height int64) []byte
	// Genesis returns the chain's genesis document (JSON).
	Genesis func() ([]byte, error)
	// Security authenticates each request and authorizes the routes that
	// ACLs protect (auth.go); nil serves every route to anyone (tests).
	Security *Security
	// TenantTraffic, when set, reports what a tenant uses of this broker
	// now by quota key (connections open, produce and fetch byte rates):
	// the usage the tenant routes show for those quotas.
	TenantTraffic func(tenant string) map[string]int64
	// KafkaAddr is this broker's Kafka address, for the AsyncAPI
	// document's servers when the cluster's directory names none.
	KafkaAddr func() string

	// typed decodes records for typed reads (typed.go); New makes it.
	typed *typedDecoder
}

// Health is the body of /healthz.
type Health struct {
	Status  string `json:"status"`
	NodeID  int32  `json:"node_id"`
	Height  int64  `json:"height"`
	AppHash string `json:"app_hash"`
}

// routes are the patterns New serves; docs/openapi.json documents each
// (TestOpenAPIListsEveryRoute).
var routes = []string{
	"GET /healthz",
	"GET /v1/admin/signed",
	"GET /v1/asyncapi",
	"POST /v1/admin/signed",
	"GET /metrics",
	"GET /v1/cluster",
	"GET /v1/cluster/genesis",
	"GET /v1/cluster/headers",
	"GET /v1/cluster/membership",
	"POST /v1/cluster/membership",
	"GET /v1/cluster/upgrade",
	"POST /v1/cluster/upgrade",
	"GET /v1/producer-keys/{principal}",
	"PUT /v1/producer-keys/{principal}",
	"GET /v1/state/proof",
	"GET /v1/tables/{topic}/{key}",
	"GET /v1/tables/{topic}/{key}/proof",
	"GET /v1/topics/{topic}/partitions/{partition}/offsets/{offset}",
	"GET /v1/topics/{topic}/partitions/{partition}/proof",
	"GET /v1/topics/{topic}/keys",
	"GET /v1/topics/{topic}/records",
	"GET /v1/topics/{topic}/subjects",
	"GET /v1/topics/{topic}/keys/{key}/events",
	"POST /v1/topics/{topic}/keys/{key}/events",
	"GET /v1/tenants",
	"POST /v1/tenants",
	"GET /v1/tenants/{tenant}",
	"DELETE /v1/tenants/{tenant}",
	"PUT /v1/tenants/{tenant}/quotas",
	"POST /v1/wait",
	"GET /v1/share-groups",
	"GET /v1/share-groups/{group}",
	"POST /v1/share-groups/{group}/acquire",
	"POST /v1/share-groups/{group}/acknowledge",
	"DELETE /v1/share-groups/{group}/members/{member}",
	"GET /v1/plugins",
	"GET /v1/plugins/{name}",
	"PUT /v1/plugins/{name}",
	"DELETE /v1/plugins/{name}",
}

// New returns the handler for every endpoint.
func New(opts Options) http.Handler {
	opts.typed = &typedDecoder{}
	handlers := map[string]http.Handler{
		"GET /healthz": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h, hash := opts.Broker.Info()
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(Health{Status: "ok", NodeID: opts.NodeID, Height: h, AppHash: hex.EncodeToString(hash)})
		}),
		"GET /metrics":            promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}),
		"GET /v1/cluster":         serveCluster(opts),
		"GET /v1/admin/signed":    serveSignedAdminGet(opts),
		"GET /v1/asyncapi":        withMinHeight(opts, serveAsyncAPI(opts)),
		"POST /v1/admin/signed":   serveSignedAdminPost(opts),
		"GET /v1/cluster/genesis": serveGenesis(opts),
		"GET /v1/topics/{topic}/partitions/{partition}/proof":            withMinHeight(opts, serveProof(opts)),
		"GET /v1/topics/{topic}/keys":                                    withMinHeight(opts, serveKeys(opts)),
		"GET /v1/topics/{topic}/records":                                 withMinHeight(opts, serveSubjectRecords(opts)),
		"GET /v1/topics/{topic}/subjects":                                withMinHeight(opts, serveSubjects(opts)),
		"GET /v1/state/proof":                                            withMinHeight(opts, serveStateProof(opts)),
		"GET /v1/topics/{topic}/keys/{key}/events":                       withMinHeight(opts, serveKeyEvents(opts)),
		"POST /v1/topics/{topic}/keys/{key}/events":                      serveAppend(opts),
		"GET /v1/tables/{topic}/{key}":                                   withMinHeight(opts, serveTable(opts)),
		"GET /v1/tables/{topic}/{key}/proof":                             withMinHeight(opts, serveTableProof(opts)),
		"POST /v1/wait":                                                  serveWait(opts),
		"GET /v1/cluster/headers":                                        serveHeaders(opts),
		"GET /v1/cluster/membership":                                     serveMembershipGet(opts),
		"POST /v1/cluster/membership":                                    serveMembershipPost(opts),
		"GET /v1/cluster/upgrade":                                        serveUpgradeGet(opts),
		"POST /v1/cluster/upgrade":                                       serveUpgradePost(opts),
		"GET /v1/producer-keys/{principal}":                              withMinHeight(opts, serveProducerKeyGet(opts)),
		"PUT /v1/producer-keys/{principal}":                              serveProducerKeyPut(opts),
		"GET /v1/topics/{topic}/partitions/{partition}/offsets/{offset}": withMinHeight(opts, serveOffsetHeight(opts)),
		"GET /v1/tenants":                                                withMinHeight(opts, serveTenants(opts)),
		"POST /v1/tenants":                                               serveTenantCreate(opts),
		"GET /v1/tenants/{tenant}":                                       withMinHeight(opts, serveTenant(opts)),
		"DELETE /v1/tenants/{tenant}":                                    serveTenantDelete(opts),
		"PUT /v1/tenants/{tenant}/quotas":                                serveTenantQuotas(opts),
		"GET /v1/share-groups":                                           withMinHeight(opts, serveShareGroups(opts)),
		"GET /v1/share-groups/{group}":                                   withMinHeight(opts, serveShareGroup(opts)),
		"POST /v1/share-groups/{group}/acquire":                          serveShareAcquire(opts),
		"POST /v1/share-groups/{group}/acknowledge":                      serveShareAck(opts),
		"DELETE /v1/share-groups/{group}/members/{member}":               serveShareLeave(opts),
		"GET /v1/plugins":                                                withMinHeight(opts, servePlugins(opts)),
		"GET /v1/plugins/{name}":                                         withMinHeight(opts, servePlugin(opts)),
		"PUT /v1/plugins/{name}":                                         servePluginDeploy(opts),
		"DELETE /v1/plugins/{name}":                                      servePluginRemove(opts),
	}
	mux := http.NewServeMux()
	var g *guard
	if opts.Security != nil {
		g = newGuard(opts)
	}
	for _, r := range routes {
		h := handlers[r]
		if g != nil {
			h = g.wrap(r, h, routeACLs[r])
		}
		mux.Handle(r, h)
	}
	// The schema registry's routes are Confluent's (schemas.go,
	// docs/schemas.md), not the native API's.
	for r, h := range registryRoutes(opts) {
		if g != nil {
			acl := registryACL(r)
			h = g.wrap(r, h, &acl)
		}
		mux.Handle(r, h)
	}
	return mux
}
