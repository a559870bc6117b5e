package bench

import (
	"math"
	"math/bits"
)

// Histogram layout: values below linearMax get a bucket each; above it, every
// power-of-two range [2^e, 2^(e+1)) is split into subCount equal buckets, so a
// bucket is at most 1/subCount (0.78%) of its lower bound wide and the value
// reported for it, the bucket's midpoint, is within 0.4% of any value in it.
const (
	subBits    = 7
	subCount   = 1 << subBits // buckets per power of two
	linearMax  = 2 * subCount // values below this are exact
	numBuckets = linearMax + (64-subBits-2)*subCount
)

// Histogram is a log-linear histogram of non-negative int64 values (the
// engine records nanoseconds), in the spirit of HdrHistogram: fixed memory
// (numBuckets counters, about 57 KiB), constant-time Record, about 0.4%
// relative error on quantiles, and mergeable. Min and max are kept exactly.
//
// The zero value is an empty histogram ready to use. A Histogram is not safe
// for concurrent use; the engine guards each one with its owner's mutex and
// merges copies for reports.
type Histogram struct {
	counts   [numBuckets]uint64
	n        uint64
	min, max int64
}

// Record adds one value; a negative value counts as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count returns how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest value recorded, or 0 when empty.
func (h *Histogram) Min() int64 { return h.min }

// Max returns the largest value recorded, or 0 when empty.
func (h *Histogram) Max() int64 { return h.max }

// Quantile returns the value at quantile q (0 to 1, clamped): the value of
// rank ceil(q*Count()) among the sorted values, to within the bucket
// precision, and never outside [Min, Max]. Quantile(1) is Max exactly. It
// returns 0 when h is empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	switch {
	case q >= 1 || math.IsNaN(q):
		return h.max
	case q < 0:
		q = 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			low, width := bucketRange(i)
			return min(max(low+width/2, h.min), h.max)
		}
	}
	return h.max // not reached: the counts add up to n
}

// bucketOf returns the bucket index of v >= 0.
func bucketOf(v int64) int {
	if v < linearMax {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (subBits + 1) // >= 1
	m := int(v >> shift)                           // in [subCount, 2*subCount)
	return linearMax + (shift-1)*subCount + (m - subCount)
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (low, width int64) {
	if i < linearMax {
		return int64(i), 1
	}
	j := i - linearMax
	shift := j/subCount + 1
	m := int64(subCount + j%subCount)
	return m << shift, int64(1) << shift
}
