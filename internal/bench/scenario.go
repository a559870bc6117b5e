package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// producerSet is the producers of a run.
type producerSet struct {
	ps    []*producer
	quota atomic.Int64
}

// newProducers builds cfg.Producers clients and connects each to a broker,
// so that connection setup is not the first record's latency.
func (r *runner) newProducers(ctx context.Context) (*producerSet, error) {
	cfg := r.cfg
	s := &producerSet{}
	pl := newPayload(cfg.RecordSize)
	if cfg.JSON {
		pl = newJSONPayload(cfg.RecordSize)
	}
	keys := makeKeys(cfg.Keys, cfg.KeySize)
	for i := range cfg.Producers {
		cl, err := newClient(cfg, producerOpts(cfg)...)
		if err != nil {
			s.close()
			return nil, err
		}
		s.ps = append(s.ps, &producer{
			cl: cl, stats: &producerStats{}, payload: pl, keys: keys,
			index: i, stride: cfg.Producers, e2e: cfg.Scenario == EndToEnd,
			quota: &s.quota, limit: cfg.Records,
		})
	}
	if err := pingAll(ctx, cfg.Timeout, s.clients()); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// run sends from start until every producer is done.
func (s *producerSet) run(ctx context.Context, cfg *Config, start time.Time) {
	measureFrom := start.Add(cfg.Warmup)
	var end time.Time
	if cfg.Duration > 0 {
		end = measureFrom.Add(cfg.Duration)
	}
	var wg sync.WaitGroup
	for _, p := range s.ps {
		p.measureFrom, p.end = measureFrom, end
		if cfg.Rate > 0 {
			p.pacer = newPacer(start, cfg.Rate, cfg.Producers, p.index)
		}
		wg.Go(func() { p.run(ctx, cfg.Timeout) })
	}
	wg.Wait()
}

func (s *producerSet) clients() []*kgo.Client {
	cls := make([]*kgo.Client, len(s.ps))
	for i, p := range s.ps {
		cls[i] = p.cl
	}
	return cls
}

func (s *producerSet) close() {
	for _, p := range s.ps {
		p.cl.Close()
	}
}

// sample adds the producers' counters to smp; measuring tells whether the
// warmup is over.
func (s *producerSet) sample(smp *sample, measuring bool) {
	var h Histogram
	for _, p := range s.ps {
		st := p.stats
		st.mu.Lock()
		smp.produced += st.mu.acked
		smp.producedBytes += st.mu.bytes
		smp.errors += st.mu.errors
		if measuring {
			h.Merge(&st.mu.meas)
		} else {
			h.Merge(&st.mu.warm)
		}
		st.mu.Unlock()
	}
	smp.prodP99, smp.prodCount = h.Quantile(0.99), h.Count()
	smp.warmup = !measuring
}

// fill puts the producers' figures into rep: records, bytes, rates over
// the span from measureFrom to the last acknowledgement, latency, errors.
func (s *producerSet) fill(rep *Report, measureFrom time.Time) (acked int64) {
	var (
		h        Histogram
		last     time.Time
		firstErr error
	)
	for _, p := range s.ps {
		st := p.stats
		st.mu.Lock()
		h.Merge(&st.mu.meas)
		rep.Records += st.mu.records
		rep.Bytes += st.mu.measBytes
		rep.Errors += st.mu.errors
		acked += st.mu.acked
		if st.mu.lastAck.After(last) {
			last = st.mu.lastAck
		}
		if firstErr == nil {
			firstErr = st.mu.firstErr
		}
		st.mu.Unlock()
	}
	if firstErr != nil {
		rep.FirstError = firstErr.Error()
	}
	if last.IsZero() {
		last = time.Now()
	}
	rep.setRates(max(0, last.Sub(measureFrom)))
	rep.Latency = latencyOf(&h)
	return acked
}

// produce runs the Produce scenario.
func (r *runner) produce(ctx context.Context, rep *Report) error {
	ps, err := r.newProducers(ctx)
	if err != nil {
		return err
	}
	defer ps.close()
	start := time.Now()
	measureFrom := start.Add(r.cfg.Warmup)
	prog := startProgress(r.cfg, start, func() sample {
		var s sample
		ps.sample(&s, !time.Now().Before(measureFrom))
		return s
	})
	ps.run(ctx, r.cfg, start)
	prog.stop()
	ps.fill(rep, measureFrom)
	return nil
}

// consume runs the Consume scenario: read from the start offsets (or the
// group's committed offsets) to the end offsets the topic had when the run
// started, or Records records, or for Duration.
func (r *runner) consume(ctx context.Context, rep *Report) error {
	cfg := r.cfg
	start, err := r.listOffsets(ctx, false)
	if err != nil {
		return err
	}
	end, err := r.listOffsets(ctx, true)
	if err != nil {
		return err
	}
	if cfg.Group != "" {
		r.committedStarts(ctx, start)
	}
	cs := &consumerSet{stats: &consumerStats{}}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var tracker *endTracker
	if cfg.Records == 0 {
		tracker = newEndTracker(start, end)
	}
	readStart := time.Now()
	offsets := func(p int32) kgo.Offset { return kgo.NewOffset().At(start[p]) }
	if err := cs.build(cfg, r.parts, offsets, kgo.NewOffset().AtStart(), nil); err != nil {
		return err
	}
	defer cs.shutdown(stop)
	prog := startProgress(cfg, readStart, cs.sampler(nil, time.Time{}))
	cs.run(cctx, cfg, tracker, stop)

	var trackerDone <-chan struct{}
	if tracker != nil {
		trackerDone = tracker.done
	}
	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	err = cs.wait(cctx, cfg.Timeout, readStart, trackerDone, deadline, nil)
	cs.shutdown(stop)
	prog.stop()

	cs.fill(rep, false)
	if first, last := cs.span(); !first.IsZero() {
		ttfr := round3(first.Sub(readStart).Seconds() * 1e3)
		rep.TimeToFirstRecordMS = &ttfr
		rep.setRates(last.Sub(readStart))
	} else {
		rep.setRates(time.Since(readStart))
	}
	return err
}

// committedStarts moves each start offset to the group's committed offset
// where it has one. Without an answer the log start offsets stay: a
// partition the group had read to its end is then waited for until
// Timeout (ErrStalled).
func (r *runner) committedStarts(ctx context.Context, start map[int32]int64) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	or, err := r.adm.FetchOffsets(ctx, r.cfg.Group)
	if err != nil {
		return
	}
	for p := range start {
		if o, ok := or.Lookup(r.cfg.Topic, p); ok && o.Err == nil && o.At >= start[p] {
			start[p] = o.At
		}
	}
}

// endToEnd runs the EndToEnd scenario: consumers first, positioned at the
// end of the topic, then the producers; the run ends when the consumers
// have read every record acknowledged.
func (r *runner) endToEnd(ctx context.Context, rep *Report) error {
	cfg := r.cfg
	end, err := r.listOffsets(ctx, true)
	if err != nil {
		return err
	}
	cs := &consumerSet{stats: &consumerStats{}}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var assigned *atomic.Int64
	if cfg.Group != "" {
		assigned = new(atomic.Int64)
	}
	// A group member without committed offsets starts at the first record
	// sent from now on: every record of this run, and nothing older.
	reset := kgo.NewOffset().AfterMilli(time.Now().UnixMilli())
	offsets := func(p int32) kgo.Offset { return kgo.NewOffset().At(end[p]) }
	if err := cs.build(cfg, r.parts, offsets, reset, assigned); err != nil {
		return err
	}
	defer cs.shutdown(stop)
	if err := pingAll(ctx, cfg.Timeout, cs.cls); err != nil {
		return err
	}
	ps, err := r.newProducers(ctx)
	if err != nil {
		return err
	}
	defer ps.close()
	// The consumers poll from now on: a group member must, to join, and a
	// direct consumer is then already waiting in a fetch for the first
	// record.
	cs.run(cctx, cfg, nil, stop)
	if assigned != nil {
		if err := waitAssigned(ctx, cfg, assigned, len(r.parts), cs.stats); err != nil {
			return err
		}
	}

	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	cs.stats.measureFrom.Store(measureFrom.UnixNano())
	prog := startProgress(cfg, start, cs.sampler(ps, measureFrom))
	ps.run(ctx, cfg, start)
	var smp sample
	ps.sample(&smp, true)
	target := smp.produced // every record acknowledged, warmup included
	err = cs.wait(cctx, cfg.Timeout, time.Now(), nil, nil, func() bool { return cs.stats.seen.Load() >= target })
	cs.shutdown(stop)
	prog.stop()

	ps.fill(rep, measureFrom)
	cs.fill(rep, true)
	return err
}

// waitAssigned waits until the group has given the consumers all n
// partitions.
func waitAssigned(ctx context.Context, cfg *Config, assigned *atomic.Int64, n int, stats *consumerStats) error {
	deadline := time.Now().Add(cfg.Timeout)
	for assigned.Load() < int64(n) {
		if time.Now().After(deadline) {
			stats.mu.Lock()
			firstErr := stats.mu.firstErr
			stats.mu.Unlock()
			why := "is another member of the group running?"
			if firstErr != nil {
				why = fmt.Sprintf("the consumers failed: %v", firstErr)
			}
			return fmt.Errorf("consumer group %q gave the consumers %d of the %d partitions within %v; %s",
				cfg.Group, assigned.Load(), n, cfg.Timeout, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// pingAll connects every client to a broker within timeout.
func pingAll(ctx context.Context, timeout time.Duration, cls []*kgo.Client) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, cl := range cls {
		if err := cl.Ping(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return err
			}
			return fmt.Errorf("connect to the brokers: %w", err)
		}
	}
	return nil
}
