//go:build stelebyzantine

package broker

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/stele-io/stele/internal/fsm"
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

// byzantineSnapshot is the lying-snapshot behaviour: with forge-snapshots
// in STELE_BYZANTINE, every snapshot this broker builds is forged before
// it is offered (fsm.ForgeSnapshot): the first committed offset in it (or,
// without one, the first partition's state) is altered, with its honest
// proof and chunk hashes that match, so a broker restoring from it must
// find the lie in the chunk that carries it.
func byzantineSnapshot(s *fsm.Snapshot) (*fsm.Snapshot, error) {
	if !slices.Contains(strings.Split(os.Getenv("STELE_BYZANTINE"), ","), "forge-snapshots") {
		return s, nil
	}
	done := false
	return fsm.ForgeSnapshot(s, func(k, v []byte) []byte {
		if done || !(bytes.HasPrefix(k, []byte("o/")) || bytes.HasPrefix(k, []byte("p/"))) || len(v) < 9 {
			return v
		}
		done = true
		out := bytes.Clone(v)
		if bytes.HasPrefix(k, []byte("o/")) {
			out[8]++ // the low byte of the committed offset
		} else {
			out[len(out)-1] ^= 1
		}
		return out
	})
}
