package main

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/consensus"
)

// app is the trivial replicated application every validator runs: it
// accepts every transaction and keeps only a running count. Its app hash
// is a hash chain over (transactions, bytes) of each non-empty block, so
// it changes exactly when a block carries transactions, as a real
// application's state would (CometBFT then makes one more block to sign
// that hash, as it does for Stele). It never reads the transactions.
//
// The app of one validator also reports each commit to a recorder.
type app struct {
	rec *recorder // nil on all validators but one

	mu      sync.Mutex
	height  int64
	hash    []byte
	pending *pendingBlock // between FinalizeBlock and Commit
}

type pendingBlock struct {
	height int64
	hash   []byte
	txs    int
	bytes  int64
	ids    []uint64 // the ids of the transactions, for the recorder
}

var _ consensus.Application = (*app)(nil)

func (a *app) Info() (int64, []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.height, slices.Clone(a.hash)
}

func (a *app) CheckTx([]byte) error    { return nil }
func (a *app) ValidateTx([]byte) error { return nil }

func (a *app) FinalizeBlock(b consensus.Block) ([]consensus.TxResult, []byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &pendingBlock{height: b.Height, hash: a.hash, txs: len(b.Txs)}
	for _, tx := range b.Txs {
		p.bytes += int64(len(tx))
		if a.rec != nil {
			p.ids = append(p.ids, txID(tx))
		}
	}
	if p.txs > 0 {
		h := sha256.New()
		h.Write(a.hash)
		var n [16]byte
		binary.BigEndian.PutUint64(n[:8], uint64(p.txs))
		binary.BigEndian.PutUint64(n[8:], uint64(p.bytes))
		h.Write(n[:])
		p.hash = h.Sum(nil)
	}
	a.pending = p
	return make([]consensus.TxResult, len(b.Txs)), p.hash, nil
}

func (a *app) Commit() (int64, error) {
	a.mu.Lock()
	p := a.pending
	a.pending = nil
	if p != nil {
		a.height, a.hash = p.height, p.hash
	}
	a.mu.Unlock()
	if p != nil && a.rec != nil {
		a.rec.committed(p, time.Now())
	}
	return 0, nil
}

// txID reads the id a submitter wrote into a transaction's first 8 bytes.
func txID(tx []byte) uint64 {
	if len(tx) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(tx)
}

// recorder counts what one validator commits and how long each
// transaction took from Submit to that commit. It also bounds the
// transactions in flight: a submitter takes a slot before Submit and the
// commit gives it back.
type recorder struct {
	slots chan struct{}

	mu          sync.Mutex
	submittedAt map[uint64]time.Time
	totals      snapshot
	measuring   bool
	latencies   []time.Duration
}

// snapshot is the recorder's running totals at one moment.
type snapshot struct {
	bytes, txs, blocks, nonEmpty int64
	lastCommit                   time.Time
}

func newRecorder(inflight int) *recorder {
	return &recorder{slots: make(chan struct{}, inflight), submittedAt: map[uint64]time.Time{}}
}

// submitting notes that transaction id is about to be submitted.
func (r *recorder) submitting(id uint64, t time.Time) {
	r.mu.Lock()
	r.submittedAt[id] = t
	r.mu.Unlock()
}

// failed forgets a transaction Submit refused and frees its slot.
func (r *recorder) failed(id uint64) {
	r.mu.Lock()
	delete(r.submittedAt, id)
	r.mu.Unlock()
	<-r.slots
}

func (r *recorder) committed(p *pendingBlock, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.totals.blocks++
	r.totals.lastCommit = now
	if p.txs == 0 {
		return
	}
	r.totals.nonEmpty++
	r.totals.txs += int64(p.txs)
	r.totals.bytes += p.bytes
	for _, id := range p.ids {
		t, ok := r.submittedAt[id]
		if !ok {
			continue
		}
		delete(r.submittedAt, id)
		if r.measuring {
			r.latencies = append(r.latencies, now.Sub(t))
		}
		<-r.slots
	}
}

// mark returns the totals now and switches latency recording on or off.
func (r *recorder) mark(measuring bool) snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measuring = measuring
	return r.totals
}

// percentile returns the q-th percentile (0-100) of the recorded
// latencies, or 0 when there are none.
func (r *recorder) percentile(q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	i := int(q / 100 * float64(len(s)-1))
	return s[i]
}
