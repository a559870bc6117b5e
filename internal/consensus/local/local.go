// Package local is an in-memory consensus.Orderer for unit tests and
// deterministic simulation only. It is not a production ordering path: it
// keeps nothing on disk, has no peers and no Byzantine tolerance. Production
// brokers run consensus/cometbft.
//
// The orderer behaves like a single honest proposer: Submit runs the
// application's CheckTx and queues the transaction; each block takes the
// queued transactions in submission order (up to MaxBlockTxs and
// MaxBlockBytes), drops those failing ValidateTx as a proposer would, opens
// a non-empty block with the application's own transactions (a
// consensus.Proposer's, its clock being the block time), then calls
// FinalizeBlock and Commit. Block times come from a deterministic clock
// (StartTime plus Step per height), so the same submissions produce the same
// blocks on every run. Blocks returns every block made, so a test can feed the
// very same blocks to a second state machine and compare app hashes.
package local

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stele-io/stele/internal/consensus"
)

// ErrNotStarted is returned by Submit, Step and Flush before Start.
var ErrNotStarted = errors.New("stele/consensus/local: orderer not started")

// ErrTxTooLarge is returned by Submit for a transaction larger than
// Options.MaxBlockBytes: no block could ever hold it.
var ErrTxTooLarge = errors.New("stele/consensus/local: transaction larger than a block")

// ErrBadResults is reported when FinalizeBlock returns a number of results
// different from the number of transactions in the block.
var ErrBadResults = errors.New("stele/consensus/local: FinalizeBlock returned the wrong number of results")

// DefaultStep is the block time step when Options.Step is zero.
const DefaultStep = time.Second

// Options configure an Orderer. The zero value is usable: blocks are cut as
// soon as transactions are pending, without size limits, and block h has
// time 2024-01-01T00:00:00Z + (h-1) seconds.
type Options struct {
	// Interval between blocks in automatic mode. Zero makes a block as soon
	// as transactions are pending, batching all of them (never an empty
	// block); a positive Interval makes a block every Interval, empty or
	// not, like CometBFT's create_empty_blocks_interval.
	Interval time.Duration
	// MaxBlockTxs and MaxBlockBytes bound one block (0 = no bound). The byte
	// count is the sum of the transactions' lengths.
	MaxBlockTxs   int
	MaxBlockBytes int64
	// MaxPendingTxs bounds the queue of submitted transactions not yet in a
	// block; Submit returns consensus.ErrMempoolFull beyond it (0 = no bound).
	MaxPendingTxs int
	// StartTime is the time of block 1 (zero means 2024-01-01T00:00:00Z);
	// block h has time StartTime + (h-1)*Step, so block times depend only on
	// the height and a restarted orderer continues the same clock.
	StartTime time.Time
	// Step is the block time increment per height (zero means one second).
	Step time.Duration
	// Manual disables the orderer's goroutine: blocks are made only when the
	// test calls Step or Flush.
	Manual bool
	// Proposer is put in every block's Proposer field (nil means "local").
	Proposer []byte
	// Signers is put in every block's Signers field after the first (as if
	// these validators signed every block); nil means none.
	Signers [][]byte
}

func (o *Options) setDefaults() {
	if o.StartTime.IsZero() {
		o.StartTime = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.Step == 0 {
		o.Step = DefaultStep
	}
	if o.Proposer == nil {
		o.Proposer = []byte("local")
	}
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Interval < 0:
		return fmt.Errorf("stele/consensus/local: Interval %v is negative", o.Interval)
	case o.MaxBlockTxs < 0:
		return fmt.Errorf("stele/consensus/local: MaxBlockTxs %d is negative", o.MaxBlockTxs)
	case o.MaxBlockBytes < 0:
		return fmt.Errorf("stele/consensus/local: MaxBlockBytes %d is negative", o.MaxBlockBytes)
	case o.MaxPendingTxs < 0:
		return fmt.Errorf("stele/consensus/local: MaxPendingTxs %d is negative", o.MaxPendingTxs)
	case o.Step < 0:
		return fmt.Errorf("stele/consensus/local: Step %v is negative; block times must not go backwards", o.Step)
	}
	return nil
}

// Orderer is the in-memory orderer. Its methods are safe for concurrent use.
//
// Lock order: execMu before mu. execMu serialises block making (so the
// application sees FinalizeBlock and Commit strictly in turn); mu guards the
// queue and the bookkeeping and is never held while the application runs
// FinalizeBlock or Commit.
type Orderer struct {
	app  consensus.Application
	opts Options

	execMu sync.Mutex

	mu struct {
		sync.Mutex
		started, stopped bool
		err              error // first application failure; ends ordering
		height           int64 // height of the last committed block
		pending          [][]byte
		submitted        uint64 // transactions ever queued
		taken            uint64 // transactions ever taken into a block (valid or not)
		blocks           []consensus.Block
		changed          chan struct{} // closed and replaced on every state change
	}

	wake chan struct{} // buffered(1): transactions are pending
	quit chan struct{}
	done chan struct{}
}

// New returns an orderer for app. It does nothing until Start. Invalid
// options are reported by Start.
func New(app consensus.Application, opts Options) *Orderer {
	opts.setDefaults()
	o := &Orderer{
		app:  app,
		opts: opts,
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	o.mu.changed = make(chan struct{})
	return o
}

// Start reads the application's height (app.Info) and continues from the
// next height; there is nothing to replay, the orderer keeps no blocks across
// restarts. In automatic mode it starts the block-making goroutine.
func (o *Orderer) Start(ctx context.Context) error {
	if err := o.opts.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	height, _ := o.app.Info()
	if height < 0 {
		return fmt.Errorf("stele/consensus/local: application reports negative height %d", height)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.mu.stopped:
		return consensus.ErrStopped
	case o.mu.started:
		return errors.New("stele/consensus/local: Start called twice")
	}
	o.mu.started = true
	o.mu.height = height
	if o.opts.Manual {
		close(o.done)
		return nil
	}
	go o.run()
	return nil
}

// Submit runs the application's CheckTx on tx and queues it for the next
// block. The orderer keeps its own copy of tx.
func (o *Orderer) Submit(ctx context.Context, tx []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := o.usable(); err != nil {
		return err
	}
	if o.opts.MaxBlockBytes > 0 && int64(len(tx)) > o.opts.MaxBlockBytes {
		return fmt.Errorf("%w: %d bytes, blocks hold %d", ErrTxTooLarge, len(tx), o.opts.MaxBlockBytes)
	}
	if err := o.app.CheckTx(tx); err != nil {
		return fmt.Errorf("stele/consensus/local: transaction rejected: %w", err)
	}
	o.mu.Lock()
	if err := o.usableLocked(); err != nil {
		o.mu.Unlock()
		return err
	}
	if o.opts.MaxPendingTxs > 0 && len(o.mu.pending) >= o.opts.MaxPendingTxs {
		o.mu.Unlock()
		return consensus.ErrMempoolFull
	}
	o.mu.pending = append(o.mu.pending, append([]byte(nil), tx...))
	o.mu.submitted++
	o.notifyLocked()
	o.mu.Unlock()

	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

// Step makes one block now from the pending transactions (an empty block if
// none are pending) and returns a copy of it. It works in both modes.
func (o *Orderer) Step() (consensus.Block, error) {
	o.execMu.Lock()
	defer o.execMu.Unlock()
	if err := o.usable(); err != nil {
		return consensus.Block{}, err
	}
	return o.makeBlock()
}

// Flush returns once every transaction submitted before the call has been
// through a block (committed, or dropped by ValidateTx). It makes the blocks
// itself, so it works in manual mode and does not wait for Interval.
func (o *Orderer) Flush(ctx context.Context) error {
	o.mu.Lock()
	target := o.mu.submitted
	o.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		o.execMu.Lock()
		o.mu.Lock()
		reached := o.mu.taken >= target
		o.mu.Unlock()
		if reached {
			o.execMu.Unlock()
			return nil
		}
		if err := o.usable(); err != nil {
			o.execMu.Unlock()
			return err
		}
		_, err := o.makeBlock()
		o.execMu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Blocks returns a deep copy of every block made since Start, in height
// order. It waits for a block being made: the application may have answered
// its transactions' submitters before the block is committed and recorded,
// and a caller who saw an answer must find its block in the list. It must
// not be called from the application's FinalizeBlock or Commit.
func (o *Orderer) Blocks() []consensus.Block {
	o.execMu.Lock()
	defer o.execMu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]consensus.Block, len(o.mu.blocks))
	for i, b := range o.mu.blocks {
		out[i] = copyBlock(b)
	}
	return out
}

// Height returns the height of the last committed block.
func (o *Orderer) Height() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.height
}

// Pending returns the number of submitted transactions not yet in a block.
func (o *Orderer) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.mu.pending)
}

// Err returns the application failure that stopped ordering, if any.
func (o *Orderer) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.err
}

// Stop stops making blocks and waits for the orderer's goroutine. Pending
// transactions are discarded. Stop may be called more than once.
func (o *Orderer) Stop() error {
	o.mu.Lock()
	if o.mu.stopped {
		o.mu.Unlock()
		<-o.done
		return nil
	}
	o.mu.stopped = true
	started := o.mu.started
	o.mu.pending = nil
	o.notifyLocked()
	o.mu.Unlock()
	close(o.quit)
	if !started {
		close(o.done)
	}
	<-o.done
	return nil
}

// run makes blocks in automatic mode until Stop or an application failure.
func (o *Orderer) run() {
	defer close(o.done)
	var tick <-chan time.Time
	if o.opts.Interval > 0 {
		t := time.NewTicker(o.opts.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-o.quit:
			return
		case <-tick:
			if !o.stepFromLoop(true) {
				return
			}
		case <-o.wake:
			if tick != nil {
				continue // blocks come on the ticker
			}
			for o.Pending() > 0 {
				if !o.stepFromLoop(false) {
					return
				}
			}
		}
	}
}

// stepFromLoop makes one block for the goroutine; it reports whether the
// loop should go on. Without allowEmpty it makes nothing when no
// transaction is pending (a Step or Flush may have taken them).
func (o *Orderer) stepFromLoop(allowEmpty bool) bool {
	o.execMu.Lock()
	defer o.execMu.Unlock()
	if o.usable() != nil {
		return false
	}
	if !allowEmpty && o.Pending() == 0 {
		return true
	}
	_, err := o.makeBlock()
	return err == nil
}

// makeBlock cuts, validates, finalizes and commits one block. The caller
// holds execMu.
func (o *Orderer) makeBlock() (consensus.Block, error) {
	o.mu.Lock()
	height := o.mu.height + 1
	n, size := 0, int64(0)
	for _, tx := range o.mu.pending {
		if o.opts.MaxBlockTxs > 0 && n == o.opts.MaxBlockTxs {
			break
		}
		if o.opts.MaxBlockBytes > 0 && size+int64(len(tx)) > o.opts.MaxBlockBytes {
			break
		}
		n++
		size += int64(len(tx))
	}
	candidates := o.mu.pending[:n:n]
	o.mu.pending = o.mu.pending[n:]
	o.mu.Unlock()

	txs := make([][]byte, 0, len(candidates))
	for _, tx := range candidates {
		if o.app.ValidateTx(tx) == nil {
			txs = append(txs, tx)
		}
	}
	b := consensus.Block{
		Height:   height,
		Time:     o.opts.StartTime.Add(time.Duration(height-1) * o.opts.Step),
		Txs:      txs,
		Proposer: append([]byte(nil), o.opts.Proposer...),
	}
	if p, ok := o.app.(consensus.Proposer); ok && len(txs) > 0 {
		// The proposer's clock is the block time: blocks stay a function
		// of the submissions alone.
		b.Txs = append(p.OpenProposal(height, b.Time), txs...)
	}
	if height > 1 {
		b.Signers = o.opts.Signers
	}
	results, _, err := o.app.FinalizeBlock(copyBlock(b))
	if err == nil && len(results) != len(b.Txs) {
		err = fmt.Errorf("%w: %d for %d transactions at height %d", ErrBadResults, len(results), len(b.Txs), height)
	}
	if err == nil {
		_, err = o.app.Commit()
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("stele/consensus/local: block %d: %w", height, err)
		if o.mu.err == nil {
			o.mu.err = err
		}
		o.notifyLocked()
		return consensus.Block{}, err
	}
	o.mu.height = height
	o.mu.taken += uint64(len(candidates))
	o.mu.blocks = append(o.mu.blocks, b)
	o.notifyLocked()
	return copyBlock(b), nil
}

// WaitHeight blocks until a block at height h or above is committed, ctx
// ends, or ordering fails.
func (o *Orderer) WaitHeight(ctx context.Context, h int64) error {
	for {
		o.mu.Lock()
		height, err, changed := o.mu.height, o.mu.err, o.mu.changed
		stopped := o.mu.stopped
		o.mu.Unlock()
		switch {
		case height >= h:
			return nil
		case err != nil:
			return err
		case stopped:
			return consensus.ErrStopped
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (o *Orderer) usable() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.usableLocked()
}

func (o *Orderer) usableLocked() error {
	switch {
	case o.mu.stopped:
		return consensus.ErrStopped
	case !o.mu.started:
		return ErrNotStarted
	case o.mu.err != nil:
		return o.mu.err
	}
	return nil
}

func (o *Orderer) notifyLocked() {
	close(o.mu.changed)
	o.mu.changed = make(chan struct{})
}

func copyBlock(b consensus.Block) consensus.Block {
	c := b
	c.Txs = make([][]byte, len(b.Txs))
	for i, tx := range b.Txs {
		c.Txs[i] = append([]byte(nil), tx...)
	}
	c.Proposer = append([]byte(nil), b.Proposer...)
	c.Signers = make([][]byte, len(b.Signers))
	for i, s := range b.Signers {
		c.Signers[i] = append([]byte(nil), s...)
	}
	return c
}
