//go:build stelebyzantine

package dataplane

import (
	"crypto/sha256"
	"os"
	"slices"
	"strings"

	"github.com/stele-io/stele/internal/fsm"
)

// The Byzantine behaviours of the test-only `stelebyzantine` build, chosen
// by STELE_BYZANTINE:
//
//	sign-without-storing  sign pushed batches without storing them, as a
//	                      broker that lies about holding data would
//	corrupt-batches       serve peers batches with a byte flipped
//
// Several may be given, separated by commas. Honest brokers must neither stall nor apply wrong bytes because of
// either. Production builds compile byzantine_off.go instead.
func (p *Plane) store(payload []byte, height int64) (fsm.Digest, error) {
	if byzantine("sign-without-storing") {
		return sha256.Sum256(payload), nil
	}
	d, err := p.opts.Store.Put(payload, height)
	if err == nil {
		p.recent.put(d, payload)
	}
	return d, err
}

func (p *Plane) load(d fsm.Digest) ([]byte, error) {
	b, err := p.opts.Store.Get(d)
	if err == nil && len(b) > 0 && byzantine("corrupt-batches") {
		b = append([]byte(nil), b...)
		b[len(b)/2] ^= 0xff
	}
	return b, err
}

func byzantine(behaviour string) bool {
	return slices.Contains(strings.Split(os.Getenv("STELE_BYZANTINE"), ","), behaviour)
}
