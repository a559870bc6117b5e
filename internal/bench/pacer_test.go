package bench

import (
	"testing"
	"time"
)

// The producers' intended send times, taken together, are exactly the
// sequence start + n/rate: evenly spaced, interleaved between producers,
// without drift after millions of records.
func TestPacerIntendedTimes(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	const rate, producers = 3, 2 // 333,333,333.33 ns apart: rounding matters
	a, b := newPacer(start, rate, producers, 0), newPacer(start, rate, producers, 1)
	want := []time.Duration{0, 333_333_333, 666_666_666, time.Second, 1_333_333_333, 1_666_666_666, 2 * time.Second}
	for n, w := range want {
		p := a
		if n%2 == 1 {
			p = b
		}
		if got := p.next().Sub(start); got != w {
			t.Fatalf("record %d of the sequence: +%v, want +%v", n, got, w)
		}
	}
	// Far along, the time is still exact: floor(n * 1e9 / rate).
	p := newPacer(start, 7, 4, 3)
	k := uint64(250_000_000) // n = 1e9 + 3
	if got, want := p.at(k).Sub(start), time.Duration((uint64(1e9)+3)*1e9/7); got != want {
		t.Fatalf("record n=1e9+3 at +%v, want +%v", got, want)
	}
}

// The pacer never skips a record: asked late, it still hands out the
// times already past, one by one, so a late producer sends them all and
// their latency counts from those times (no coordinated omission).
func TestPacerDoesNotSkipWhenBehind(t *testing.T) {
	start := time.Now().Add(-time.Hour) // an hour behind schedule
	p := newPacer(start, 1000, 1, 0)
	for k := range 5000 {
		if got, want := p.next(), start.Add(time.Duration(k)*time.Millisecond); !got.Equal(want) {
			t.Fatalf("record %d intended at %v, want %v", k, got, want)
		}
	}
}

// A rate whose arithmetic would overflow gives a time that is never
// reached instead of wrapping around to the past.
func TestPacerOverflow(t *testing.T) {
	start := time.Unix(0, 0)
	p := newPacer(start, 1, 1, 0)
	if got := p.at(1 << 62); !got.After(start.Add(100 * 365 * 24 * time.Hour)) {
		t.Fatalf("overflowing record intended at %v", got)
	}
}
