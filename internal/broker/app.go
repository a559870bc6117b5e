package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/fsm"
)

// app is the broker's consensus.Application: the fsm plus the hand-over of
// committed results to the callers waiting for them.
type app struct{ b *Broker }

func (a app) Info() (int64, []byte) { return a.b.fsm.Info() }

func (a app) AppVersion() uint64 { return uint64(a.b.fsm.AppVersion()) }

func (a app) FinalizedAppVersion() uint64 { return uint64(a.b.fsm.AppliedVersion()) }

func (a app) CheckTx(tx []byte) error { return a.b.fsm.CheckTx(tx) }

func (a app) ValidateTx(tx []byte) error { return a.b.fsm.ValidateTx(tx) }

// OpenProposal and CheckProposal implement consensus.Proposer with the
// state machine's proposal rules (fsm/cluster's proposals.go).
func (a app) OpenProposal(height int64, now time.Time) [][]byte {
	return a.b.fsm.ProposalOpening(height, now.UnixMilli())
}

func (a app) CheckProposal(height int64, now time.Time, txs [][]byte) error {
	return a.b.fsm.CheckProposal(height, now.UnixMilli(), txs)
}

// ScheduleProposal implements consensus.Scheduler: tenants share the
// block (fair.go).
func (a app) ScheduleProposal(_ int64, now time.Time, txs [][]byte, sizes []int64, room int64) []int {
	if a.b.opts.TenantShare <= 0 {
		return consensus.Prefix(sizes, room)
	}
	picked, deferred := a.b.fair.schedule(now, txs, sizes, room)
	a.b.metrics.deferred.Add(float64(deferred))
	return picked
}

// FinalizedValidatorUpdates implements consensus.Membership: the validator
// set changes of the block last applied (committed evidence removing an
// offender, fsm/cluster's membership.go).
func (a app) FinalizedValidatorUpdates() []consensus.ValidatorUpdate {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if a.b.mu.applied == nil {
		return nil
	}
	var out []consensus.ValidatorUpdate
	for _, u := range a.b.mu.applied.ValidatorUpdates {
		out = append(out, consensus.ValidatorUpdate{PubKey: u.PubKey, Power: u.Power})
	}
	return out
}

// Validators implements consensus.Membership: the committed validator set.
func (a app) Validators() []consensus.ValidatorUpdate {
	vs := a.b.fsm.CommittedValidators()
	if vs == nil {
		return nil
	}
	var out []consensus.ValidatorUpdate
	for _, v := range vs.Validators() {
		out = append(out, consensus.ValidatorUpdate{PubKey: v.PubKey, Power: v.Power})
	}
	return out
}

func (a app) FinalizeBlock(blk consensus.Block) ([]consensus.TxResult, []byte, error) {
	fb := fsm.Block{Height: blk.Height, TimeMs: blk.Time.UnixMilli(), Txs: blk.Txs, Signers: blk.Signers}
	for _, m := range blk.Misbehavior {
		// Evidence is part of the block, so every broker sees the same;
		// from app version 7 the state machine removes the offender's
		// power (fsm/cluster's membership.go). Operators are told, loudly.
		a.b.opts.Logger.Warn("evidence of validator misbehavior committed", "kind", m.Kind,
			"validator", fmt.Sprintf("%X", m.Validator), "at_height", m.Height, "height", blk.Height)
		a.b.metrics.evidence.WithLabelValues(m.Kind).Inc()
		kind := fsm.LightClientAttack
		if m.Kind == "duplicate-vote" {
			kind = fsm.DuplicateVote
		}
		fb.Misbehavior = append(fb.Misbehavior, fsm.Misbehavior{Kind: kind, Validator: m.Validator, Height: m.Height})
	}
	out, err := a.b.fsm.ApplyBlock(fb)
	if err != nil {
		a.b.localFault("apply", err)
		return nil, nil, err
	}
	res := make([]consensus.TxResult, len(out.Txs))
	for i, t := range out.Txs {
		res[i] = consensus.TxResult{Code: t.Code, Data: t.Data, Log: t.Log}
	}
	a.b.mu.Lock()
	a.b.mu.applied = &out
	a.b.mu.Unlock()
	return res, byzantineAppHash(out.AppHash, blk.Height), nil
}

// Commit makes the block durable and visible, then answers its callers and
// wakes long-polling readers.
func (a app) Commit() (int64, error) {
	retain, err := a.b.fsm.Commit()
	if err != nil {
		a.b.localFault("commit", err)
		return 0, fmt.Errorf("stele/broker: commit: %w", err)
	}
	b := a.b
	now := time.Now()
	b.lastCommit.Store(now.UnixNano())
	b.mu.Lock()
	out := b.mu.applied
	b.mu.applied = nil
	if out != nil {
		// Before any caller is answered: one that reads /metrics next
		// sees its own block's height.
		b.metrics.height.Set(float64(out.Height))
		for _, t := range out.Txs {
			nonce := t.Nonce
			if t.Batch != (fsm.Digest{}) {
				if n, ok := b.mu.byBatch[t.Batch]; ok {
					nonce = n
					delete(b.mu.byBatch, t.Batch)
				}
			}
			in, ok := b.mu.waiting[nonce]
			if !ok {
				continue
			}
			delete(b.mu.waiting, nonce)
			b.doneLocked(in)
			b.metrics.commitLatency.Observe(now.Sub(in.submitted).Seconds())
			var refused error
			switch {
			case t.Code == fsm.CodeResubmit:
				// Certified in a form the app version no longer applies
				// (an upgrade took effect meanwhile): nothing was applied,
				// and the client's retry is certified anew.
				refused = fmt.Errorf("%w: %s", ErrUncertified, t.Log)
			case t.Code != 0:
				refused = fmt.Errorf("stele/broker: transaction rejected: %s", t.Log)
			}
			for i, s := range in.slots {
				if refused == nil && i >= len(t.Results) {
					s.req.finish(s.idx, fsm.Result{}, fmt.Errorf("stele/broker: transaction rejected: %s", t.Log))
					continue
				}
				if refused != nil {
					s.req.finish(s.idx, fsm.Result{}, refused)
					continue
				}
				r := t.Results[i]
				r.Height = out.Height
				s.req.finish(s.idx, r, nil)
			}
		}
	}
	b.expireLocked(now)
	close(b.mu.changed)
	b.mu.changed = make(chan struct{})
	b.mu.Unlock()
	if err := b.fsm.UpgradeRequired(); err != nil && b.opts.UpgradeRequired != nil {
		b.opts.UpgradeRequired(err)
	}
	return retain, nil
}

// localFault counts and reports a local fault of the state machine, after
// which this broker stops (fsm.ErrLocalFault); other errors pass.
func (b *Broker) localFault(stage string, err error) {
	if !errors.Is(err, fsm.ErrLocalFault) {
		return
	}
	b.metrics.localFaults.WithLabelValues(stage).Inc()
	b.opts.Logger.Error("local storage fault: this broker stops (fail-stop); fix the disk and restart it, the block is replayed from the chain",
		"stage", stage, "err", err)
}

// abandonAfter is how long a transaction may stay unanswered: one that was
// admitted but never committed (dropped from a mempool, its certificate
// expired unordered) would otherwise be remembered forever.
const abandonAfter = 2 * time.Minute

// expireLocked fails the transactions waiting longer than abandonAfter; it
// looks once every 256 commits. Callers hold b.mu.
func (b *Broker) expireLocked(now time.Time) {
	b.mu.commits++
	if b.mu.commits%256 != 0 {
		return
	}
	for n, in := range b.mu.waiting {
		if now.Sub(in.submitted) > abandonAfter {
			delete(b.mu.waiting, n)
			b.doneLocked(in)
			for _, s := range in.slots {
				s.req.finish(s.idx, fsm.Result{}, fmt.Errorf("stele/broker: not committed within %v", abandonAfter))
			}
		}
	}
	for d, n := range b.mu.byBatch {
		if _, ok := b.mu.waiting[n]; !ok {
			delete(b.mu.byBatch, d)
		}
	}
}
