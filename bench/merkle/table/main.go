// Command table summarises the output of bench/merkle's benchmarks as the
// Markdown tables of docs/benchmarks.md: for every benchmark and every
// store, the median of the -count repetitions and their range.
//
//	go run ./table < results.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// runs maps a benchmark's name (without the -GOMAXPROCS suffix) to its
// metrics, unit → one value per repetition.
type runs map[string]map[string][]float64

func main() {
	r, order, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stores := []string{"pebble", "iavl", "iavl-nofast", "smt"}
	trees := stores[1:]
	applyTable(os.Stdout, r, order, stores, "ns/update", "ns per update (median of the repetitions, min-max)", 0)
	ratioTable(os.Stdout, r, order, trees)
	applyTable(os.Stdout, r, order, stores, "ns/block", "µs per block commit (median)", 1e3)
	applyTable(os.Stdout, r, order, stores, "allocs/update", "heap allocations per update (median)", 0)
	applyTable(os.Stdout, r, order, stores, "B/update", "heap bytes allocated per update (median)", 0)
	applyTable(os.Stdout, r, order, stores, "walB/block", "bytes written to Pebble's WAL per block (median)", 0)
	applyTable(os.Stdout, r, order, stores, "diskMB", "store on disk after the run, MB (largest)", 0)
	proofTable(os.Stdout, r, order, trees)
}

func parse(in io.Reader) (runs, []string, error) {
	r := runs{}
	var order []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		if r[name] == nil {
			r[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %q is not a number", name, f[i])
			}
			r[name][f[i+1]] = append(r[name][f[i+1]], v)
		}
	}
	return r, order, sc.Err()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// spread is "median (min-max)" of v divided by div (1 when 0).
func spread(v []float64, div float64, withRange bool) string {
	if len(v) == 0 {
		return "-"
	}
	if div == 0 {
		div = 1
	}
	m := median(v) / div
	if !withRange || len(v) == 1 {
		return num(m)
	}
	return fmt.Sprintf("%s (%s-%s)", num(m), num(slices.Min(v)/div), num(slices.Max(v)/div))
}

func label(name string) string {
	name = strings.TrimPrefix(name, "BenchmarkApply/")
	name = strings.TrimPrefix(name, "BenchmarkProof/")
	return strings.NewReplacer("state=", "", "keys=", "", "block=", "", "/", " | ").Replace(name)
}

func applyTable(w io.Writer, r runs, order, stores []string, unit, title string, div float64) {
	fmt.Fprintf(w, "\n%s\n\n| state | keys | block |", title)
	for _, s := range stores {
		fmt.Fprintf(w, " %s |", s)
	}
	fmt.Fprint(w, "\n|---|---|---:|")
	for range stores {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, name := range order {
		if !strings.HasPrefix(name, "BenchmarkApply/") {
			continue
		}
		fmt.Fprintf(w, "| %s |", label(name))
		for _, s := range stores {
			v := r[name][s+"-"+unit]
			if unit == "diskMB" && len(v) > 0 {
				v = []float64{slices.Max(v)}
			}
			fmt.Fprintf(w, " %s |", spread(v, div, unit == "ns/update"))
		}
		fmt.Fprintln(w)
	}
}

func ratioTable(w io.Writer, r runs, order, trees []string) {
	fmt.Fprint(w, "\nblock commit time / plain Pebble's, same blocks, same moments (median, min-max)\n\n| state | keys | block |")
	for _, s := range trees {
		fmt.Fprintf(w, " %s |", s)
	}
	fmt.Fprint(w, "\n|---|---|---:|")
	for range trees {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, name := range order {
		if !strings.HasPrefix(name, "BenchmarkApply/") {
			continue
		}
		fmt.Fprintf(w, "| %s |", label(name))
		for _, s := range trees {
			fmt.Fprintf(w, " %s× |", spread(r[name][s+"-x-pebble"], 0, true))
		}
		fmt.Fprintln(w)
	}
}

func proofTable(w io.Writer, r runs, order, trees []string) {
	fmt.Fprint(w, "\nproofs (median): generation µs, verification µs, size in bytes\n\n| state | store | prove present | verify present | size present | prove absent | verify absent | size absent |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range order {
		if !strings.HasPrefix(name, "BenchmarkProof/") {
			continue
		}
		for _, s := range trees {
			m := r[name]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", label(name), s,
				spread(m[s+"-ns/prove-in"], 1e3, false), spread(m[s+"-ns/verify-in"], 1e3, false), spread(m[s+"-B/proof-in"], 0, false),
				spread(m[s+"-ns/prove-out"], 1e3, false), spread(m[s+"-ns/verify-out"], 1e3, false), spread(m[s+"-B/proof-out"], 0, false))
		}
	}
}
