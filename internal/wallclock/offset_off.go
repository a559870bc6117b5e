//go:build !stelebyzantine

package wallclock

import "time"

// Offset is zero: only the stelebyzantine build offsets the clock.
func Offset() time.Duration { return 0 }
