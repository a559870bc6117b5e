package harness

import (
	"fmt"
	"sort"
	"sync"
)

// history keeps every (height, app hash) any node reported on /healthz, so
// a test can tell whether two nodes ever disagreed about one height, not
// only at the moment it compares them.
type history struct {
	mu struct {
		sync.Mutex
		// hashes[height][appHash] is the first node that reported it.
		hashes map[int64]map[string]int
	}
}

func newHistory() *history {
	h := &history{}
	h.mu.hashes = map[int64]map[string]int{}
	return h
}

// record notes node i's report.
func (h *history) record(i int, r Health) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.mu.hashes[r.Height]
	if at == nil {
		at = map[string]int{}
		h.mu.hashes[r.Height] = at
	}
	if _, ok := at[r.AppHash]; !ok {
		at[r.AppHash] = i
	}
}

// divergences describes every height for which nodes reported different
// app hashes, lowest first.
func (h *history) divergences() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var heights []int64
	for height, hashes := range h.mu.hashes {
		if len(hashes) > 1 {
			heights = append(heights, height)
		}
	}
	sort.Slice(heights, func(a, b int) bool { return heights[a] < heights[b] })
	var out []string
	for _, height := range heights {
		msg := fmt.Sprintf("divergence: at height %d the nodes reported %d app hashes:", height, len(h.mu.hashes[height]))
		for hash, i := range h.mu.hashes[height] {
			msg += fmt.Sprintf(" node%d %q;", i, hash)
		}
		out = append(out, msg)
	}
	return out
}
