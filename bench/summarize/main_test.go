package main

import (
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sample = `{"run":"r1","rep":1,"peer":"meta","scenario":"run","commit":"abc"}
{"run":"r1","rep":1,"peer":"machine","scenario":"seq-write-fdatasync","mb_per_s":400}
{"run":"r1","rep":1,"peer":"machine","scenario":"seq-write-sustained","mb_per_s":300}
{"run":"r1","rep":1,"peer":"machine","scenario":"write4k-dsync","ms_per_write":0.5}
{"run":"r1","rep":1,"peer":"machine","scenario":"cpu","cpu_model":"Test CPU","cores":2}
{"run":"r1","rep":1,"peer":"nats","scenario":"js-pub-async","kind":"write","record_size":1024,"mb_per_s":100,"msgs_per_s":97656}
{"run":"r1","rep":2,"peer":"nats","scenario":"js-pub-async","kind":"write","record_size":1024,"mb_per_s":120,"msgs_per_s":117187}
{"run":"r1","rep":3,"peer":"nats","scenario":"js-pub-async","kind":"write","record_size":1024,"mb_per_s":80,"msgs_per_s":78125}
{"run":"r1","rep":1,"peer":"stele-1","scenario":"produce","kind":"write","record_size":1024,"mb_per_s":50,"p99_ms":12}
{"run":"r1","rep":2,"peer":"stele-1","scenario":"produce","kind":"write","record_size":1024,"mb_per_s":70,"p99_ms":20}
{"run":7,"rep":1,"peer":"stele-1","scenario":"consume","kind":"read","record_size":1024,"mb_per_s":300}
not json
{"run":"r1","rep":1,"peer":"redis","scenario":"xadd","kind":"write","record_size":100}
`

func TestReadComputesMediansPerGroup(t *testing.T) {
	s, err := read(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"r1", "7"}; !slices.Equal(s.Runs, want) {
		t.Errorf("runs %q, want %q", s.Runs, want)
	}
	if s.Skipped != 2 {
		t.Errorf("skipped %d lines, want 2 (the non-JSON one and the one without mb_per_s)", s.Skipped)
	}
	if s.Machine.SeqMBPerS != 400 || s.Machine.SustainedMBPerS != 300 || s.Machine.MsPerWrite != 0.5 || s.Machine.CPU != "Test CPU" || s.Machine.Cores != 2 {
		t.Errorf("machine = %+v", s.Machine)
	}
	if len(s.Groups) != 3 {
		t.Fatalf("%d groups, want 3", len(s.Groups))
	}
	// Stele first, then the peers.
	want := []struct {
		series string
		n      int
		mb     float64
		p99    float64
	}{
		{"stele-1 consume", 1, 300, 0},
		{"stele-1 produce", 2, 60, 16}, // even count: the mean of the middle two
		{"nats js-pub-async", 3, 100, 0},
	}
	for i, w := range want {
		g := s.Groups[i]
		if g.Series() != w.series || g.N != w.n || g.MBPerS != w.mb || g.P99Ms != w.p99 {
			t.Errorf("group %d = %s n=%d mb=%v p99=%v; want %s n=%d mb=%v p99=%v",
				i, g.Series(), g.N, g.MBPerS, g.P99Ms, w.series, w.n, w.mb, w.p99)
		}
	}
	md := markdown(s)
	for _, frag := range []string{"| stele-1 | produce | 60.0 |", "| nats | js-pub-async | 100 |", "Test CPU, 2 cores"} {
		if !strings.Contains(md, frag) {
			t.Errorf("markdown lacks %q:\n%s", frag, md)
		}
	}
}

func TestReadRejectsAnInputWithoutMeasurements(t *testing.T) {
	if _, err := read(strings.NewReader("{\"peer\":\"meta\"}\nnonsense\n")); !errors.Is(err, errNoResults) {
		t.Errorf("got %v, want errNoResults", err)
	}
}

func TestWriteChartDrawsSteleInItsColour(t *testing.T) {
	s, err := read(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := writeChart(path, s); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 600 || b.Dy() < 200 {
		t.Fatalf("chart is %v, too small to hold its bars", b)
	}
	var stele, other int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			switch img.At(x, y) {
			case steleBar:
				stele++
			case peerBars[0]:
				other++
			}
		}
	}
	if stele == 0 || other == 0 {
		t.Errorf("stele bar pixels %d, peer bar pixels %d; want both", stele, other)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzRead feeds arbitrary input to the results reader and, when it
// accepts it, to the renderers: none may panic.
func FuzzRead(f *testing.F) {
	f.Add(sample)
	f.Add(`{"peer":"x","scenario":"y","kind":"read","record_size":-5,"mb_per_s":-1,"p99_ms":0}`)
	f.Add(`{"peer":"x","mb_per_s":1e308,"p99_ms":1e-308}` + "\n" + `{"peer":"x","mb_per_s":0}`)
	f.Add("\x00\xff{\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in string) {
		s, err := read(strings.NewReader(in))
		if err != nil {
			return
		}
		_ = markdown(s)
		if len(s.Groups) <= 12 {
			if err := writeChart(filepath.Join(dir, "fuzz.png"), s); err != nil {
				t.Fatal(err)
			}
		}
	})
}
