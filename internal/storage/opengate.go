package storage

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// openGate is a Store's compaction scheduler (pebble.Options.Experimental.
// CompactionScheduler). It keeps Pebble's own policy -- at most
// DBForCompaction.GetAllowedWithoutPermission compactions at once, another
// granted when one ends, after a flush, and every 100 ms -- and adds one
// rule: no compaction is granted until Open has returned.
//
// Why: pebble.Open (v2.1.7) flushes the memtables it replayed from the
// write-ahead log, and the end of that flush schedules a compaction; Open
// then lists obsolete files (scanObsoleteFiles), which waits for every
// running compaction to end. After a burst of writes the store holds an L0
// backlog, and that first compaction (L0 into the base level, here L6 and
// the whole key range) took 4.5-9 s, all of it inside Open and so before
// the broker could serve /healthz (docs/reliability.md, "Restart time").
// Held back, the compaction Pebble picked waits in its cache and is granted
// the moment the gate opens; the debt is paid in the background instead.
// Delete-only compactions do not go through a scheduler and may still run
// during Open; they are cheap.
type openGate struct {
	db   pebble.DBForCompaction
	poke chan struct{} // wakes the granter; buffered, one pending poke
	stop chan struct{} // closed by Unregister
	done chan struct{} // closed when the granter has returned

	mu struct {
		sync.Mutex
		open       bool // Open has returned: compactions may run
		registered bool // Register ran: the granter is running
		closed     bool // Unregister ran: grant nothing more
		running    int  // compactions granted and not yet Done
	}
}

var _ pebble.CompactionScheduler = (*openGate)(nil)

// granterPeriod is how often the granter looks for waiting compactions
// when nothing pokes it: Pebble's own scheduler uses the same period.
const granterPeriod = 100 * time.Millisecond

func newOpenGate() *openGate {
	return &openGate{
		poke: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// Register implements pebble.CompactionScheduler; Open calls it once.
func (g *openGate) Register(_ int, db pebble.DBForCompaction) {
	g.mu.Lock()
	g.db = db
	g.mu.registered = true
	g.mu.Unlock()
	go g.granter()
}

// Unregister implements pebble.CompactionScheduler: Close calls it, without
// Pebble's locks held, and after it returns the gate calls nothing of the
// DB's. It is also what OpenStoreWith calls when Open fails after Register.
func (g *openGate) Unregister() {
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		return
	}
	g.mu.closed = true
	registered := g.mu.registered
	g.mu.Unlock()
	close(g.stop)
	if registered {
		<-g.done
	}
}

// TrySchedule implements pebble.CompactionScheduler. Pebble calls it with
// its mutex held; the only DB method it may call is
// GetAllowedWithoutPermission.
func (g *openGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.mu.open || g.mu.closed || g.mu.running >= g.db.GetAllowedWithoutPermission() {
		return false, nil
	}
	g.mu.running++
	return true, grant{g}
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler:
// after a flush more compactions may be allowed.
func (g *openGate) UpdateGetAllowedWithoutPermission() { g.wake() }

// release opens the gate once Open has returned, and grants what waits.
func (g *openGate) release() {
	g.mu.Lock()
	g.mu.open = true
	g.mu.Unlock()
	g.wake()
}

func (g *openGate) wake() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// granter is the goroutine that grants compactions Pebble is waiting to
// run. Register starts it, Unregister stops it and waits for it.
func (g *openGate) granter() {
	defer close(g.done)
	tick := time.NewTicker(granterPeriod)
	defer tick.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
		case <-g.poke:
		}
		g.grantWaiting()
	}
}

// grantWaiting offers the DB compactions while it is allowed more than are
// running and it accepts them (Schedule returns false when it has none to
// run). A slot is taken before Schedule, so that TrySchedule, running at
// the same time, cannot exceed the limit with it.
func (g *openGate) grantWaiting() {
	for {
		g.mu.Lock()
		if !g.mu.open || g.mu.closed || g.mu.running >= g.db.GetAllowedWithoutPermission() {
			g.mu.Unlock()
			return
		}
		g.mu.running++
		g.mu.Unlock()
		if !g.db.Schedule(grant{g}) {
			g.done1()
			return
		}
	}
}

// done1 gives back one compaction slot.
func (g *openGate) done1() {
	g.mu.Lock()
	g.mu.running--
	g.mu.Unlock()
}

// grant is the handle of one granted compaction. Done gives its slot back
// and wakes the granter, which may start the next one.
type grant struct{ g *openGate }

func (grant) Started()                                          {}
func (grant) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (grant) CumulativeStats(pebble.CompactionGrantHandleStats) {}

func (h grant) Done() {
	h.g.done1()
	h.g.wake()
}
