package cli

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"
)

// progressInterval is how often the progress bar is redrawn.
const progressInterval = 250 * time.Millisecond

// progress draws a one-line progress bar for `produce --file` on a
// terminal: percentage of the file read, bytes read, records produced per
// second. It owns one goroutine, started by startProgress and stopped (and
// waited for) by stop. A nil *progress does nothing.
type progress struct {
	w     io.Writer
	total int64 // file size in bytes; 0 when unknown
	start time.Time

	read    atomic.Int64 // bytes of input consumed
	records atomic.Int64 // records acknowledged

	quit chan struct{}
	done chan struct{}
}

// startProgress starts drawing to w for an input of total bytes.
func startProgress(w io.Writer, total int64) *progress {
	p := &progress{w: w, total: total, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *progress) run() {
	defer close(p.done)
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.draw()
		}
	}
}

// addRead counts n more bytes of input read.
func (p *progress) addRead(n int64) {
	if p != nil {
		p.read.Add(n)
	}
}

// addRecord counts one more record produced.
func (p *progress) addRecord() {
	if p != nil {
		p.records.Add(1)
	}
}

// stop stops the goroutine, draws the final state and ends the line.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *progress) draw() {
	const width = 30
	read, recs := p.read.Load(), p.records.Load()
	frac := 0.0
	if p.total > 0 {
		frac = min(float64(read)/float64(p.total), 1)
	}
	filled := int(frac * width)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	if filled > 0 && filled < width {
		bar = strings.Repeat("=", filled-1) + ">" + strings.Repeat(" ", width-filled)
	}
	rate := 0.0
	if el := time.Since(p.start).Seconds(); el > 0 {
		rate = float64(recs) / el
	}
	fmt.Fprintf(p.w, "\r[%s] %3.0f%%  %s / %s  %d records  %.0f rec/s \x1b[K",
		bar, frac*100, humanBytes(read), humanBytes(p.total), recs, rate)
}

// humanBytes formats n bytes with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
