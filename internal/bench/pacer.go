package bench

import (
	"math"
	"math/bits"
	"time"
)

// pacer gives one producer the intended send time of each of its records at
// a fixed total rate shared by several producers.
//
// The records of all producers form one sequence n = 0, 1, 2, ... whose
// record n is due at start + n/rate seconds; producer phase of stride
// producers sends records phase, phase+stride, phase+2*stride, ... so the
// producers interleave evenly instead of sending in bursts together.
//
// A producer sleeps until a record is due and then sends it. When it falls
// behind (the client blocked, the scheduler was late) it sends the records
// already due back to back, each still stamped with its own intended time:
// latency is measured from that time, so a stall shows up in the latency of
// every record it delayed instead of being hidden (no coordinated omission).
// The pacer never skips a record.
type pacer struct {
	start  time.Time
	rate   uint64 // records per second, all producers together; > 0
	stride uint64 // number of producers sharing the rate; > 0
	phase  uint64 // this producer's index, < stride
	k      uint64 // this producer's next record
}

// newPacer returns the pacer of producer phase of stride producers sending
// rate records per second together from start.
func newPacer(start time.Time, rate int64, stride, phase int) *pacer {
	return &pacer{start: start, rate: uint64(rate), stride: uint64(stride), phase: uint64(phase)}
}

// next returns the intended send time of this producer's next record and
// moves past it.
func (p *pacer) next() time.Time {
	t := p.at(p.k)
	p.k++
	return t
}

// at returns the intended send time of this producer's record k, computed
// exactly (128-bit arithmetic, no accumulated rounding): the offset from
// start is floor(n * 1e9 / rate) nanoseconds for sequence number
// n = k*stride + phase.
func (p *pacer) at(k uint64) time.Time {
	hi, n := bits.Mul64(k, p.stride)
	if hi != 0 {
		return p.start.Add(math.MaxInt64) // centuries away: never reached
	}
	n += p.phase
	hi, lo := bits.Mul64(n, uint64(time.Second))
	if hi >= p.rate {
		return p.start.Add(math.MaxInt64)
	}
	ns, _ := bits.Div64(hi, lo, p.rate)
	if ns > math.MaxInt64 {
		return p.start.Add(math.MaxInt64)
	}
	return p.start.Add(time.Duration(ns))
}
