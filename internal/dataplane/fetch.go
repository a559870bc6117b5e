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

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

// Batch returns the payload c names: from memory or the local store, or
// fetched from a peer, checked against the digest and stored. It retries
// until it has the payload or the plane is closed; the error then wraps
// both ErrClosed and fsm.ErrBatchUnavailable (fsm.BatchSource).
func (p *Plane) Batch(c fsm.Certificate) ([]byte, error) {
	if b, ok := p.local(c); ok {
		return b, nil
	}
	b, err := p.fetchBatch(p.ctx, c)
	if err != nil {
		if p.ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w: batch %x", fsm.ErrBatchUnavailable, ErrClosed, c.Digest[:8])
		}
		return nil, fmt.Errorf("%w: %w", fsm.ErrBatchUnavailable, err)
	}
	return b, nil
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
	signers, others := p.candidates(c)
	if len(signers)+len(others) == 0 {
		// A single node signed alone, yet its store lost the batch.
		return nil, fmt.Errorf("stele/dataplane: batch %x was signed only by this broker and is gone", c.Digest[:8])
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
			b, err := p.fetch(ctx, peer, c)
			if err == nil {
				m.fetched.Inc()
				m.fetchSeconds.Observe(time.Since(start).Seconds())
				if attempts > 1 {
					log.Info("fetched a certified batch", "peer", peer.URL, "attempts", attempts, "waited", time.Since(start).Round(time.Millisecond))
				}
				if _, err := p.opts.Store.Put(b, c.Height); err != nil {
					log.Warn("storing a fetched batch", "err", err)
				}
				return b, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
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
			return nil, ctx.Err()
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
	for _, peer := range p.opts.Peers {
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
