// Package freeport hands tests TCP ports on 127.0.0.1 that nothing else is
// likely to take between the moment they are picked and the moment a broker
// binds them.
//
// A port is only checked free when it is picked; the broker binds it later,
// and a cluster test kills a broker and restarts it on the same ports. A port
// inside the kernel's ephemeral range (ip_local_port_range, 32768-60999 on
// Linux by default) can be taken in between as the source port of any
// outgoing connection on the machine — brokers dialling each other, a client
// dialling a broker — and the broker then fails with "address already in
// use". Every port handed out here lies below that range, where the kernel
// never picks a source port on its own.
//
// Test binaries run side by side (go test runs packages in parallel), and
// two of them, or two picks in one, could choose the same free port before
// either binds it. So the range is cut into blocks of blockSize ports; a
// process claims a block for itself with an advisory lock on a file in the
// temporary directory (released by the kernel when the process exits,
// however it exits) and hands out each port of its blocks once. Where
// blocks cannot be locked, ports come from the whole range, still never
// twice in one process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port handed out: above the well-known and commonly
// configured service ports.
const lowest = 10000

// ephemeralLow is the first port of the kernel's ephemeral range, or 32768
// (Linux's default, and IANA's dynamic range starts above it) when it cannot
// be read.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > lowest {
				low = min(low, v)
			}
		}
	}
	return low
}

// Base returns a port P such that every offset o in offsets has P+o
// bindable on 127.0.0.1 now, with every P+o below the ephemeral range. rng
// may be nil (a random source is used).
func Base(rng *rand.Rand, offsets ...int) (int, error) {
	if len(offsets) == 0 {
		offsets = []int{0}
	}
	span := 0
	for _, o := range offsets {
		if o < 0 {
			return 0, fmt.Errorf("freeport: negative offset %d", o)
		}
		span = max(span, o+1)
	}
	hi := ephemeralLow() - span // bases lie in [lowest, hi)
	if hi <= lowest {
		return 0, fmt.Errorf("freeport: a span of %d ports does not fit below the ephemeral range", span)
	}
	intN := rand.IntN
	if rng != nil {
		intN = rng.IntN
	}
	mu.Lock()
	defer mu.Unlock()
	if span <= blockSize {
		for _, b := range mu.blocks {
			if base, ok := pickIn(intN, b, b+blockSize-span, offsets, 50); ok {
				return base, nil
			}
		}
		for len(mu.blocks) < maxBlocks {
			b, ok := claimBlock(intN, hi+span)
			if !ok {
				break
			}
			mu.blocks = append(mu.blocks, b)
			if base, ok := pickIn(intN, b, b+blockSize-span, offsets, 50); ok {
				return base, nil
			}
		}
	}
	if base, ok := pickIn(intN, lowest, hi, offsets, 200); ok {
		return base, nil
	}
	return 0, fmt.Errorf("freeport: no free range of %d ports on 127.0.0.1 below %d after 200 tries", span, hi+span)
}

// blockSize is how many ports one claimed block holds; a span must fit.
const blockSize = 1024

// maxBlocks bounds the blocks one process claims.
const maxBlocks = 16

// mu guards what this process has claimed and handed out.
var mu struct {
	sync.Mutex
	blocks []int        // first ports of the blocks this process holds
	used   map[int]bool // ports handed out
}

// pickIn tries random bases in [lo, hi) whose ports this process has not
// handed out and that are bindable now, and marks the ports of the one it
// returns. Callers hold mu.
func pickIn(intN func(int) int, lo, hi int, offsets []int, tries int) (int, bool) {
	if hi <= lo {
		return 0, false
	}
	if mu.used == nil {
		mu.used = map[int]bool{}
	}
next:
	for range tries {
		base := lo + intN(hi-lo)
		for _, o := range offsets {
			if mu.used[base+o] {
				continue next
			}
		}
		if bindable(base, offsets) {
			for _, o := range offsets {
				mu.used[base+o] = true
			}
			return base, true
		}
	}
	return 0, false
}

// claimBlock locks a block of ports below end that no other process holds,
// starting from a random one; it reports false when none can be had.
func claimBlock(intN func(int) int, end int) (int, bool) {
	n := (end - lowest) / blockSize
	if n <= 0 {
		return 0, false
	}
	dir := filepath.Join(os.TempDir(), "stele-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, false
	}
	start := intN(n)
	for i := range n {
		k := (start + i) % n
		b := lowest + k*blockSize
		if slices.Contains(mu.blocks, b) {
			continue
		}
		if lockFile(filepath.Join(dir, strconv.Itoa(b)+".lock")) {
			return b, true
		}
	}
	return 0, false
}

// Span returns Base(rng, 0, 1, ..., n-1): n consecutive free ports.
func Span(rng *rand.Rand, n int) (int, error) {
	offsets := make([]int, n)
	for i := range offsets {
		offsets[i] = i
	}
	return Base(rng, offsets...)
}

// Addr returns "127.0.0.1:PORT" for one free port below the ephemeral range.
func Addr() (string, error) {
	p, err := Base(nil, 0)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// bindable reports whether every base+o can be listened on now; all the
// listeners are held until every port is checked, then closed.
func bindable(base int, offsets []int) bool {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, o := range offsets {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+o)))
		if err != nil {
			return false
		}
		lns = append(lns, ln)
	}
	return true
}
