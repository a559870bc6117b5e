package broker

import (
	"sync"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/fsm"
)

// Tenants' shares of each block (issue 18, docs/tenants.md "Sharing the
// blocks").
//
// Every tenant's records are ordered into the same blocks, and a block is
// applied and made durable whole, so a record of a light tenant that shares
// a block with another tenant's burst waits for all of it, and so does one
// that arrives while such a block is being applied. A rate quota bounds a
// tenant's bytes a second, not what it sends at once. So, while more than
// one tenant produces (each had records waiting for a block within the
// last contentionWindow: the broker is contended), the broker
//
//   - packs each tenant's commands into transactions of their own
//     (submitBatch), of at most Options.TenantShare bytes each (a larger
//     command goes alone);
//   - keeps at most heldShares shares of a tenant's transactions in
//     ordering (hold); the next ones wait in the broker;
//   - when it proposes a block (ScheduleProposal), gives each tenant at
//     most TenantShare bytes of it, taking one transaction of each tenant
//     in turn; a tenant's first transaction is taken even when it is
//     larger, so no tenant starves. Transactions without records (offset
//     commits, administration: the control class) go first, in the
//     mempool's order. When light tenants (little waiting) and heavy ones
//     both wait, every other block leaves the heavy ones out
//     (lightShareDivisor).
//
// Whether contended or not, the transactions of a class are certified and
// handed to the orderer in the order they were made, and those of
// different classes independently (certify): one tenant's slow
// certifications do not hold up another's. What a proposal leaves out
// waits in the mempool, in its order, for the next block. A tenant
// producing alone has whole blocks, as before, and so has a cluster
// without tenants (the default tenant is one tenant).
// This is each proposer's policy, not a rule of the chain: other brokers
// do not check it, and a Byzantine proposer may still fill its own
// blocks as it likes.
//
// A transaction's class is the tenant of its first Produce command's topic
// (fsm.SplitTenant; honest brokers never mix tenants in one), and its cost
// its records' bytes: an inline transaction's length, a certificate's
// payload size. A certificate's tenant is read from its payload when this
// broker has it in memory (its own, or one pushed to it recently); one it
// does not hold is of the unknown class, which takes turns like a tenant
// but does not count towards contention.

// contentionWindow is how long a tenant counts as producing after it last
// had a transaction waiting.
const contentionWindow = time.Second

const (
	// controlClass is the class of transactions without records.
	controlClass = "\x00control"
	// unknownClass is the class of certificates whose payload this
	// broker does not hold in memory.
	unknownClass = "\x00unknown"
)

// isTenantClass reports whether class names a tenant ("" is the default
// tenant).
func isTenantClass(class string) bool { return class != controlClass && class != unknownClass }

// commandClass is the class a command's transaction belongs to.
func commandClass(c fsm.Command) string {
	if p, ok := c.(fsm.Produce); ok {
		tenant, _ := fsm.SplitTenant(p.Topic)
		return tenant
	}
	return controlClass
}

// payloadClass classifies an encoded transaction (an inline one, or a
// certificate's payload) by its first Produce command.
func payloadClass(payload []byte) string {
	tx, err := fsm.DecodeTx(payload)
	if err != nil {
		return unknownClass
	}
	for _, c := range tx.Commands {
		if p, ok := c.(fsm.Produce); ok {
			tenant, _ := fsm.SplitTenant(p.Topic)
			return tenant
		}
	}
	return controlClass
}

// txClass is what the scheduler knows of one transaction.
type txClass struct {
	class string
	cost  int64
}

// fairness is the broker's record of which tenants produce, and the
// classes of the transactions it has looked at. Safe for concurrent use.
type fairness struct {
	share int64
	// peek returns a certificate's payload if this broker has it in
	// memory (Options.PeekBatch); nil: never.
	peek func(fsm.Certificate) ([]byte, bool)
	// own returns the class of a certificate this broker made, if it is
	// still waiting (Broker.ownClass).
	own func(fsm.Digest) (string, bool)

	mu struct {
		sync.Mutex
		seen map[string]time.Time // tenant class → last time it waited
		// skipped: the last proposal left the heavy tenants out.
		skipped bool
		// known caches classes by transaction (an inline one's header
		// and nonce, a certificate's digest); each proposal keeps only
		// the entries of the transactions it was offered.
		known map[string]txClass
	}
}

func newFairness(share int64, peek func(fsm.Certificate) ([]byte, bool), own func(fsm.Digest) (string, bool)) *fairness {
	f := &fairness{share: share, peek: peek, own: own}
	f.mu.seen = map[string]time.Time{}
	f.mu.known = map[string]txClass{}
	return f
}

// saw records that tenant class had records waiting at now.
func (f *fairness) saw(class string, now time.Time) {
	if !isTenantClass(class) {
		return
	}
	f.mu.Lock()
	f.mu.seen[class] = now
	f.mu.Unlock()
}

// contended reports whether more than one tenant had records waiting
// within the window before now, forgetting those that did not.
func (f *fairness) contended(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.contendedLocked(now)
}

func (f *fairness) contendedLocked(now time.Time) bool {
	n := 0
	for c, t := range f.mu.seen {
		if now.Sub(t) > contentionWindow {
			delete(f.mu.seen, c)
			continue
		}
		n++
	}
	return n > 1
}

// classify returns tx's class and cost, from the cache when it has looked
// at tx before, and the key it is cached under ("" for none).
func (f *fairness) classify(tx []byte, cache map[string]txClass) (string, txClass) {
	if fsm.IsCertifiedTx(tx) {
		c, err := fsm.DecodeCertifiedTx(tx)
		if err != nil {
			return "", txClass{unknownClass, int64(len(tx))}
		}
		key := "c" + string(c.Digest[:])
		if k, ok := cache[key]; ok {
			return key, k
		}
		k := txClass{unknownClass, int64(c.Size)}
		if class, ok := f.own(c.Digest); ok {
			k.class = class
		} else if f.peek != nil {
			if payload, ok := f.peek(c); ok {
				k.class = payloadClass(payload)
			}
		}
		return key, k
	}
	if len(tx) < 36 {
		return "", txClass{payloadClass(tx), int64(len(tx))}
	}
	// Magic, version and the 32-byte nonce: an inline transaction's
	// identity (one that lies about it only fools the scheduler).
	key := "i" + string(tx[:36])
	if k, ok := cache[key]; ok {
		return key, k
	}
	return key, txClass{payloadClass(tx), int64(len(tx))}
}

// schedule chooses a proposal's transactions (see the file's comment) and
// says how many it left for a later block.
func (f *fairness) schedule(now time.Time, txs [][]byte, sizes []int64, room int64) (picked []int, deferred int) {
	f.mu.Lock()
	old := f.mu.known
	f.mu.Unlock()
	known := make(map[string]txClass, len(txs))
	classes := make([]string, len(txs))
	costs := make([]int64, len(txs))
	for i, tx := range txs {
		key, k := f.classify(tx, old)
		classes[i], costs[i] = k.class, k.cost
		if key != "" {
			known[key] = k
		}
	}
	f.mu.Lock()
	f.mu.known = known
	for _, c := range classes {
		if isTenantClass(c) {
			f.mu.seen[c] = now
		}
	}
	contended := f.contendedLocked(now)
	f.mu.Unlock()
	if !contended || f.share <= 0 {
		return consensus.Prefix(sizes, room), 0
	}
	// Light tenants' transactions get a block without the heavy ones'
	// every other time (lightShareDivisor).
	pending := map[string]int64{}
	for i, c := range classes {
		if c != controlClass {
			pending[c] += costs[i]
		}
	}
	var skip map[string]bool
	light := false
	for c, n := range pending {
		if n <= f.share/lightShareDivisor {
			light = true
		} else {
			if skip == nil {
				skip = map[string]bool{}
			}
			skip[c] = true
		}
	}
	f.mu.Lock()
	if !light || f.mu.skipped {
		skip = nil
	}
	f.mu.skipped = skip != nil
	f.mu.Unlock()
	picked = shareBlock(classes, sizes, costs, room, f.share, skip)
	return picked, len(txs) - len(picked)
}

// lightShareDivisor: a tenant with at most share/lightShareDivisor bytes of
// records waiting is light, one with more heavy. While tenants contend and
// both kinds wait, every other block this broker proposes carries the
// light tenants' transactions (and the control class's) without the heavy
// ones': a light tenant's record then waits for at most the block being
// applied when it came, not also for a heavy tenant's batch in its own
// block, and a heavy tenant still has at least every other block.
const lightShareDivisor = 16

// shareBlock takes the control class's transactions in order, then one
// transaction of each other class but those in skip in turn (classes in
// the order they first appear), each class's in its order, while the
// class's costs stay within share (its first is taken whatever its cost)
// and the block's sizes within room. It is a pure function of its
// arguments.
func shareBlock(classes []string, sizes, costs []int64, room, share int64, skip map[string]bool) []int {
	var out []int
	var order []string
	queues := map[string][]int{}
	for i, c := range classes {
		if c == controlClass {
			if sizes[i] <= room {
				room -= sizes[i]
				out = append(out, i)
			}
			continue
		}
		if skip[c] {
			continue
		}
		if _, ok := queues[c]; !ok {
			order = append(order, c)
		}
		queues[c] = append(queues[c], i)
	}
	used := map[string]int64{}
	for progress := true; progress; {
		progress = false
		for _, c := range order {
			q := queues[c]
			if len(q) == 0 {
				continue
			}
			i := q[0]
			if (used[c] > 0 && used[c]+costs[i] > share) || sizes[i] > room {
				queues[c] = nil // the rest of this class waits for a later block
				continue
			}
			used[c] += costs[i]
			room -= sizes[i]
			out = append(out, i)
			queues[c] = q[1:]
			progress = true
		}
	}
	return out
}

// heldShares is how many shares of a tenant's transactions may be in
// ordering (sent to certification or the orderer, not yet answered) at
// once while tenants contend; its next ones wait in the broker. It keeps
// a burst from filling the mempool ahead of other tenants' transactions:
// the orderer reaps only a block's worth of the mempool's head for a
// proposal, and with a burst ahead of them a light tenant's transactions
// would not even be offered, however fairly the block is then shared.
const heldShares = 4

// flow is one tenant class's transactions in ordering and held back.
type flow struct {
	ordering int64 // bytes sent and not yet answered
	held     []heldTx
}

type heldTx struct {
	tx  fsm.Tx
	raw []byte
	in  *inflight
}

// hold counts a transaction in its tenant's flow, or holds it back (and
// reports so) while tenants contend and the tenant has heldShares shares
// in ordering, or has transactions held before it.
func (b *Broker) hold(tx fsm.Tx, raw []byte, in *inflight) bool {
	if b.opts.TenantShare <= 0 || !isTenantClass(in.class) {
		return false
	}
	contended := b.fair.contended(time.Now())
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.mu.flows[in.class]
	if f == nil {
		f = &flow{}
		b.mu.flows[in.class] = f
	}
	if len(f.held) > 0 || (contended && f.ordering >= heldShares*b.opts.TenantShare) {
		f.held = append(f.held, heldTx{tx, raw, in})
		b.metrics.held.Inc()
		return true
	}
	f.ordering += in.size
	return false
}

// doneLocked takes an answered transaction out of its flow, and wakes the
// submit loop when that flow has transactions held. Callers hold b.mu.
func (b *Broker) doneLocked(in *inflight) {
	f := b.mu.flows[in.class]
	if f == nil {
		return
	}
	f.ordering -= in.size
	switch {
	case len(f.held) > 0:
		select {
		case b.release <- struct{}{}:
		default:
		}
	case f.ordering <= 0:
		delete(b.mu.flows, in.class)
	}
}

// releaseHeld sends the held transactions that may go now, each flow's in
// its order. It runs on the submit loop only.
func (b *Broker) releaseHeld() {
	contended := b.fair.contended(time.Now())
	var out []heldTx
	b.mu.Lock()
	for _, f := range b.mu.flows {
		for len(f.held) > 0 && (!contended || f.ordering < heldShares*b.opts.TenantShare) {
			h := f.held[0]
			f.held = f.held[1:]
			f.ordering += h.in.size
			out = append(out, h)
		}
	}
	b.mu.Unlock()
	for _, h := range out {
		b.dispatch(h.tx, h.raw, h.in)
	}
}
