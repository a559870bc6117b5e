package kafka

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/fsm"
)

// Per-tenant metrics (issue 18, docs/tenants.md "Metrics"), each labelled
// tenant="NAME", one series per existing tenant (a deleted tenant's go
// with it):
//
//	stele_tenant_requests_total        requests its connections made to this broker
//	stele_tenant_produce_bytes_total   record bytes this broker accepted from them
//	stele_tenant_fetch_bytes_total     record bytes this broker returned to them
//	stele_tenant_throttle_seconds_total time their connections were throttled by quotas
//	stele_tenant_connections           its authenticated connections open to this broker
//	stele_tenant_connections_refused_total logins this broker refused at its connections quota
//	stele_tenant_topics, _partitions, _groups   what it owns (the committed state)
//	stele_tenant_stored_bytes          its partitions' bytes on this broker's disk
//	stele_tenant_quota_limit{quota}    each quota it has
//
// The counters are this broker's (the connections it served); the gauges
// are read from the committed state when scraped, the same on every
// broker but for stored bytes (each broker's files). The default tenant is
// not labelled: the broker-wide metrics are its.

type tenantCounters struct {
	requests, produceBytes, fetchBytes, throttleNanos, connectionsRefused atomic.Int64
}

type tenantMetrics struct {
	b     *broker.Broker
	conns *tenantConns
	mu    sync.Mutex
	by    map[string]*tenantCounters

	requests, produceBytes, fetchBytes, throttle *prometheus.Desc
	connections, connectionsRefused              *prometheus.Desc
	topics, partitions, groups, stored, quota    *prometheus.Desc
}

func newTenantMetrics(b *broker.Broker, conns *tenantConns) *tenantMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("stele_tenant_"+name, help, append([]string{"tenant"}, labels...), nil)
	}
	return &tenantMetrics{b: b, conns: conns, by: map[string]*tenantCounters{},
		requests:           d("requests_total", "Kafka requests the tenant's connections made to this broker."),
		produceBytes:       d("produce_bytes_total", "Record batch bytes this broker accepted from the tenant's producers."),
		fetchBytes:         d("fetch_bytes_total", "Record batch bytes this broker returned to the tenant's consumers."),
		throttle:           d("throttle_seconds_total", "Time the tenant's connections to this broker were throttled by client quotas."),
		connections:        d("connections", "The tenant's authenticated connections open to this broker."),
		connectionsRefused: d("connections_refused_total", "Logins of the tenant's users this broker refused at the tenant's connections quota."),
		topics:             d("topics", "The tenant's topics."),
		partitions:         d("partitions", "The partitions of the tenant's topics."),
		groups:             d("groups", "The tenant's consumer groups, and from app version 16 its share groups."),
		stored:             d("stored_bytes", "The bytes of the tenant's partitions on this broker's disk."),
		quota:              d("quota_limit", "Each quota the tenant has.", "quota"),
	}
}

// of returns tenant's counters ("" : nil, the default tenant has none).
func (m *tenantMetrics) of(tenant string) *tenantCounters {
	if tenant == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.by[tenant]
	if c == nil {
		c = &tenantCounters{}
		m.by[tenant] = c
	}
	return c
}

func (m *tenantMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.requests, m.produceBytes, m.fetchBytes, m.throttle, m.connections, m.connectionsRefused, m.topics, m.partitions, m.groups, m.stored, m.quota} {
		ch <- d
	}
}

func (m *tenantMetrics) Collect(ch chan<- prometheus.Metric) {
	tenants := m.b.Tenants()
	type usage struct{ topics, partitions, groups, stored float64 }
	use := map[string]*usage{}
	at := func(name string) *usage {
		t, _ := fsm.SplitTenant(name)
		if _, ok := tenants.Get(t); t == "" || !ok {
			return nil
		}
		if use[t] == nil {
			use[t] = &usage{}
		}
		return use[t]
	}
	for _, tv := range m.b.View().Topics() {
		if u := at(tv.Name); u != nil {
			u.topics++
			u.partitions += float64(len(tv.Partitions))
			for _, p := range tv.Partitions {
				u.stored += float64(p.Size())
			}
		}
	}
	if gv := m.b.Groups(); gv != nil {
		for _, g := range gv.Groups() {
			if u := at(g.Name); u != nil {
				u.groups++
			}
		}
	}
	if sv := m.b.ShareGroups(); sv != nil && m.b.Upgrade().Version >= fsm.ShareGroupsQuotaVersion {
		for _, g := range sv.Groups() {
			if u := at(g.Name); u != nil {
				u.groups++
			}
		}
	}
	m.mu.Lock()
	for t := range m.by {
		if _, ok := tenants.Get(t); !ok {
			delete(m.by, t) // deleted: its series go
		}
	}
	counters := make(map[string]*tenantCounters, len(m.by))
	for t, c := range m.by {
		counters[t] = c
	}
	m.mu.Unlock()
	for _, info := range tenants.All() {
		t := info.Name
		u := use[t]
		if u == nil {
			u = &usage{}
		}
		var c tenantCounters
		cp := counters[t]
		if cp == nil {
			cp = &c
		}
		ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, float64(cp.requests.Load()), t)
		ch <- prometheus.MustNewConstMetric(m.produceBytes, prometheus.CounterValue, float64(cp.produceBytes.Load()), t)
		ch <- prometheus.MustNewConstMetric(m.fetchBytes, prometheus.CounterValue, float64(cp.fetchBytes.Load()), t)
		ch <- prometheus.MustNewConstMetric(m.throttle, prometheus.CounterValue, time.Duration(cp.throttleNanos.Load()).Seconds(), t)
		ch <- prometheus.MustNewConstMetric(m.connections, prometheus.GaugeValue, float64(m.conns.open(t)), t)
		ch <- prometheus.MustNewConstMetric(m.connectionsRefused, prometheus.CounterValue, float64(cp.connectionsRefused.Load()), t)
		ch <- prometheus.MustNewConstMetric(m.topics, prometheus.GaugeValue, u.topics, t)
		ch <- prometheus.MustNewConstMetric(m.partitions, prometheus.GaugeValue, u.partitions, t)
		ch <- prometheus.MustNewConstMetric(m.groups, prometheus.GaugeValue, u.groups, t)
		ch <- prometheus.MustNewConstMetric(m.stored, prometheus.GaugeValue, u.stored, t)
		for _, k := range fsm.TenantQuotaKeys() {
			if v, ok := info.Quotas[k]; ok {
				ch <- prometheus.MustNewConstMetric(m.quota, prometheus.GaugeValue, float64(v), t, k)
			}
		}
	}
}
