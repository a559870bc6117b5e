//go:build stelebyzantine

package broker

import (
	"fmt"
	"os"
)

// byzantineAppHash is the diverging-state behaviour of the test-only
// `stelebyzantine` build: with STELE_BYZANTINE=diverge-at=H this broker
// reports a wrong app hash from height H on, as a broker whose stored state
// was tampered with would. Honest brokers keep agreeing; this one must find
// out at the next height and stop serving. Production builds compile
// byzantine_off.go instead.
func byzantineAppHash(hash []byte, height int64) []byte {
	var from int64
	if _, err := fmt.Sscanf(os.Getenv("STELE_BYZANTINE"), "diverge-at=%d", &from); err != nil || height < from {
		return hash
	}
	out := append([]byte(nil), hash...)
	if len(out) == 0 {
		out = make([]byte, 32)
	}
	out[0] ^= 0xff
	return out
}
