package kafka

import (
	"math"
	"time"
)

// max.connection.creation.rate is measured as Kafka measures it: a Rate
// over quota.window.num (11) samples of quota.window.size.seconds (1 s),
// Kafka's defaults, neither settable in Stele; a connection that takes the
// rate above the limit is held for the time that brings it back under,
// at most one window (ConnectionQuotas' maxThrottleTimeMs).
const (
	connRateSamples = 11
	connRateWindow  = time.Second
	connRateMaxWait = connRateWindow
)

// connRate is the broker-wide connection creation rate sensor of Kafka's
// ConnectionQuotas: a Sensor holding a Rate of a SampledStat, with the
// quota max.connection.creation.rate. Kafka's quirks are kept, so the same
// limit admits the same bursts: a fresh sensor counts as if
// connRateSamples-1 whole windows had passed (Rate.windowSize), so up to
// about ten times the limit connect at once before the first one waits.
// Only Serve's goroutine uses it.
type connRate struct {
	// samples is a ring of connRateSamples+1 samples (SampledStat keeps
	// one extra for the sample overlapping the window's start); cur is
	// the one being filled. Times are offsets from base.
	samples [connRateSamples + 1]rateSample
	used    int // samples in use, from the first
	cur     int
	base    time.Time
}

type rateSample struct {
	start, last time.Duration
	count       float64
}

// record counts a new connection at now and returns how long it must wait
// so that the rate stays at most limit a second (Sensor.record and
// QuotaUtils.boundedThrottleTime): 0 when it is under, connRateMaxWait at
// most. As in Kafka, the connection is counted whether or not it waits.
func (r *connRate) record(now time.Time, limit int) time.Duration {
	return r.recordN(now, 1, float64(limit), connRateMaxWait)
}

// recordN counts n (a connection, or bytes for a client quota) at now and
// returns how long the client must wait so that the rate stays at most
// limit a second, at most maxWait.
func (r *connRate) recordN(now time.Time, n, limit float64, maxWait time.Duration) time.Duration {
	if r.base.IsZero() {
		r.base = now
	}
	t := now.Sub(r.base).Truncate(time.Millisecond) // Kafka's clock is in ms
	if r.used == 0 {
		r.samples[0], r.used = rateSample{start: t, last: t}, 1
	}
	s := &r.samples[r.cur]
	if t-s.start >= connRateWindow {
		r.cur = (r.cur + 1) % len(r.samples)
		if r.cur >= r.used {
			r.used = r.cur + 1
		}
		r.samples[r.cur] = rateSample{start: t, last: t}
		s = &r.samples[r.cur]
	}
	s.count += n
	s.last = t
	rate, window := r.measure(t)
	bound := limit
	if rate <= bound {
		return 0
	}
	// X = (O - T) / T * W; with T = 0 that is forever, capped as Kafka caps it.
	wait := (rate - bound) / bound * float64(window.Milliseconds())
	if math.IsInf(wait, 0) || math.IsNaN(wait) || wait >= float64(maxWait.Milliseconds()) {
		return maxWait
	}
	return time.Duration(math.Round(wait)) * time.Millisecond
}

// rateAt is the rate a second measured at now, counting nothing.
func (r *connRate) rateAt(now time.Time) float64 {
	if r.used == 0 {
		return 0
	}
	rate, _ := r.measure(now.Sub(r.base).Truncate(time.Millisecond))
	return rate
}

// measure is Kafka's Rate.measure at t (an offset from base): purge the
// samples with no event in the whole monitored span, then the count over
// the window's size. It returns the rate and the window.
func (r *connRate) measure(t time.Duration) (float64, time.Duration) {
	for i := 0; i < r.used; i++ {
		if t-r.samples[i].last >= connRateSamples*connRateWindow {
			r.samples[i] = rateSample{start: t, last: t}
		}
	}
	var total float64
	oldest := r.samples[0].start
	for i := 0; i < r.used; i++ {
		total += r.samples[i].count
		oldest = min(oldest, r.samples[i].start)
	}
	window := t - oldest
	if full := int(window / connRateWindow); full < connRateSamples-1 {
		window += time.Duration(connRateSamples-1-full) * connRateWindow
	}
	window = max(window, time.Millisecond)
	return total / (float64(window.Milliseconds()) / 1000), window
}
