package kafka

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConnRateSensor: the sensor gives Kafka's throttle times (Reference:
// Kafka's Rate.windowSize, SampledStat and QuotaUtils.throttleTime, with
// ConnectionQuotas' 11 samples of 1 s and its 1 s cap). A fresh sensor
// counts ten whole windows as passed, so at 5 a second 50 connections at
// once pass and the 51st waits (5.1 - 5) / 5 * 10 s = 200 ms. The burst
// spends the window's budget: clients connecting as soon as they are let
// in get about one a second (a wait is at most 1 s) until the burst's
// sample leaves the 11 s window, then about five a second; an idle
// sensor forgets; a limit of 0 holds every
// connection the whole second.
func TestConnRateSensor(t *testing.T) {
	var r connRate
	t0 := time.Unix(1_700_000_000, 0)
	for i := 0; i < 50; i++ {
		if w := r.record(t0, 5); w != 0 {
			t.Fatalf("connection %d of a burst of 50 at 5/s waits %v", i+1, w)
		}
	}
	if w := r.record(t0, 5); w != 200*time.Millisecond {
		t.Fatalf("the 51st waits %v, want 200ms", w)
	}
	now, n := t0.Add(200*time.Millisecond), 51
	var last11, last41 int
	for now.Before(t0.Add(41 * time.Second)) {
		w := r.record(now, 5)
		if w < 0 || w > connRateMaxWait {
			t.Fatalf("a wait of %v", w)
		}
		n++
		if now.Before(t0.Add(11 * time.Second)) {
			last11 = n
		}
		last41 = n
		now = now.Add(max(w, time.Millisecond))
	}
	if last11 > 5*11+11 {
		t.Errorf("%d connections in the first 11 s at 5/s, want at most %d", last11, 5*11+11)
	}
	if rate := float64(last41-last11) / 30; rate < 4 || rate > 6 {
		t.Errorf("%.2f connections a second from 11 s to 41 s, want about 5", rate)
	}
	t.Logf("%d connections in the first 11 s, %d by 41 s", last11, last41)
	if w := r.record(now.Add(12*time.Second), 5); w != 0 {
		t.Fatalf("after 12 s idle a connection waits %v", w)
	}
	var z connRate
	if w := z.record(t0, 0); w != connRateMaxWait {
		t.Fatalf("limit 0: %v, want %v", w, connRateMaxWait)
	}
	var big connRate
	for i := 0; i < 1000; i++ {
		if w := big.record(t0, defaultMaxConnections); w != 0 {
			t.Fatalf("Kafka's default limit throttled connection %d", i+1)
		}
	}
}

// TestConnectionCreationRate: max.connection.creation.rate set for this
// broker with kadm (IncrementalAlterConfigs) is described as
// DYNAMIC_BROKER_CONFIG over the static option, and a burst of raw TCP
// connections beyond what Kafka's rate window lets through at once is
// throttled, not refused: every connection is served, the later ones only
// after the listener held them (counted in
// stele_kafka_connections_throttled_total), as Kafka's acceptor delays
// accepting (KIP-612).
func TestConnectionCreationRate(t *testing.T) {
	tb := startTestBroker(t, func(o *Options) { o.MaxConnectionCreationRate = 1000 }) // static
	adm, _ := admin(t, tb.addr)
	rs, err := adm.AlterBrokerConfigs(ctx(t), []kadm.AlterConfig{{Name: "max.connection.creation.rate", Value: kmsg.StringPtr("5")}}, 0)
	if err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("setting max.connection.creation.rate 5 on broker 0: %v %+v", err, rs)
	}
	waitFor(t, 5*time.Second, "max.connection.creation.rate 5 to apply", func() error {
		if got := tb.srv.quotas.limits().rate; got != 5 {
			return fmt.Errorf("%d applied", got)
		}
		return nil
	})
	described, err := adm.DescribeBrokerConfigs(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := described.On("0", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, c := range rc.Configs {
		if c.Key == "max.connection.creation.rate" {
			got = fmt.Sprintf("%s@%s", c.MaybeValue(), c.Source)
			for _, s := range c.Synonyms {
				got += fmt.Sprintf(" %s@%s", deref(s.Value), s.Source)
			}
		}
	}
	if want := "5@DYNAMIC_BROKER_CONFIG 5@DYNAMIC_BROKER_CONFIG 1000@STATIC_BROKER_CONFIG 2147483647@DEFAULT_CONFIG"; got != want {
		t.Errorf("described: %q, want %q", got, want)
	}

	// 56 connections at once: about 50 (less the admin client's) pass at
	// once, the others are held 200 ms to 1 s each.
	const burst = 56
	start := time.Now()
	conns := make([]net.Conn, burst)
	for i := range conns {
		conns[i] = dialFrom(t, "127.0.0.1", tb.addr)
	}
	answered := make([]time.Time, burst)
	errs := make([]error, burst)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = served(c, 60*time.Second)
			answered[i] = time.Now()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("connection %d of the burst was not served (a throttled connection must wait, not be refused): %v", i+1, err)
		}
	}
	throttled := testutil.ToFloat64(tb.srv.metrics.throttled)
	held := testutil.ToFloat64(tb.srv.metrics.acceptBlocked.WithLabelValues("connection_rate"))
	// In the sensor's first 10 s at most 50 pass unheld, so 6 or more
	// are held and the last cannot be served before 56/5 - 10 = 1.2 s
	// whatever the machine's speed (a slow one only spreads the burst).
	// The bounds are half that.
	if throttled < 3 {
		t.Errorf("%v connections throttled, want at least 3", throttled)
	}
	if held < 0.5 {
		t.Errorf("the listener held connections %.2f s in all, want at least 0.5 s", held)
	}
	if last := answered[burst-1].Sub(start); last < 500*time.Millisecond {
		t.Errorf("the last connection of the burst was served %v after the burst began, want it held", last)
	}
	if !answered[0].Before(answered[burst-1]) {
		t.Errorf("the first connection of the burst (%v) was not served before the last (%v)", answered[0].Sub(start), answered[burst-1].Sub(start))
	}
	if n := testutil.ToFloat64(tb.srv.metrics.refused.WithLabelValues("max_connections_per_ip")); n != 0 {
		t.Errorf("%v connections refused", n)
	}
	t.Logf("%v of %d held, %.2f s in all; the last served after %v", throttled, burst, held, answered[burst-1].Sub(start))
}
