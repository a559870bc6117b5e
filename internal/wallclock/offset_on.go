//go:build stelebyzantine

package wallclock

import (
	"os"
	"strings"
	"sync"
	"time"
)

// Offset is the clock offset STELE_BYZANTINE's clock-offset=DURATION sets
// (zero without one), read once.
var Offset = sync.OnceValue(func() time.Duration {
	for _, mode := range strings.Split(os.Getenv("STELE_BYZANTINE"), ",") {
		if v, ok := strings.CutPrefix(mode, "clock-offset="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				panic("stelebyzantine: STELE_BYZANTINE clock-offset=" + v + ": " + err.Error())
			}
			return d
		}
	}
	return 0
})
