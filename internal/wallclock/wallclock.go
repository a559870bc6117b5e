// Package wallclock is the time of day as a broker reads it outside
// consensus: when a group timer judged on block time has fallen due, how
// long a transaction has been open. Block time itself comes from the
// validators' signed votes (CometBFT's BFT time, the weighted median of
// their timestamps), never from one broker's clock.
//
// The test-only `stelebyzantine` build can offset this clock, and every
// timestamp the broker's validator signs, with
// STELE_BYZANTINE=clock-offset=DURATION (for example clock-offset=-1h):
// a broker whose clock is wrong, for the fault suites
// (docs/reliability.md). Production builds compile offset_off.go, where
// the offset is always zero.
package wallclock

import "time"

// Now returns the time of day, offset by Offset.
func Now() time.Time { return time.Now().Add(Offset()) }
