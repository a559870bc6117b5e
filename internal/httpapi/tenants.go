package httpapi

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
)

// Tenants (issue 18, docs/tenants.md): GET /v1/tenants lists them, GET
// /v1/tenants/{tenant} describes one with its usage against its quotas
// (connections and byte rates: this broker's);
// POST /v1/tenants creates one, PUT /v1/tenants/{tenant}/quotas sets and
// removes quotas, DELETE /v1/tenants/{tenant} deletes one with all it owns
// and answers what was removed. Reading needs DESCRIBE on the cluster,
// changing ALTER on the cluster (the cluster administrator's), checked as
// the Kafka API checks them (auth.go). Under stele.admin.signed=true the
// changes are refused unless signed (POST /v1/admin/signed; `stele
// tenant ... --sign`).

// TenantQuotaUsage is one quota of a tenant: its limit (absent: none) and
// what is in use.
type TenantQuotaUsage struct {
	Limit *int64 `json:"limit,omitempty"`
	Used  int64  `json:"used"`
}

// Tenant is a tenant as the HTTP API shows it.
type Tenant struct {
	Name          string `json:"name"`
	CreatedHeight int64  `json:"created_height"`
	// Quotas holds every quota key with its limit, if set, and usage.
	Quotas map[string]TenantQuotaUsage `json:"quotas"`
}

// TenantCreate is the body of POST /v1/tenants.
type TenantCreate struct {
	Name   string           `json:"name"`
	Quotas map[string]int64 `json:"quotas,omitempty"`
}

// TenantQuotasChange is the body of PUT /v1/tenants/{tenant}/quotas.
type TenantQuotasChange struct {
	Set    map[string]int64 `json:"set,omitempty"`
	Remove []string         `json:"remove,omitempty"`
}

// TenantResult is the answer of a change: the tenant, the height that
// applied it and, for a deletion, how many of each kind it removed.
type TenantResult struct {
	Tenant  string         `json:"tenant"`
	Height  int64          `json:"height"`
	Removed map[string]int `json:"removed,omitempty"`
}

// tenantUsage counts what each tenant uses now, by quota key: what it
// owns in the committed state (stored bytes: its logs on this broker), and
// what it uses of this broker (Options.TenantTraffic).
func tenantUsage(opts Options) map[string]map[string]int64 {
	use := map[string]map[string]int64{}
	if opts.TenantTraffic != nil {
		for _, info := range opts.Broker.Tenants().All() {
			use[info.Name] = opts.TenantTraffic(info.Name)
		}
	}
	add := func(name, key string, n int64) {
		t, _ := fsm.SplitTenant(name)
		if t == "" {
			return
		}
		if use[t] == nil {
			use[t] = map[string]int64{}
		}
		use[t][key] += n
	}
	for _, tv := range opts.Broker.View().Topics() {
		add(tv.Name, fsm.QuotaTopics, 1)
		add(tv.Name, fsm.QuotaPartitions, int64(len(tv.Partitions)))
		for _, p := range tv.Partitions {
			add(tv.Name, fsm.QuotaStoredBytesKey, p.Size()) // this broker's files
		}
	}
	if gv := opts.Broker.Groups(); gv != nil {
		for _, g := range gv.Groups() {
			add(g.Name, fsm.QuotaGroups, 1)
		}
	}
	if sv := opts.Broker.ShareGroups(); sv != nil && opts.Broker.Upgrade().Version >= fsm.ShareGroupsQuotaVersion {
		for _, g := range sv.Groups() {
			add(g.Name, fsm.QuotaGroups, 1) // counted against the quota from that version
		}
	}
	return use
}

func tenantOf(info fsm.TenantInfo, use map[string]int64) Tenant {
	t := Tenant{Name: info.Name, CreatedHeight: info.CreatedHeight, Quotas: map[string]TenantQuotaUsage{}}
	for _, k := range fsm.TenantQuotaKeys() {
		u := TenantQuotaUsage{Used: use[k]}
		if v, ok := info.Quotas[k]; ok {
			u.Limit = &v
		}
		t.Quotas[k] = u
	}
	return t
}

func serveTenants(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		use := tenantUsage(opts)
		out := []Tenant{}
		for _, info := range opts.Broker.Tenants().All() {
			out = append(out, tenantOf(info, use[info.Name]))
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func serveTenant(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("tenant")
		info, ok := opts.Broker.Tenants().Get(name)
		if !ok {
			httpError(w, http.StatusNotFound, "tenant %q does not exist", name)
			return
		}
		writeJSON(w, http.StatusOK, tenantOf(info, tenantUsage(opts)[name]))
	}
}

func serveTenantCreate(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req TenantCreate
		if !decodeBody(w, r, &req, "{name, quotas}") {
			return
		}
		c := fsm.CreateTenant{Name: req.Name}
		for _, k := range slices.Sorted(maps.Keys(req.Quotas)) {
			c.Quotas = append(c.Quotas, fsm.TenantQuota{Key: k, Value: req.Quotas[k]})
		}
		submitTenant(w, r, opts, req.Name, c, http.StatusCreated)
	}
}

func serveTenantQuotas(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req TenantQuotasChange
		if !decodeBody(w, r, &req, "{set, remove}") {
			return
		}
		name := r.PathValue("tenant")
		c := fsm.AlterTenantQuotas{Name: name}
		for _, k := range slices.Sorted(maps.Keys(req.Set)) {
			c.Ops = append(c.Ops, fsm.TenantQuotaOp{Key: k, Value: req.Set[k]})
		}
		for _, k := range req.Remove {
			c.Ops = append(c.Ops, fsm.TenantQuotaOp{Key: k, Remove: true})
		}
		submitTenant(w, r, opts, name, c, http.StatusOK)
	}
}

func serveTenantDelete(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("tenant")
		submitTenant(w, r, opts, name, fsm.DeleteTenant{Name: name}, http.StatusOK)
	}
}

// submitTenant submits one of the tenants' commands and answers its
// outcome: ok with a TenantResult, a refusal with the status of its code.
func submitTenant(w http.ResponseWriter, r *http.Request, opts Options, name string, c fsm.Command, ok int) {
	if res := fsm.CheckCommand(c); res.Code != 0 {
		httpError(w, http.StatusBadRequest, "%s", res.Message)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := opts.Broker.SubmitOne(ctx, c)
	switch {
	case err != nil:
		httpError(w, http.StatusServiceUnavailable, "the change was not confirmed (it may still be applied): %v", err)
	case res.Code != 0:
		httpError(w, tenantStatus(res.Code), "%s", res.Message)
	default:
		w.Header().Set(HeightHeader, strconv.FormatInt(res.Height, 10))
		out := TenantResult{Tenant: name, Height: res.Height}
		if len(res.Counts) > 0 {
			out.Removed = map[string]int{}
			for _, n := range res.Counts {
				out.Removed[n.What] = n.N
			}
		}
		writeJSON(w, ok, out)
	}
}

// tenantStatus is the HTTP status of a refused tenant command.
func tenantStatus(code int16) int {
	switch code {
	case kerr.DuplicateResource.Code:
		return http.StatusConflict
	case kerr.ResourceNotFound.Code:
		return http.StatusNotFound
	case kerr.PolicyViolation.Code:
		return http.StatusForbidden
	case kerr.UnsupportedVersion.Code:
		return http.StatusNotImplemented
	}
	return http.StatusBadRequest
}

// decodeBody decodes a JSON body of at most 1 MiB into v, refusing
// unknown fields; on failure it answers 400 naming the expected shape.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, shape string) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httpError(w, http.StatusBadRequest, "the body must be a JSON object %s: %s", shape, strings.TrimPrefix(err.Error(), "json: "))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
