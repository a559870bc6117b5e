// Command summarize reads the JSON lines bench/run.sh wrote and prints the
// medians per (peer, scenario, record size) as markdown, Stele beside each
// peer, and draws them as a PNG chart (throughput in MB/s by record size,
// writes and reads, and p99 latency where the run measured one).
//
//	go run ./bench/summarize -in bench/results/<ts>/results.jsonl \
//	    -md summary.md -png summary.png
//
// Lines are grouped by peer, scenario and record_size; mb_per_s,
// msgs_per_s, p50_ms and p99_ms are the medians over the group's lines
// (repetitions). Lines of peer "machine" describe the machine and those of
// peer "meta" the run; lines that fail to parse are counted and skipped.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// errNoResults is returned for an input without a single measurement.
var errNoResults = errors.New("summarize: no measurements in the input")

// line is one JSON line of results.jsonl, the fields summarize reads.
type line struct {
	Peer       string   `json:"peer"`
	Scenario   string   `json:"scenario"`
	Kind       string   `json:"kind"`
	RecordSize int      `json:"record_size"`
	MBPerS     *float64 `json:"mb_per_s"`
	MsgsPerS   *float64 `json:"msgs_per_s"`
	P50Ms      *float64 `json:"p50_ms"`
	P99Ms      *float64 `json:"p99_ms"`
	Run        any      `json:"run"` // a string, but a number is taken too

	// machine lines
	MsPerWrite *float64 `json:"ms_per_write"`
	CPUModel   string   `json:"cpu_model"`
	Cores      int      `json:"cores"`
}

// group is the medians of one (peer, scenario, record size).
type group struct {
	Peer, Scenario, Kind string
	RecordSize           int
	N                    int
	MBPerS, MsgsPerS     float64
	P50Ms, P99Ms         float64 // 0: not measured
}

// Series names the group's system and scenario, as the chart labels it.
func (g *group) Series() string { return g.Peer + " " + g.Scenario }

// IsStele reports whether the group measures Stele itself.
func (g *group) IsStele() bool { return strings.HasPrefix(g.Peer, "stele") }

// machine is what the machine lines say, medians where measured repeatedly.
type machine struct {
	CPU             string
	Cores           int
	SeqMBPerS       float64 // 1 GiB with fdatasync
	SustainedMBPerS float64 // 8 GiB with fdatasync; 0 if not measured
	MsPerWrite      float64
}

// summary is everything read from one results file.
type summary struct {
	Runs    []string
	Machine machine
	Groups  []*group
	Skipped int
}

func main() {
	in := flag.String("in", "", "results.jsonl to read (default: standard input)")
	md := flag.String("md", "", "write the markdown here too (default: standard output only)")
	png := flag.String("png", "", "write the chart here (default: no chart)")
	flag.Parse()
	if err := run(*in, *md, *png); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(in, mdPath, pngPath string) error {
	var r io.Reader = os.Stdin
	if in != "" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	s, err := read(r)
	if err != nil {
		return err
	}
	text := markdown(s)
	fmt.Print(text)
	if mdPath != "" {
		if err := os.WriteFile(mdPath, []byte(text), 0o644); err != nil {
			return err
		}
	}
	if pngPath != "" {
		if err := writeChart(pngPath, s); err != nil {
			return err
		}
	}
	if s.Skipped > 0 {
		fmt.Fprintf(os.Stderr, "summarize: skipped %d lines that were not JSON objects\n", s.Skipped)
	}
	return nil
}

// read parses the JSON lines and computes the medians.
func read(r io.Reader) (*summary, error) {
	s := &summary{}
	type key struct {
		peer, scenario string
		size           int
	}
	samples := map[key][]line{}
	var order []key
	var seq, sustained, sync []float64
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var l line
		if err := json.Unmarshal([]byte(text), &l); err != nil || l.Peer == "" {
			s.Skipped++
			continue
		}
		if run := runName(l.Run); run != "" && !slices.Contains(s.Runs, run) {
			s.Runs = append(s.Runs, run)
		}
		switch l.Peer {
		case "meta":
			continue
		case "machine":
			switch {
			case l.Scenario == "seq-write-fdatasync" && l.MBPerS != nil:
				seq = append(seq, *l.MBPerS)
			case l.Scenario == "seq-write-sustained" && l.MBPerS != nil:
				sustained = append(sustained, *l.MBPerS)
			case l.MsPerWrite != nil:
				sync = append(sync, *l.MsPerWrite)
			case l.CPUModel != "":
				s.Machine.CPU, s.Machine.Cores = l.CPUModel, l.Cores
			}
			continue
		}
		if l.MBPerS == nil {
			s.Skipped++
			continue
		}
		k := key{l.Peer, l.Scenario, l.RecordSize}
		if _, ok := samples[k]; !ok {
			order = append(order, k)
		}
		samples[k] = append(samples[k], l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("summarize: reading: %w", err)
	}
	s.Machine.SeqMBPerS, s.Machine.SustainedMBPerS, s.Machine.MsPerWrite = median(seq), median(sustained), median(sync)
	for _, k := range order {
		ls := samples[k]
		g := &group{Peer: k.peer, Scenario: k.scenario, RecordSize: k.size, N: len(ls), Kind: ls[0].Kind}
		g.MBPerS = median(collect(ls, func(l line) *float64 { return l.MBPerS }))
		g.MsgsPerS = median(collect(ls, func(l line) *float64 { return l.MsgsPerS }))
		g.P50Ms = median(collect(ls, func(l line) *float64 { return l.P50Ms }))
		g.P99Ms = median(collect(ls, func(l line) *float64 { return l.P99Ms }))
		if g.Kind == "" {
			g.Kind = "write"
		}
		s.Groups = append(s.Groups, g)
	}
	if len(s.Groups) == 0 && seq == nil {
		return nil, errNoResults
	}
	slices.SortStableFunc(s.Groups, compareGroups)
	return s, nil
}

// compareGroups orders Stele first, then peers by name, then scenario,
// then record size.
func compareGroups(a, b *group) int {
	if a.IsStele() != b.IsStele() {
		if a.IsStele() {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Scenario, b.Scenario), cmp.Compare(a.RecordSize, b.RecordSize))
}

// runName is the run field as text ("" when absent or not a scalar).
func runName(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func collect(ls []line, f func(line) *float64) []float64 {
	var out []float64
	for _, l := range ls {
		if v := f(l); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// median of vs; 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// sizes returns the record sizes measured, ascending.
func (s *summary) sizes() []int {
	var out []int
	for _, g := range s.Groups {
		if !slices.Contains(out, g.RecordSize) {
			out = append(out, g.RecordSize)
		}
	}
	slices.Sort(out)
	return out
}

// series returns the series of one kind, in the groups' order.
func (s *summary) series(kind string) []string {
	var out []string
	for _, g := range s.Groups {
		if g.Kind == kind && !slices.Contains(out, g.Series()) {
			out = append(out, g.Series())
		}
	}
	return out
}

// find returns the group of series at size, or nil.
func (s *summary) find(series string, size int) *group {
	for _, g := range s.Groups {
		if g.Series() == series && g.RecordSize == size {
			return g
		}
	}
	return nil
}
