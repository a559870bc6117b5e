package dataplane

// Fetching the certified batches this broker does not hold.
//
// The state machine asks for a certified batch's payload when it applies
// the block that orders it (Batch, fsm.BatchSource). A broker that was down
// when the batch was pushed, or whose push failed, fetches it from a peer:
//
//   - the certificate's signers first (at least one is honest and stored
//     it), in a random order, then every other peer (most received the
//     push too); the digest check makes any copy as good as another;
//   - each attempt against a peer has its own deadline (FetchTimeout), so a
//     peer that accepts the request and never answers costs one deadline,
//     not the block;
//   - a peer that serves bytes whose digest does not match is lying (or its
//     disk is; the store checks a CRC, so an honest one answers an error)
//     and is not asked again for that batch;
//   - after a round over every peer, the next waits (50 ms, doubling up to
//     2 s) and starts again. A batch no peer can deliver is retried until
//     the plane closes: the block cannot be applied without it (what
//     fsm.ErrBatchUnavailable means), so giving up would only halt
//     consensus sooner. Its attempts, failures and the time it has waited
//     show in the metrics and, at most every fetchLogEvery, in the log.
//
// The state machine asks for a block's batches one after another, so a
// block naming several missing batches would wait for each fetch in turn.
// Before the block is applied, its owner (internal/server, at
// FinalizeBlock) calls Prefetch with the block's transactions: the missing
// batches are fetched in the background, FetchParallel at a time in block
// order, and Batch waits for the fetch of its batch instead of starting
// one, if the fetch has started (one still queued it takes over, so that
// it never waits behind other batches' fetches). A fetched batch goes to the store and to the recent batches in
// memory (bounded), not to the job, so that batches fetched ahead of the
// applier hold no more memory than the recent batches may. The fetches a
// block started and did not claim (a certificate the state machine
// refused) end when the block is released.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// errMismatch marks a fetch whose bytes did not match the digest.
var errMismatch = errors.New("stele/dataplane: served bytes that do not match the certified digest")

// fetchLogEvery is how often a batch that cannot be had is logged again.
const fetchLogEvery = 30 * time.Second

// Backoff between rounds of attempts over every peer.
const (
	fetchBackoffMin = 50 * time.Millisecond
	fetchBackoffMax = 2 * time.Second
)

// fetchJob is one batch being fetched in the background for a block
// (Prefetch), until Batch claims it or the block is released.
type fetchJob struct {
	c      fsm.Certificate
	ctx    context.Context // ends with the plane, or when released
	cancel context.CancelFunc
	// state is jobQueued until a worker starts the job (jobRunning) or
	// Batch, finding it still queued, takes it over (jobTaken): Batch
	// never waits behind the other jobs of the queue, whatever they are.
	state atomic.Int32
	done  chan struct{} // closed once the fetch ended
	// payload is set only when the fetched batch could not be stored;
	// otherwise it is in the store and, likely, the recent batches.
	payload []byte
}

// fetchJob states.
const (
	jobQueued int32 = iota
	jobRunning
	jobTaken
)

// fetches is the Plane's set of background fetches, guarded by its mutex.
type fetches struct {
	sync.Mutex
	jobs map[fsm.Digest]*fetchJob
	// closed is set by Close: no goroutine is started after it.
	closed bool
}

// Prefetch starts fetching, in the background, the payloads of the
// certified transactions among txs (a block's) that this broker does not
// hold, FetchParallel at a time in their order, so that applying the block
// finds them fetched or under way. Call release once the block is applied
// (or will not be): it ends the fetches the block did not claim.
func (p *Plane) Prefetch(txs [][]byte) (release func()) {
	var want []fsm.Certificate
	for _, tx := range txs {
		if !fsm.IsCertifiedTx(tx) {
			continue
		}
		c, err := fsm.DecodeCertifiedTx(tx)
		if err != nil || p.holds(c.Digest) {
			continue // the state machine refuses it, or reads it here
		}
		want = append(want, c)
	}
	if len(want) == 0 {
		return func() {}
	}
	var jobs []*fetchJob
	p.fetching.Lock()
	defer p.fetching.Unlock()
	if p.fetching.closed {
		return func() {}
	}
	for _, c := range want {
		if _, ok := p.fetching.jobs[c.Digest]; ok {
			continue // another block's, or named twice
		}
		j := &fetchJob{c: c, done: make(chan struct{})}
		j.ctx, j.cancel = context.WithCancel(p.ctx)
		p.fetching.jobs[c.Digest] = j
		jobs = append(jobs, j)
	}
	queue := make(chan *fetchJob, len(jobs))
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	for range min(p.opts.FetchParallel, len(jobs)) {
		p.wg.Add(1) // under the lock, with closed checked: Close waits for them
		go func() {
			defer p.wg.Done()
			for j := range queue {
				p.runJob(j)
			}
		}()
	}
	return func() {
		p.fetching.Lock()
		defer p.fetching.Unlock()
		for _, j := range jobs {
			if p.fetching.jobs[j.c.Digest] == j {
				delete(p.fetching.jobs, j.c.Digest)
			}
			j.cancel()
		}
	}
}

// Batch returns the payload c names: from memory or the local store, or
// fetched from a peer (by Prefetch, or here), checked against the digest
// and stored. It retries until it has the payload or the plane is closed;
// the error then wraps both ErrClosed and fsm.ErrBatchUnavailable
// (fsm.BatchSource).
func (p *Plane) Batch(c fsm.Certificate) ([]byte, error) {
	p.fetching.Lock()
	j := p.fetching.jobs[c.Digest]
	delete(p.fetching.jobs, c.Digest) // claimed: its block no longer ends it
	p.fetching.Unlock()
	if j != nil && j.state.CompareAndSwap(jobQueued, jobTaken) {
		// Not started: its workers are busy with the batches before it
		// (some perhaps named by a lying hint, ahead.go, and fetched
		// until released). Fetch it here rather than wait for them.
		j.cancel()
		j = nil
	}
	if j != nil {
		select {
		case <-j.done:
			if j.payload != nil && uint32(len(j.payload)) == c.Size {
				j.cancel()
				return j.payload, nil
			}
		case <-p.ctx.Done():
		}
		j.cancel()
	}
	if b, ok := p.local(c); ok {
		return b, nil
	}
	b, err := p.fetchBatch(p.ctx, c)
	if err != nil {
		if p.ctx.Err() != nil {
			err = fmt.Errorf("%w: batch %x", ErrClosed, c.Digest[:8])
		}
		return nil, unavailableError{err}
	}
	return b, nil
}

// unavailableError is Batch's error: the batch cannot be had. It reads as
// its cause and matches fsm.ErrBatchUnavailable as well, for callers
// outside the state machine (which adds that sentinel's text itself).
type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{fsm.ErrBatchUnavailable, e.err} }

// runJob fetches j's batch unless it arrived meanwhile (a late push) or j
// was released.
func (p *Plane) runJob(j *fetchJob) {
	defer close(j.done)
	if !j.state.CompareAndSwap(jobQueued, jobRunning) || j.ctx.Err() != nil || p.holds(j.c.Digest) {
		return
	}
	b, stored, err := p.fetchAndStore(j.ctx, j.c)
	switch {
	case err != nil: // released or closed; Batch fetches itself if it must
	case stored:
		p.recent.put(j.c.Digest, b)
	default:
		j.payload = b
	}
}

// holds reports whether this broker has d's payload at hand.
func (p *Plane) holds(d fsm.Digest) bool {
	return p.recent.has(d) || p.opts.Store.Has(d)
}

// Peek returns c's payload if this broker has it in memory (stored or
// fetched recently and not yet applied), without reading the disk or
// taking it from the memory apply reads first: for a look at what a
// certificate carries (the broker's proposer sharing blocks among tenants).
// The caller must not change it.
func (p *Plane) Peek(c fsm.Certificate) ([]byte, bool) {
	b, ok := p.recent.peek(c.Digest)
	if !ok || uint32(len(b)) != c.Size {
		return nil, false
	}
	return b, true
}

// local returns c's payload if this broker holds it.
func (p *Plane) local(c fsm.Certificate) ([]byte, bool) {
	if b, ok := p.recent.take(c.Digest); ok && uint32(len(b)) == c.Size {
		p.opts.Metrics.recentHits.Inc()
		return b, true
	}
	b, err := p.opts.Store.Get(c.Digest)
	if err == nil && uint32(len(b)) == c.Size {
		return b, true
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		p.opts.Logger.Error("local copy of a batch unreadable; fetching it from a peer", "batch", fmt.Sprintf("%x", c.Digest[:8]), "err", err)
	}
	return nil, false
}

// fetchBatch fetches c's payload from the peers until it has it or ctx
// ends, and stores it.
func (p *Plane) fetchBatch(ctx context.Context, c fsm.Certificate) ([]byte, error) {
	b, _, err := p.fetchAndStore(ctx, c)
	return b, err
}

// fetchAndStore fetches c's payload from the peers until it has it or ctx
// ends, and stores it; stored says whether the store took it.
func (p *Plane) fetchAndStore(ctx context.Context, c fsm.Certificate) (b []byte, stored bool, err error) {
	signers, others := p.candidates(c)
	if len(signers)+len(others) == 0 {
		// A single node signed alone, yet its store lost the batch.
		return nil, false, fmt.Errorf("stele/dataplane: batch %x was signed only by this broker and is gone", c.Digest[:8])
	}
	m := p.opts.Metrics
	untrack := m.trackFetch()
	defer untrack()
	start := time.Now()
	log := p.opts.Logger.With("batch", fmt.Sprintf("%x", c.Digest[:8]), "size", c.Size)
	var (
		attempts int
		lastLog  time.Time
		lied     = map[[20]byte]bool{} // peers that served other bytes
		backoff  = fetchBackoffMin
	)
	for {
		order := append(shuffled(signers, lied), shuffled(others, lied)...)
		if len(order) == 0 {
			// Every peer served other bytes: more faults than the
			// cluster tolerates. Ask them all again rather than never.
			log.Error("every peer served bytes that do not match the certified digest; asking them all again", "attempts", attempts)
			clear(lied)
			order = append(shuffled(signers, nil), shuffled(others, nil)...)
		}
		for _, peer := range order {
			attempts++
			m.fetchAttempts.Inc()
			b, err = p.fetch(ctx, peer, c)
			if err == nil {
				m.fetched.Inc()
				m.fetchSeconds.Observe(time.Since(start).Seconds())
				if attempts > 1 {
					log.Info("fetched a certified batch", "peer", peer.URL, "attempts", attempts, "waited", time.Since(start).Round(time.Millisecond))
				}
				if _, err := p.opts.Store.Put(b, c.Height); err != nil {
					log.Warn("storing a fetched batch", "err", err)
					return b, false, nil
				}
				return b, true, nil
			}
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			m.fetchErrors.Inc()
			if errors.Is(err, errMismatch) {
				// Rare and worth an operator's eye every time: at most
				// once per peer and batch.
				lied[peer.Validator] = true
				m.fetchMismatches.Inc()
				log.Warn("a peer served bytes that do not match the certified digest; not asking it again for this batch", "peer", peer.URL, "err", err)
				continue
			}
			if time.Since(lastLog) >= fetchLogEvery {
				lastLog = time.Now()
				level := slog.LevelWarn
				if attempts == 1 {
					level = slog.LevelInfo // a missed push; the next peer usually has it
				}
				log.Log(ctx, level, "fetching a certified batch", "peer", peer.URL, "attempts", attempts,
					"waited", time.Since(start).Round(time.Millisecond), "err", err)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		}
		backoff = min(2*backoff, fetchBackoffMax)
	}
}

// candidates splits the peers into c's signers and the others.
func (p *Plane) candidates(c fsm.Certificate) (signers, others []Peer) {
	signed := make(map[[20]byte]bool, len(c.Sigs))
	for _, s := range c.Sigs {
		signed[s.Validator] = true
	}
	for _, peer := range p.peers() {
		if signed[peer.Validator] {
			signers = append(signers, peer)
		} else {
			others = append(others, peer)
		}
	}
	return signers, others
}

// shuffled returns the peers not in skip in a random order, spreading
// fetches.
func shuffled(peers []Peer, skip map[[20]byte]bool) []Peer {
	out := make([]Peer, 0, len(peers))
	for _, peer := range peers {
		if !skip[peer.Validator] {
			out = append(out, peer)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
