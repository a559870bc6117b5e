package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strings"
)

// Chart layout, in pixels.
const (
	margin     = 24
	textScale  = 2 // body text: 12 x 18 px cells
	titleScale = 3
	rowH       = 22
	barH       = 16
	barW       = 560
	valueW     = 150
	// maxLabel and maxLine bound the characters of a bar label and of a
	// header line, so odd input cannot make a giant image.
	maxLabel = 48
	maxLine  = 140
)

var (
	white     = color.RGBA{255, 255, 255, 255}
	ink       = color.RGBA{30, 30, 30, 255}
	faint     = color.RGBA{110, 110, 110, 255}
	rule      = color.RGBA{215, 215, 215, 255}
	steleBar  = color.RGBA{214, 96, 24, 255}
	peerBars  = []color.RGBA{{70, 110, 170, 255}, {60, 150, 140, 255}, {130, 95, 165, 255}, {120, 135, 75, 255}, {165, 80, 110, 255}, {95, 95, 95, 255}}
	panelKind = []struct{ kind, title string }{
		{"write", "Writes: MB/s (median), longer is better"},
		{"read", "Reads: MB/s (median), longer is better"},
	}
)

// bar is one row of a panel.
type bar struct {
	label string
	value float64
	text  string
	stele bool
	peer  string
}

// section is a titled list of bars sharing one scale.
type section struct {
	title string
	bars  []bar
	log   bool // log scale (latency)
}

// writeChart draws the summary as horizontal bar charts: for writes and
// for reads, one section per record size (bars scaled to that size's
// largest), then the p99 latencies on a log scale. Stele's bars are orange.
func writeChart(path string, s *summary) error {
	var panels []struct {
		title    string
		sections []section
	}
	for _, pk := range panelKind {
		var secs []section
		for _, sz := range s.sizes() {
			sec := section{title: fmt.Sprintf("record size %d B", sz)}
			for _, g := range s.Groups {
				if g.Kind == pk.kind && g.RecordSize == sz {
					sec.bars = append(sec.bars, bar{label: g.Series(), value: g.MBPerS, text: num(g.MBPerS) + " MB/s", stele: g.IsStele(), peer: g.Peer})
				}
			}
			if len(sec.bars) > 0 {
				secs = append(secs, sec)
			}
		}
		if len(secs) > 0 {
			panels = append(panels, struct {
				title    string
				sections []section
			}{pk.title, secs})
		}
	}
	lat := section{title: "all record sizes, one scale", log: true}
	for _, g := range s.Groups {
		if g.P99Ms > 0 {
			lat.bars = append(lat.bars, bar{label: fmt.Sprintf("%s %dB", g.Series(), g.RecordSize), value: g.P99Ms, text: num(g.P99Ms) + " ms", stele: g.IsStele(), peer: g.Peer})
		}
	}
	if len(lat.bars) > 0 {
		panels = append(panels, struct {
			title    string
			sections []section
		}{"p99 latency at each scenario's load: ms (median, log scale), shorter is better", []section{lat}})
	}

	for _, p := range panels {
		for _, sec := range p.sections {
			for i := range sec.bars {
				sec.bars[i].label = clip(sec.bars[i].label, maxLabel)
			}
		}
	}
	labelW := 0
	rows := 0
	for _, p := range panels {
		rows += 2 // title and gap
		for _, sec := range p.sections {
			rows += 1 + len(sec.bars)
			for _, b := range sec.bars {
				labelW = max(labelW, textWidth(b.label, textScale))
			}
		}
	}
	labelW += 16
	header := headerLines(s)
	width := max(margin*2+labelW+barW+valueW, margin*2+textWidth(header[0], titleScale))
	for _, h := range header[1:] {
		width = max(width, margin*2+textWidth(h, textScale))
	}
	height := margin*2 + len(header)*rowH + rowH + rows*rowH + rowH
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fillRect(img, img.Bounds(), white)

	y := margin
	drawText(img, margin, y, header[0], titleScale, ink)
	y += rowH + 8
	for _, h := range header[1:] {
		drawText(img, margin, y, h, textScale, faint)
		y += rowH
	}
	y += rowH
	colours := map[string]color.RGBA{}
	for _, p := range panels {
		fillRect(img, image.Rect(margin, y-6, width-margin, y-5), rule)
		drawText(img, margin, y, p.title, textScale, ink)
		y += rowH + rowH/2
		for _, sec := range p.sections {
			drawText(img, margin+8, y, sec.title, textScale, faint)
			y += rowH
			scale := sectionScale(sec)
			for _, b := range sec.bars {
				c := steleBar
				if !b.stele {
					if _, ok := colours[b.peer]; !ok {
						colours[b.peer] = peerBars[len(colours)%len(peerBars)]
					}
					c = colours[b.peer]
				}
				x0 := margin + labelW
				drawText(img, margin+8, y+1, b.label, textScale, ink)
				n := max(2, int(math.Round(scale(b.value)*barW)))
				fillRect(img, image.Rect(x0, y, x0+n, y+barH), c)
				drawText(img, x0+n+8, y+1, b.text, textScale, ink)
				y += rowH
			}
		}
		y += rowH / 2
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sectionScale maps a value to the fraction of barW its bar fills.
func sectionScale(sec section) func(float64) float64 {
	lo, hi := math.Inf(1), 0.0
	for _, b := range sec.bars {
		lo, hi = min(lo, b.value), max(hi, b.value)
	}
	if hi <= 0 {
		return func(float64) float64 { return 0 }
	}
	if !sec.log {
		return func(v float64) float64 { return v / hi }
	}
	// Log scale from a decade below the smallest value, so it has a bar.
	l0, l1 := math.Log10(lo)-1, math.Log10(hi)
	return func(v float64) float64 {
		if v <= 0 {
			return 0
		}
		return (math.Log10(v) - l0) / (l1 - l0)
	}
}

// headerLines are the chart's title and the lines under it.
func headerLines(s *summary) []string {
	out := []string{"Stele and its peers on one machine"}
	if len(s.Runs) > 0 {
		out = append(out, "run "+strings.Join(s.Runs, ", ")+"; medians over repetitions; MB/s = 10^6 bytes of records/s")
	}
	m := s.Machine
	if m.CPU != "" || m.SeqMBPerS > 0 {
		sustained := ""
		if m.SustainedMBPerS > 0 {
			sustained = " (" + num(m.SustainedMBPerS) + " over 8 GiB)"
		}
		out = append(out, fmt.Sprintf("machine: %s, %d cores; disk: %s MB/s sequential with fdatasync%s, %s ms per 4 KiB write+fsync",
			orDash(m.CPU), m.Cores, num(m.SeqMBPerS), sustained, num(m.MsPerWrite)))
	}
	for i := range out {
		out[i] = clip(out[i], maxLine)
	}
	return out
}

// clip shortens s to n characters, marking the cut with "..".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-2] + ".."
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, &image.Uniform{C: c}, image.Point{}, draw.Src)
}
