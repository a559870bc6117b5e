package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// sample is a snapshot of the counters the progress line shows.
type sample struct {
	produced, producedBytes int64 // acknowledged, warmup included
	prodP99                 int64 // ns, over the records measured so far (or the warmup's, during it)
	prodCount               uint64
	consumed, consumedBytes int64 // read, warmup included
	e2eP99                  int64
	e2eCount                uint64
	commitP99               int64
	commitCount             uint64
	errors                  int64
	warmup                  bool
}

// progressPrinter writes a progress line every interval: rates over the
// last interval, p99 since the start of the measurement. It owns one
// goroutine, started by startProgress and stopped (and waited for) by stop.
// A nil *progressPrinter does nothing.
type progressPrinter struct {
	w        io.Writer
	redraw   bool
	interval time.Duration
	start    time.Time
	scenario Scenario
	sample   func() sample

	quit, done chan struct{}
}

// startProgress starts printing to cfg.Progress, or returns nil when it is
// nil.
func startProgress(cfg *Config, start time.Time, sampleFn func() sample) *progressPrinter {
	if cfg.Progress == nil {
		return nil
	}
	p := &progressPrinter{
		w: cfg.Progress, redraw: cfg.ProgressRedraw, interval: cfg.ProgressInterval,
		start: start, scenario: cfg.Scenario, sample: sampleFn,
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go p.run()
	return p
}

func (p *progressPrinter) run() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	last, lastT := sample{}, p.start
	for {
		select {
		case <-p.quit:
			return
		case now := <-t.C:
			s := p.sample()
			p.print(now, s, last, now.Sub(lastT))
			last, lastT = s, now
		}
	}
}

// stop stops the goroutine and ends a redrawn line.
func (p *progressPrinter) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
	if p.redraw {
		fmt.Fprintln(p.w)
	}
}

// print writes the line for s, given the previous sample d ago.
func (p *progressPrinter) print(now time.Time, s, last sample, d time.Duration) {
	sec := max(d.Seconds(), 1e-9)
	var b strings.Builder
	fmt.Fprintf(&b, "%7.1fs ", now.Sub(p.start).Seconds())
	if p.scenario != Consume && p.scenario != Commit {
		fmt.Fprintf(&b, " produce %9.0f rec/s %8.2f MB/s  p99 %s",
			float64(s.produced-last.produced)/sec, float64(s.producedBytes-last.producedBytes)/sec/1e6,
			fmtP99(s.prodP99, s.prodCount))
	}
	if p.scenario == EndToEnd {
		b.WriteString("  |")
	}
	switch p.scenario {
	case Produce:
	case Commit:
		fmt.Fprintf(&b, " commit %7.1f /s  p99 %s  total %d",
			float64(s.consumed-last.consumed)/sec, fmtP99(s.commitP99, s.commitCount), s.consumed)
	default:
		fmt.Fprintf(&b, " consume %9.0f rec/s %8.2f MB/s",
			float64(s.consumed-last.consumed)/sec, float64(s.consumedBytes-last.consumedBytes)/sec/1e6)
	}
	if p.scenario == EndToEnd {
		fmt.Fprintf(&b, "  e2e p99 %s", fmtP99(s.e2eP99, s.e2eCount))
	}
	if p.scenario == Consume {
		fmt.Fprintf(&b, "  total %d", s.consumed)
	}
	fmt.Fprintf(&b, "  errors %d", s.errors)
	if s.warmup {
		b.WriteString("  (warmup)")
	}
	if p.redraw {
		fmt.Fprintf(p.w, "\r%s\x1b[K", b.String())
	} else {
		fmt.Fprintln(p.w, b.String())
	}
}

// fmtP99 formats a p99 in milliseconds, "-" before any value.
func fmtP99(ns int64, n uint64) string {
	if n == 0 {
		return "       - ms"
	}
	return fmt.Sprintf("%8.3f ms", float64(ns)/1e6)
}
