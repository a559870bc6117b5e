package kafka

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// Client quota enforcement (client_quotas.go): producer_byte_rate and
// consumer_byte_rate, measured as Kafka's ClientQuotaManager measures them,
// a rate over 11 windows of 1 s (the sensor of connrate.go), one sensor per
// (user, client id) the applying quota names: a default side of the
// quota's entity is measured per actual user or client id, as Kafka's
// metric tags make it, a named side as that name, an absent side not at
// all. A response that takes the rate above the quota carries
// throttle_time_ms, the time that brings it back under (at most the 11 s
// the rate spans), and its connection reads nothing more for that time
// (KIP-219: the client is told and the broker mutes the channel).

// request_percentage is measured as Kafka's request quota is: the time
// the broker spends handling a client's requests, as a percentage of one
// thread (a rate of seconds a second × 100), over the same windows. Here
// that is each request's time from decoding to its answer being ready,
// less the time it waited (for the chain to order its commands, a Fetch
// for records, a JoinGroup for the group, a failed login's delay: Kafka's
// purgatory and delay queues, which hold no thread either). A response
// that takes the rate over the quota carries throttle_time_ms (the larger
// of it and any byte-rate throttle) and mutes the connection. Exempt, as
// in Kafka: ApiVersions, SaslHandshake, SaslAuthenticate.

// quotaMaxThrottle caps a throttle: the span the rate is measured over.
const quotaMaxThrottle = connRateSamples * connRateWindow

// maxQuotaSensors bounds the sensors kept; the least recently used goes
// first (Kafka expires a client's sensors after an hour idle).
const maxQuotaSensors = 10000

type quotaSensor struct {
	rate connRate
	used time.Time
}

// quotaSensors are a server's client quota sensors.
type quotaSensors struct {
	mu sync.Mutex
	m  map[string]*quotaSensor
}

// recordQuota counts n (bytes, or partition mutations) of the
// connection's principal and client id against the quota key, and returns
// the throttle (0 when no quota applies or the rate is under it).
func (c *conn) recordQuota(key string, n int) time.Duration {
	d, _ := c.quota(key, float64(n), false)
	return d
}

// waitedSince adds the time since t0 to the connection's waiting.
func (c *conn) waitedSince(t0 time.Time) { c.waited.Add(int64(time.Since(t0))) }

// chargeRequest counts a request's handling time, less what the
// connection's requests waited meanwhile, against request_percentage,
// and throttles the response when it takes the rate over the quota.
func (c *conn) chargeRequest(key int16, resp kmsg.Response, took time.Duration) {
	waited := time.Duration(c.waited.Swap(0))
	switch key {
	case apiVersionsKey, saslHandshakeKey, saslAuthenticateKey:
		return
	}
	busy := took - waited
	if busy <= 0 {
		return
	}
	d, _ := c.quota(fsm.QuotaRequestPercentage, busy.Seconds()*100, false)
	if d <= 0 {
		return
	}
	tr, ok := resp.(kmsg.ThrottleResponse)
	st, ok2 := resp.(kmsg.SetThrottleResponse)
	if !ok || !ok2 {
		c.throttle(d) // muted all the same
		return
	}
	ms, _ := tr.Throttle()
	st.SetThrottle(max(ms, c.throttle(d)))
}

// mutationQuota decides n partition mutations under
// controller_mutation_rate (KIP-599). strict (CreateTopics v6+,
// CreatePartitions v3+, DeleteTopics v5+): while the rate is over the
// quota the mutations are refused (THROTTLING_QUOTA_EXCEEDED) and not
// counted; otherwise they are counted, and the throttle returned is the
// response's.
func (c *conn) mutationQuota(n int, strict bool) (throttle time.Duration, refused bool) {
	return c.quota(fsm.QuotaControllerMutationRate, float64(n), strict)
}

func (c *conn) quota(key string, n float64, strict bool) (time.Duration, bool) {
	quotas := c.s.b.Quotas()
	if quotas.Empty() || n <= 0 {
		return 0, false
	}
	user := strings.TrimPrefix(c.principalNow(), "User:")
	limit, from, ok := quotas.Quota(user, c.clientID, key)
	if !ok {
		return 0, false
	}
	tag := func(side fsm.QuotaName, actual string) string {
		switch {
		case !side.Set:
			return ""
		case side.Default:
			return actual
		}
		return side.Name
	}
	id := key + "\x00" + tag(from.User, user) + "\x00" + tag(from.ClientID, c.clientID)
	d := c.s.quotaSensors.record(id, n, limit, strict)
	if d < 0 {
		return -d, true
	}
	return d, false
}

// record counts n on the sensor id against limit and returns the throttle
// (0 under the limit). strict: while the rate is already over the limit,
// n is not counted and the throttle returned is negative, its length the
// time still to wait.
func (qs *quotaSensors) record(id string, n, limit float64, strict bool) time.Duration {
	now := time.Now()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.m == nil {
		qs.m = map[string]*quotaSensor{}
	}
	s := qs.m[id]
	if s == nil {
		if len(qs.m) >= maxQuotaSensors {
			qs.evictLocked()
		}
		s = &quotaSensor{}
		qs.m[id] = s
	}
	s.used = now
	if strict {
		if d := s.rate.recordN(now, 0, limit, quotaMaxThrottle); d > 0 {
			return -d
		}
	}
	return s.rate.recordN(now, n, limit, quotaMaxThrottle)
}

// evictLocked drops the least recently used tenth of the sensors.
func (qs *quotaSensors) evictLocked() {
	type aged struct {
		id   string
		used time.Time
	}
	all := make([]aged, 0, len(qs.m))
	for id, s := range qs.m {
		all = append(all, aged{id, s.used})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, a := range all[:max(1, len(all)/10)] {
		delete(qs.m, a.id)
	}
}

// throttle mutes the connection for d: its reader takes no request before
// then (KIP-219), and returns d in milliseconds for the response.
// mutationThrottle does not mute a strict (KIP-599) request's connection:
// the client is told to back off and does.
func (c *conn) throttle(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	until := time.Now().Add(d).UnixNano()
	for {
		cur := c.mutedUntil.Load()
		if cur >= until || c.mutedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	c.s.metrics.throttledResponses.Inc()
	if tc := c.s.tenantMetrics.of(c.tenantNow()); tc != nil {
		tc.throttleNanos.Add(int64(d))
	}
	return int32(d.Milliseconds())
}

func (c *conn) mutationThrottle(d time.Duration, strict bool) int32 {
	if !strict {
		return c.throttle(d)
	}
	if d > 0 {
		c.s.metrics.throttledResponses.Inc()
		if tc := c.s.tenantMetrics.of(c.tenantNow()); tc != nil {
			tc.throttleNanos.Add(int64(d))
		}
	}
	return int32(d.Milliseconds())
}
