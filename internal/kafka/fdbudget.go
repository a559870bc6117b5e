package kafka

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// The Kafka listener leaves this process fdReserve(limit) file descriptors:
// at least minFDReserve, or a tenth of RLIMIT_NOFILE.
const (
	minFDReserve   = 64
	fdRecheckEvery = 5 * time.Second
)

func fdReserve(limit int) int { return max(minFDReserve, limit/10) }

// fdBudget keeps Kafka connections from taking the last file descriptors
// the process may open. The rest of the broker needs some at any time:
// storage opens segment and Pebble files, and CometBFT writes its signing
// state through a new temporary file for every vote and halts when it
// cannot. So the listener accepts only while more than the reserve would
// be left, and otherwise waits, as it does at max.connections. Kafka has
// no such bound (a Kafka broker out of descriptors takes its log
// directory offline).
//
// Counting the open descriptors reads a directory, so it is done only when
// the last count may be out of date: when the connections accepted since
// could have used the room above twice the reserve, every fdRecheckEvery
// while that room is small, when an accepted connection's descriptor is
// numbered near the limit (descriptors are allocated lowest first, so all
// those below it are open), and after an accept failed for want of them.
// The listeners' Serve goroutines share it: mu orders them.
type fdBudget struct {
	mu    sync.Mutex
	limit func() (int, bool)          // RLIMIT_NOFILE's soft limit; false: no budget
	open  func(limit int) (int, bool) // descriptors open now
	// What the last count found, and the connections accepted since.
	room, reserve, accepted int
	checked                 time.Time
	stale                   bool // count again before the next accept
}

// newFDBudget is the budget for this platform (none where the descriptors
// cannot be counted).
func newFDBudget() *fdBudget {
	b := &fdBudget{limit: fdLimit, open: fdsOpen}
	if _, ok := fdLimit(); !ok {
		b.limit = nil
	}
	return b
}

// enough reports whether the next connection would leave the reserve
// untouched, counting the open descriptors first if the last count may be
// out of date.
func (b *fdBudget) enough(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit == nil {
		return true
	}
	left := b.room - b.accepted
	if b.stale || b.checked.IsZero() || left <= 2*b.reserve ||
		(b.room < 4*b.reserve && now.Sub(b.checked) >= fdRecheckEvery) {
		limit, ok := b.limit()
		if !ok {
			return true
		}
		open, ok := b.open(limit)
		if !ok {
			return true
		}
		b.room, b.reserve, b.accepted, b.checked, b.stale = limit-open, fdReserve(limit), 0, now, false
		left = b.room
	}
	return left > b.reserve
}

// sawAccept counts a new connection, and marks the count stale when its
// descriptor is numbered within twice the reserve of the limit.
func (b *fdBudget) sawAccept(nc net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit == nil {
		return
	}
	b.accepted++
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	limit, ok := b.limit()
	if !ok {
		return
	}
	rc.Control(func(fd uintptr) {
		if int(fd) >= limit-2*fdReserve(limit) {
			b.stale = true
		}
	})
}

// state is what the last count found, for logs.
func (b *fdBudget) state() (room, reserve int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.room, b.reserve
}

// markStale makes the next enough count the descriptors again.
func (b *fdBudget) markStale() {
	b.mu.Lock()
	b.stale = true
	b.mu.Unlock()
}
