package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// consumerSet is the consumers of a run and the goroutines polling them.
type consumerSet struct {
	stats  *consumerStats
	cls    []*kgo.Client
	wg     sync.WaitGroup
	closed bool // cls are closed
}

// build makes the consumer clients. Without a group, the partitions are
// dealt round-robin to min(Consumers, partitions) clients, each starting
// at offsets(p); with a group, Consumers members consume the topic from
// their committed offsets or reset, never committing, and count the
// partitions they hold in assigned.
func (s *consumerSet) build(cfg *Config, parts []int32, offsets func(int32) kgo.Offset,
	reset kgo.Offset, assigned *atomic.Int64) error {
	var sets [][]kgo.Opt
	if cfg.Group == "" {
		shares := make([]map[int32]kgo.Offset, min(cfg.Consumers, len(parts)))
		for i, p := range parts {
			if shares[i%len(shares)] == nil {
				shares[i%len(shares)] = make(map[int32]kgo.Offset)
			}
			shares[i%len(shares)][p] = offsets(p)
		}
		for _, sh := range shares {
			sets = append(sets, []kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: sh})})
		}
	} else {
		count := func(sign int64) func(context.Context, *kgo.Client, map[string][]int32) {
			return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				if assigned != nil {
					assigned.Add(sign * int64(len(m[cfg.Topic])))
				}
			}
		}
		for range cfg.Consumers {
			sets = append(sets, []kgo.Opt{
				kgo.ConsumerGroup(cfg.Group),
				kgo.ConsumeTopics(cfg.Topic),
				kgo.DisableAutoCommit(),
				kgo.ConsumeResetOffset(reset),
				kgo.OnPartitionsAssigned(count(1)),
				kgo.OnPartitionsRevoked(count(-1)),
				kgo.OnPartitionsLost(count(-1)),
			})
		}
	}
	for _, opts := range sets {
		if cfg.Rack != "" {
			opts = append(opts, kgo.Rack(cfg.Rack))
		}
		cl, err := newClient(cfg, opts...)
		if err != nil {
			s.close()
			return err
		}
		s.cls = append(s.cls, cl)
	}
	return nil
}

// run starts one polling goroutine per client; stop is called when the
// tracker's end offsets are reached or the Records quota is used up.
func (s *consumerSet) run(ctx context.Context, cfg *Config, tracker *endTracker, stop func()) {
	quota := new(atomic.Int64)
	var limit int64
	if cfg.Scenario == Consume {
		limit = cfg.Records
	}
	for _, cl := range s.cls {
		c := &consumer{cl: cl, stats: s.stats, cfg: cfg, ends: tracker, quota: quota, limit: limit, onStop: stop}
		s.wg.Go(func() { c.run(ctx) })
	}
}

// wait returns when ctx is done, done is closed, deadline fires or
// finished returns true (each may be nil), or with ErrStalled when no
// record came for timeout since the later of since and the last record.
func (s *consumerSet) wait(ctx context.Context, timeout time.Duration, since time.Time,
	done <-chan struct{}, deadline <-chan time.Time, finished func() bool) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if finished != nil && finished() {
			return nil
		}
		last := max(since.UnixNano(), s.stats.progressed.Load())
		if idle := time.Duration(time.Now().UnixNano() - last); idle > timeout {
			return fmt.Errorf("%w: no record received for %v (%d read); stopped",
				ErrStalled, timeout, s.stats.seen.Load())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			return nil
		case <-deadline:
			return nil
		case <-tick.C:
		}
	}
}

// sampler returns the progress sample function: the producers' counters
// (when ps is not nil) and the consumers'.
func (s *consumerSet) sampler(ps *producerSet, measureFrom time.Time) func() sample {
	return func() sample {
		var smp sample
		measuring := !time.Now().Before(measureFrom)
		if ps != nil {
			ps.sample(&smp, measuring)
		}
		st := s.stats
		st.mu.Lock()
		defer st.mu.Unlock()
		smp.consumed, smp.consumedBytes = st.mu.all, st.mu.allBytes
		smp.errors += st.mu.errors
		h := &st.mu.meas
		if !measuring {
			h = &st.mu.warm
		}
		smp.e2eP99, smp.e2eCount = h.Quantile(0.99), h.Count()
		return smp
	}
}

// fill puts the consumers' figures into rep: for EndToEnd the records read
// and their latency, for Consume the records and bytes; errors for both.
func (s *consumerSet) fill(rep *Report, e2e bool) {
	st := s.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	if e2e {
		rep.ConsumedRecords = st.mu.records
		rep.E2ELatency = latencyOf(&st.mu.meas)
	} else {
		rep.Records, rep.Bytes = st.mu.records, st.mu.bytes
	}
	rep.Consumers = len(s.cls)
	rep.Errors += st.mu.errors
	if rep.FirstError == "" && st.mu.firstErr != nil {
		rep.FirstError = st.mu.firstErr.Error()
	}
}

// span returns when the first and the last measured record were read.
func (s *consumerSet) span() (first, last time.Time) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	return s.stats.mu.first, s.stats.mu.last
}

// shutdown stops the polling goroutines with stop, waits for them and
// closes the clients; it may be called more than once.
func (s *consumerSet) shutdown(stop func()) {
	stop()
	s.wg.Wait()
	s.close()
}

// close closes the clients once.
func (s *consumerSet) close() {
	if s.closed {
		return
	}
	s.closed = true
	for _, cl := range s.cls {
		cl.Close()
	}
}
