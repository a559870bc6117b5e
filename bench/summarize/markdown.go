package main

import (
	"fmt"
	"strings"
)

// markdown renders the summary: the machine, one table per kind with a
// column per record size (Stele's rows first, so each peer reads beside
// it), and the detail of every group.
func markdown(s *summary) string {
	var b strings.Builder
	b.WriteString("# Benchmark summary\n\n")
	if len(s.Runs) > 0 {
		fmt.Fprintf(&b, "Run: %s. ", strings.Join(s.Runs, ", "))
	}
	b.WriteString("Figures are medians over the repetitions (the runs column of the detail); " +
		"MB/s is 10^6 bytes of record payload per second.\n\n")
	m := s.Machine
	if m.CPU != "" || m.SeqMBPerS > 0 {
		sustained := ""
		if m.SustainedMBPerS > 0 {
			sustained = fmt.Sprintf(" (8 GiB, sustained: %s MB/s)", num(m.SustainedMBPerS))
		}
		fmt.Fprintf(&b, "Machine: %s, %d cores; sequential write with fdatasync %s MB/s%s; 4 KiB write + fsync %s ms.\n\n",
			orDash(m.CPU), m.Cores, num(m.SeqMBPerS), sustained, num(m.MsPerWrite))
	}
	sizes := s.sizes()
	for _, kind := range []string{"write", "read"} {
		series := s.series(kind)
		if len(series) == 0 {
			continue
		}
		title := map[string]string{"write": "Writes", "read": "Reads"}[kind]
		fmt.Fprintf(&b, "## %s: MB/s by record size\n\n| system | scenario |", title)
		for _, sz := range sizes {
			fmt.Fprintf(&b, " %d B |", sz)
		}
		b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(sizes)) + "\n")
		for _, name := range series {
			peer, scenario, _ := strings.Cut(name, " ")
			fmt.Fprintf(&b, "| %s | %s |", peer, scenario)
			for _, sz := range sizes {
				if g := s.find(name, sz); g != nil {
					fmt.Fprintf(&b, " %s |", num(g.MBPerS))
				} else {
					b.WriteString(" - |")
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("## Detail\n\n")
	b.WriteString("| system | scenario | kind | record size | MB/s | records/s | p50 ms | p99 ms | runs |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range s.Groups {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %d |\n",
			g.Peer, g.Scenario, g.Kind, g.RecordSize, num(g.MBPerS), count(g.MsgsPerS),
			optional(g.P50Ms), optional(g.P99Ms), g.N)
	}
	return b.String()
}

// num formats a figure with three significant digits or so.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// count formats a rate with thousands separators.
func count(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func optional(v float64) string {
	if v == 0 {
		return "-"
	}
	return num(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
