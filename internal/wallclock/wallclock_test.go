package wallclock

import (
	"testing"
	"time"
)

// TestNow: without the stelebyzantine build the clock is the system's.
func TestNow(t *testing.T) {
	if off := Offset(); off != 0 {
		t.Skipf("built with a clock offset of %v", off)
	}
	before := time.Now()
	now := Now()
	if now.Before(before) || now.Sub(before) > time.Second {
		t.Fatalf("Now() = %v, system clock %v", now, before)
	}
}
