package kafka

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/sasl"
)

// A tenant's quotas that each broker enforces on its own (issue 18,
// docs/tenants.md "Quotas"; set from app version 5), as Kafka enforces its
// client quotas: per broker, over the traffic that broker serves.
//
//   - producer_byte_rate, consumer_byte_rate: the bytes of all the
//     tenant's produce requests, and of all the fetch answers to it, are
//     measured together, on one sensor per tenant and quota (throttle.go's
//     windows), and a response that takes the rate over the quota is
//     throttled as a user's quota throttles it (KIP-219: throttle_time_ms,
//     and the connection muted that long). A user's own quota and its
//     tenant's both apply; the longer throttle wins.
//   - connections: the tenant's authenticated connections to this broker.
//     A login that would go past it fails (SASL_AUTHENTICATION_FAILED,
//     the message naming the quota; a certificate's principal: the TLS
//     connection is closed), counts as no failed login, and the client's
//     other connections go on. Lowering the quota closes none.

// tenantConns counts each tenant's authenticated connections to this
// broker.
type tenantConns struct {
	mu sync.Mutex
	n  map[string]int
}

// open is how many connections tenant has open here.
func (tc *tenantConns) open(tenant string) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.n[tenant]
}

// tenantQuota returns tenant's quota key and whether it has one.
func (s *Server) tenantQuota(tenant, key string) (int64, bool) {
	if tenant == "" {
		return 0, false
	}
	info, ok := s.b.Tenants().Get(tenant)
	if !ok {
		return 0, false
	}
	v, ok := info.Quotas[key]
	return v, ok
}

// admitTenant counts c as a connection of principal's tenant, unless the
// tenant's connections quota is reached; a connection already counted
// (re-authentication keeps its principal) is not counted again.
func (c *conn) admitTenant(principal string) error {
	t := c.tenantOfPrincipal(principal)
	if t == "" || t == c.countedTenant {
		return nil
	}
	limit, has := c.s.tenantQuota(t, fsm.QuotaTenantConnections)
	tc := &c.s.tenantConns
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if has && int64(tc.n[t]) >= limit {
		if m := c.s.tenantMetrics.of(t); m != nil {
			m.connectionsRefused.Add(1)
		}
		return fmt.Errorf("%w: tenant %s's quota of connections to this broker (%d) is reached", sasl.ErrAuthentication, t, limit)
	}
	if tc.n == nil {
		tc.n = map[string]int{}
	}
	tc.n[t]++
	c.countedTenant = t
	return nil
}

// releaseTenant uncounts c's connection from its tenant's, when it ends.
func (c *conn) releaseTenant() {
	if c.countedTenant == "" {
		return
	}
	tc := &c.s.tenantConns
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.n[c.countedTenant]--; tc.n[c.countedTenant] <= 0 {
		delete(tc.n, c.countedTenant)
	}
	c.countedTenant = ""
}

// tenantByteQuota counts n bytes of c's tenant against its quota key
// (producer_byte_rate or consumer_byte_rate) and returns the throttle, 0
// when it is under the quota or has none. A tenant's rates are measured
// whether or not it has the quota, for TenantTraffic.
func (c *conn) tenantByteQuota(key string, n int) time.Duration {
	t := c.tenantNow()
	if t == "" || n <= 0 {
		return 0
	}
	limit := math.Inf(1)
	if q, ok := c.s.tenantQuota(t, key); ok {
		limit = float64(q)
	}
	return c.s.quotaSensors.record(tenantSensor(key, t), float64(n), limit, false)
}

func tenantSensor(key, tenant string) string { return "tenant\x00" + key + "\x00" + tenant }

// TenantTraffic is what tenant uses of this broker now, by quota key: its
// connections open, and its produce and fetch byte rates (bytes a second,
// over the quotas' windows). The HTTP API shows it as the usage of those
// quotas.
func (s *Server) TenantTraffic(tenant string) map[string]int64 {
	out := map[string]int64{fsm.QuotaTenantConnections: int64(s.tenantConns.open(tenant))}
	now := time.Now()
	qs := &s.quotaSensors
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, key := range []string{fsm.QuotaTenantProducerByteRate, fsm.QuotaTenantConsumerByteRate} {
		var rate float64
		if sn := qs.m[tenantSensor(key, tenant)]; sn != nil {
			rate = sn.rate.rateAt(now)
		}
		out[key] = int64(math.Round(rate))
	}
	return out
}
