package dataplane

import (
	"sync"

	"github.com/stele-io/stele/internal/fsm"
)

// recentBatches keeps the payloads this broker stored most recently
// (certified, pushed to it, or fetched by Prefetch) until the block that
// orders them is applied, so that apply does not read back from disk what
// was just written there: a produce's batch is in memory from the moment
// it arrives until it is in the partition log. Bounded in bytes, oldest
// dropped first; a miss falls back to the store. Safe for concurrent use.
type recentBatches struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	m     map[fsm.Digest][]byte
	order []fsm.Digest // insertion order; digests already taken are skipped
}

func newRecentBatches(max int64) *recentBatches {
	return &recentBatches{max: max, m: map[fsm.Digest][]byte{}}
}

// put remembers payload under d. The caller must not change payload.
func (r *recentBatches) put(d fsm.Digest, payload []byte) {
	if int64(len(payload)) > r.max {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[d]; ok {
		return
	}
	r.m[d] = payload
	r.order = append(r.order, d)
	r.bytes += int64(len(payload))
	for r.bytes > r.max && len(r.order) > 0 {
		old := r.order[0]
		r.order = r.order[1:]
		if b, ok := r.m[old]; ok {
			delete(r.m, old)
			r.bytes -= int64(len(b))
		}
	}
	if len(r.order) > 2*len(r.m)+64 {
		// Taken digests pile up at the front; compact now and then.
		live := r.order[:0]
		for _, x := range r.order {
			if _, ok := r.m[x]; ok {
				live = append(live, x)
			}
		}
		r.order = live
	}
}

// has reports whether a payload is stored under d.
func (r *recentBatches) has(d fsm.Digest) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[d]
	return ok
}

// peek returns the payload stored under d, if it is here, and keeps it.
// The caller must not change it.
func (r *recentBatches) peek(d fsm.Digest) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.m[d]
	return b, ok
}

// take returns and forgets the payload stored under d, if it is here.
func (r *recentBatches) take(d fsm.Digest) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.m[d]
	if ok {
		delete(r.m, d)
		r.bytes -= int64(len(b))
	}
	return b, ok
}
