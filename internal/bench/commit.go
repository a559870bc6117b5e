package bench

// The Commit scenario: the at-least-once consumer that commits after every
// record. Each of Consumers clients joins the group, polls, and for every
// record it receives issues a synchronous OffsetCommit of that record's
// offset (kgo's CommitRecords) and waits for the answer before it looks
// at the next record: its commits per second are one over the commit
// latency, which is what the scenario measures. The group resumes from
// its committed offsets (a second run goes on where the first stopped) or
// from the start of the topic, so the topic must hold enough records for
// the run (about Duration / commit latency per consumer); when it runs out
// the consumers stall and the run ends with ErrStalled after Timeout.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// commitStats is what the committing consumers record, shared by them.
type commitStats struct {
	mu struct {
		sync.Mutex
		warm, meas     Histogram // commit latency (ns)
		all            int64     // commits answered, warmup included (progress)
		records, bytes int64     // measured records committed
		errors         int64
		firstErr       error
		first, last    time.Time // answers to the first and last measured commit
	}
	// claimed counts the measured commits started, against Records.
	claimed atomic.Int64
	// progressed is the UnixNano of the last record received.
	progressed atomic.Int64
}

// fail counts an error.
func (s *commitStats) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.errors++
	if s.mu.firstErr == nil {
		s.mu.firstErr = err
	}
}

// committed accounts for one commit sent at sent and answered at done.
func (s *commitStats) committed(sent, done time.Time, measured bool, size int64) {
	lat := done.Sub(sent).Nanoseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.all++
	if !measured {
		s.mu.warm.Record(lat)
		return
	}
	s.mu.meas.Record(lat)
	s.mu.records++
	s.mu.bytes += size
	if s.mu.records == 1 {
		s.mu.first = sent
	}
	s.mu.last = done
}

// commit runs the Commit scenario.
func (r *runner) commit(ctx context.Context, rep *Report) error {
	cfg := r.cfg
	rep.Group = cfg.group()
	rep.WarmupS = round3(cfg.Warmup.Seconds())
	stats := &commitStats{}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var cls []*kgo.Client
	defer func() {
		for _, cl := range cls {
			cl.Close()
		}
	}()
	for range cfg.Consumers {
		opts := []kgo.Opt{
			kgo.ConsumerGroup(cfg.group()),
			kgo.ConsumeTopics(cfg.Topic),
			kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		}
		if cfg.Rack != "" {
			opts = append(opts, kgo.Rack(cfg.Rack))
		}
		cl, err := newClient(cfg, opts...)
		if err != nil {
			return err
		}
		cls = append(cls, cl)
	}
	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	prog := startProgress(cfg, start, func() sample {
		stats.mu.Lock()
		defer stats.mu.Unlock()
		smp := sample{consumed: stats.mu.all, errors: stats.mu.errors, warmup: time.Now().Before(measureFrom)}
		h := &stats.mu.meas
		if smp.warmup {
			h = &stats.mu.warm
		}
		smp.commitP99, smp.commitCount = h.Quantile(0.99), h.Count()
		return smp
	})
	var wg sync.WaitGroup
	for _, cl := range cls {
		wg.Go(func() { commitLoop(cctx, cl, cfg, stats, measureFrom, stop) })
	}

	// Until Duration after the warmup, ctx's end, Records measured commits
	// (commitLoop stops), or Timeout without a record.
	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Warmup + cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		last := max(start.UnixNano(), stats.progressed.Load())
		if idle := time.Duration(time.Now().UnixNano() - last); idle > cfg.Timeout {
			stats.mu.Lock()
			n := stats.mu.all
			stats.mu.Unlock()
			err = fmt.Errorf("%w: no record received for %v (%d committed); the topic may hold too few records for the run",
				ErrStalled, cfg.Timeout, n)
			break
		}
		select {
		case <-cctx.Done():
			break wait
		case <-deadline:
			break wait
		case <-tick.C:
		}
	}
	stop()
	wg.Wait()
	prog.stop()

	stats.mu.Lock()
	defer stats.mu.Unlock()
	rep.Records, rep.Bytes = stats.mu.records, stats.mu.bytes
	rep.CommitLatency = latencyOf(&stats.mu.meas)
	rep.Errors = stats.mu.errors
	if stats.mu.firstErr != nil {
		rep.FirstError = stats.mu.firstErr.Error()
	}
	if !stats.mu.first.IsZero() {
		rep.setRates(stats.mu.last.Sub(measureFrom))
	} else {
		rep.setRates(time.Since(measureFrom))
	}
	return err
}

// commitLoop polls cl and commits every record it receives, one at a time,
// until ctx ends; it calls stop once Records measured commits are done.
func commitLoop(ctx context.Context, cl *kgo.Client, cfg *Config, stats *commitStats, measureFrom time.Time, stop func()) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fetchErrors(fs, stats.fail)
		for _, rec := range fs.Records() {
			stats.progressed.Store(time.Now().UnixNano())
			if _, err := decodeValue(rec.Value, cfg.RecordSize, false); err != nil {
				stats.fail(fmt.Errorf("partition %d offset %d: %w", rec.Partition, rec.Offset, err))
			}
			sent := time.Now()
			measured := !sent.Before(measureFrom)
			var n int64
			if measured && cfg.Records > 0 {
				if n = stats.claimed.Add(1); n > cfg.Records {
					stop()
					return
				}
			}
			err := cl.CommitRecords(ctx, rec)
			done := time.Now()
			if ctx.Err() != nil {
				return // the run ended during the commit: not a figure
			}
			if err != nil {
				stats.fail(fmt.Errorf("commit partition %d offset %d: %w", rec.Partition, rec.Offset, err))
				continue
			}
			stats.committed(sent, done, measured, int64(len(rec.Key)+len(rec.Value)))
			if n == cfg.Records && n > 0 {
				stop()
				return
			}
		}
	}
}
