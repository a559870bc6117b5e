//go:build !stelebyzantine

package dataplane

import "github.com/stele-io/stele/internal/fsm"

// store keeps a pushed batch; load reads one for a peer. The test-only
// `stelebyzantine` build replaces them (byzantine_on.go).
func (p *Plane) store(payload []byte, height int64) (fsm.Digest, error) {
	d, err := p.opts.Store.Put(payload, height)
	if err == nil {
		p.recent.put(d, payload)
	}
	return d, err
}

func (p *Plane) load(d fsm.Digest) ([]byte, error) { return p.opts.Store.Get(d) }
