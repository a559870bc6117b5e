package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactQuantile is the value of rank ceil(q*n) in sorted, the definition
// Histogram.Quantile approximates.
func exactQuantile(sorted []int64, q float64) int64 {
	rank := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[rank-1]
}

func checkQuantiles(t *testing.T, name string, h *Histogram, vals []int64) {
	t.Helper()
	sorted := slices.Clone(vals)
	slices.Sort(sorted)
	if h.Count() != uint64(len(vals)) || h.Min() != sorted[0] || h.Max() != sorted[len(sorted)-1] {
		t.Fatalf("%s: count/min/max = %d/%d/%d, want %d/%d/%d", name,
			h.Count(), h.Min(), h.Max(), len(vals), sorted[0], sorted[len(sorted)-1])
	}
	for _, q := range []float64{0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1} {
		got, want := h.Quantile(q), exactQuantile(sorted, q)
		if diff := math.Abs(float64(got - want)); diff > 0.01*float64(want) {
			t.Errorf("%s: Quantile(%v) = %d, want %d within 1%%", name, q, got, want)
		}
	}
}

// Quantiles match a sorted slice within 1% over distributions spanning
// nanoseconds to minutes.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() int64{
		"small exact":   func() int64 { return rng.Int64N(300) },
		"uniform ms":    func() int64 { return 1e6 + rng.Int64N(9e6) },
		"exponential":   func() int64 { return int64(rng.ExpFloat64() * 2e6) },
		"lognormal":     func() int64 { return int64(math.Exp(rng.NormFloat64()*3 + 14)) },
		"bimodal tails": func() int64 { return []int64{50_000, 70e9}[rng.IntN(2)] + rng.Int64N(1000) },
	}
	for name, gen := range dists {
		var h Histogram
		vals := make([]int64, 20_000)
		for i := range vals {
			vals[i] = gen()
			h.Record(vals[i])
		}
		checkQuantiles(t, name, &h, vals)
	}
}

// Every value falls in its bucket, and a bucket is at most 1/128 of its
// lower bound wide, over the whole int64 range.
func TestHistogramBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(v int64) {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, out of [0,%d)", v, i, numBuckets)
		}
		low, width := bucketRange(i)
		if v < low || v-low >= width {
			t.Fatalf("value %d outside its bucket %d [%d, +%d)", v, i, low, width)
		}
		if low >= linearMax && float64(width)/float64(low) > 1.0/subCount {
			t.Fatalf("bucket %d [%d, +%d) is wider than 1/%d of its bound", i, low, width, subCount)
		}
	}
	for v := range int64(4096) {
		check(v)
	}
	for range 100_000 {
		check(rng.Int64N(math.MaxInt64))
		check(int64(1) << rng.IntN(63))
	}
	check(math.MaxInt64)
	// Buckets are contiguous: each ends where the next begins.
	for i := range numBuckets - 1 {
		low, width := bucketRange(i)
		if next, _ := bucketRange(i + 1); low+width != next {
			t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i, low+width, i+1, next)
		}
	}
}

// Merging histograms gives the histogram of all their values.
func TestHistogramMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var a, b, all, empty Histogram
	var vals []int64
	for i := range 10_000 {
		v := int64(rng.ExpFloat64() * 1e6)
		if i%3 == 0 {
			v *= 100 // b's values are larger: min and max come from both sides
			b.Record(v)
		} else {
			a.Record(v)
		}
		all.Record(v)
		vals = append(vals, v)
	}
	a.Merge(&empty)
	empty.Merge(&a)
	empty.Merge(&b)
	if empty != all {
		t.Fatal("a+b merged into an empty histogram differs from recording every value")
	}
	checkQuantiles(t, "merged", &empty, vals)
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 || a.Max() != 0 {
		t.Fatal("Reset left values behind")
	}
}

// A negative value counts as 0; an empty histogram answers 0; extreme
// quantiles are clamped to the recorded range.
func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 {
		t.Fatal("empty histogram")
	}
	h.Record(-5)
	h.Record(1_000_000_007)
	if h.Min() != 0 || h.Max() != 1_000_000_007 {
		t.Fatalf("min/max %d/%d", h.Min(), h.Max())
	}
	if h.Quantile(1) != 1_000_000_007 || h.Quantile(2) != 1_000_000_007 || h.Quantile(math.NaN()) != 1_000_000_007 {
		t.Fatal("Quantile(>=1) is not the exact max")
	}
	if h.Quantile(-1) != 0 || h.Quantile(0.5) != 0 {
		t.Fatalf("Quantile(0.5) = %d, want 0", h.Quantile(0.5))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	for i := range b.N {
		h.Record(int64(i) * 7919)
	}
}
