// Package broker is the node-local service both front-ends call: it turns
// requests into fsm commands, coalesces the commands that arrive together into
// one transaction, hands it to the orderer, and answers each caller once the
// block holding its commands has been committed and applied. It also
// implements consensus.Application over the fsm and tells long-polling readers
// when new data has been committed.
//
// broker imports consensus and fsm; front-ends (kafka, httpapi) import broker
// and never consensus: the broker translates the orderer's errors into its
// own (ErrMempoolFull, ErrClosed).
package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/subject"
	"github.com/stele-io/stele/internal/wallclock"
	"github.com/stele-io/stele/pkg/proof"
)

// ErrTooLarge is returned for a command that cannot fit in one transaction.
var ErrTooLarge = errors.New("stele/broker: command larger than the largest transaction")

// ErrUncertified is returned for commands whose batch did not gather a
// certificate (too few validators reachable to store it); the caller may
// retry.
var ErrUncertified = errors.New("stele/broker: batch not certified by enough validators")

// ErrClosed is returned once the broker is shutting down, or once its
// orderer has stopped (the error then also wraps consensus.ErrStopped).
var ErrClosed = errors.New("stele/broker: shutting down")

// ErrMempoolFull is returned for commands the orderer would not take now
// because its mempool is full (the error also wraps
// consensus.ErrMempoolFull); nothing was ordered and the caller may retry.
var ErrMempoolFull = errors.New("stele/broker: the orderer's mempool is full")

// Options configures a Broker.
type Options struct {
	// MaxTxBytes bounds one transaction; it must not exceed the orderer's
	// limit. Default 16 MiB.
	MaxTxBytes int
	Logger     *slog.Logger
	// Registerer receives the broker's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Certifier, when set, carries transactions by certificate (the data
	// plane, DESIGN.md §4): each transaction is stored and certified by
	// the validators, and only its certificate is ordered. Nil orders
	// transactions inline.
	Certifier Certifier
	// MaxCertifying bounds the transactions being certified at once;
	// Enqueue waits beyond it. Default 8.
	MaxCertifying int
	// TenantShare, when positive, shares blocks among tenants while more
	// than one produces: each tenant's commands go into transactions of
	// their own of at most this many bytes, and a block this broker
	// proposes holds at most this many bytes of each tenant's records
	// (fair.go). 0 leaves blocks to the mempool's order.
	TenantShare int64
	// PeekBatch, when set, returns a certificate's payload if this broker
	// has it in memory (dataplane.Plane.Peek): how the proposer learns the
	// tenant of a batch another broker certified.
	PeekBatch func(fsm.Certificate) ([]byte, bool)
	// UpgradeRequired, when set, is called (on the consensus goroutine,
	// so it must not block) after a Commit that leaves the next block at
	// the height of an upgrade this binary cannot run
	// (fsm.ErrUpgradeRequired): the process should stop before consensus
	// asks for that block.
	UpgradeRequired func(error)
}

// Certifier turns a transaction into a certificate (dataplane.Plane).
type Certifier interface {
	Certify(ctx context.Context, payload []byte) (fsm.Certificate, error)
}

func (o *Options) setDefaults() {
	if o.MaxTxBytes <= 0 {
		o.MaxTxBytes = 16 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxCertifying <= 0 {
		o.MaxCertifying = 8
	}
}

// Broker serves one node. Create it with New, give App() to the orderer,
// then call Start with the orderer.
type Broker struct {
	opts    Options
	fsm     *fsm.FSM
	orderer consensus.Orderer
	metrics *metrics
	fair    *fairness

	queue chan *request
	// release wakes the submit loop to send held transactions (fair.go).
	release chan struct{}
	// certSlots holds a token for each transaction being certified or
	// waiting to be ordered (at most MaxCertifying); lastCert is, per
	// class (fair.go), closed when the last transaction certify started
	// has been handed to the orderer or failed. Only the submit loop
	// touches lastCert.
	certSlots chan struct{}
	lastCert  map[string]chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
	// lastCommit is the wall time (UnixNano) of the last Commit.
	lastCommit atomic.Int64

	// mu guards the waiting transactions, the outcomes of the block being
	// applied, and the change channel.
	mu struct {
		sync.Mutex
		waiting map[fsm.Nonce]*inflight
		// byBatch finds the transaction of a certificate whose payload
		// was not read (the certificate was refused).
		byBatch map[fsm.Digest]fsm.Nonce
		// flows are the tenants' transactions in ordering and held back
		// (fair.go).
		flows   map[string]*flow
		commits uint64
		applied *fsm.BlockOutcome
		changed chan struct{}
		closed  bool
	}
}

// request is one caller's commands waiting for their results.
type request struct {
	cmds    []fsm.Command
	valid   []int // indexes of the commands that were queued
	results []fsm.Result
	errs    []error
	left    int
	done    chan struct{}
}

// inflight is a submitted transaction: which request each command came from.
type inflight struct {
	submitted time.Time
	slots     []slot
	class     string // fair.go
	size      int64
}

type slot struct {
	req *request
	idx int
}

// New creates a broker over a state machine.
func New(f *fsm.FSM, opts Options) *Broker {
	opts.setDefaults()
	b := &Broker{opts: opts, fsm: f, queue: make(chan *request, 1024), stop: make(chan struct{})}
	b.certSlots = make(chan struct{}, opts.MaxCertifying)
	b.lastCert = map[string]chan struct{}{}
	b.mu.waiting = map[fsm.Nonce]*inflight{}
	b.mu.byBatch = map[fsm.Digest]fsm.Nonce{}
	b.mu.flows = map[string]*flow{}
	b.release = make(chan struct{}, 1)
	b.mu.changed = make(chan struct{})
	b.metrics = newMetrics(opts.Registerer, f)
	b.fair = newFairness(opts.TenantShare, opts.PeekBatch, b.ownClass)
	return b
}

// ownClass returns the class (fair.go) of a certificate this broker made
// whose transaction has not been answered yet.
func (b *Broker) ownClass(d fsm.Digest) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.mu.byBatch[d]; ok {
		if in, ok := b.mu.waiting[n]; ok {
			return in.class, true
		}
	}
	return "", false
}

// App returns the consensus.Application the orderer drives.
func (b *Broker) App() consensus.Application { return app{b} }

// Start begins submitting to the orderer, which must already be started.
func (b *Broker) Start(o consensus.Orderer) {
	b.orderer = o
	b.wg.Add(2)
	go b.submitLoop()
	go b.tickLoop()
}

// tickIdle is how long the chain must have been idle before a tick is
// submitted for a group timer that fell due.
const tickIdle = 300 * time.Millisecond

// tickLoop submits an fsm.Tick when a group timer (session, rebalance or
// initial delay, judged on block time) has fallen due by the wall clock and
// no block has been committed for tickIdle: an idle chain makes an empty
// block only every few seconds, and the timer would wait for it. Block
// time follows the validators' clocks, so the wall clock says when a block
// made now would let the timer act.
//
// Under CometBFT a block's time is the median of the vote times that
// committed the block before it (BFT time), so on an idle chain the block a
// tick makes carries the time of the previous commit, from before the
// timer fell due, and fires nothing; the block after it carries the tick
// block's own commit time. So when the tick's block leaves the timer due,
// the next tick goes out as soon as that block commits, not tickIdle
// later: the timer fires two block intervals after it fell due instead of
// two plus tickIdle and a poll. One follow-up only: a timer still due
// after it waits for the next round of the loop.
func (b *Broker) tickLoop() {
	defer b.wg.Done()
	t := time.NewTicker(tickIdle / 2)
	defer t.Stop()
	var (
		last     time.Time
		inflight atomic.Bool
	)
	for {
		select {
		case <-b.stop:
			return
		case now := <-t.C:
			due := min(b.fsm.GroupTimerDue(), b.fsm.ShareTimerDue())
			idle := now.Sub(time.Unix(0, b.lastCommit.Load()))
			if due > wallclock.Now().UnixMilli() || idle < tickIdle || now.Sub(last) < tickIdle || inflight.Load() {
				continue
			}
			last = now
			inflight.Store(true)
			go func() {
				defer inflight.Store(false)
				b.tickOnce()
				if min(b.fsm.GroupTimerDue(), b.fsm.ShareTimerDue()) <= wallclock.Now().UnixMilli() {
					b.tickOnce() // the first tick's block carried an older time
				}
			}()
		}
	}
}

// tickOnce orders an fsm.Tick and waits (up to 30 s) for its block.
func (b *Broker) tickOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.Enqueue(ctx, fsm.Tick{}).Wait(ctx)
}

// Barrier returns once this broker has applied a block ordered after the
// call: it orders an fsm.Tick and waits for its result. Every write
// acknowledged anywhere before the call was committed in an earlier block,
// so the state is then at least as new as any a client has seen. It fails
// when ctx ends first (the broker is cut off from a quorum).
func (b *Broker) Barrier(ctx context.Context) error {
	_, err := b.SubmitOne(ctx, fsm.Tick{})
	return err
}

// Close stops submitting and fails every waiting caller. The orderer is
// stopped by its owner.
func (b *Broker) Close() {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return
	}
	b.mu.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	b.mu.Lock()
	for n, in := range b.mu.waiting {
		for _, s := range in.slots {
			s.req.finish(s.idx, fsm.Result{}, ErrClosed)
		}
		delete(b.mu.waiting, n)
	}
	for _, f := range b.mu.flows {
		for _, h := range f.held {
			for _, s := range h.in.slots {
				s.req.finish(s.idx, fsm.Result{}, ErrClosed)
			}
		}
	}
	b.mu.flows = map[string]*flow{}
	b.mu.Unlock()
}

// View returns the committed topics.
func (b *Broker) View() *fsm.View { return b.fsm.View() }

// Transactions returns the committed transactional ids.
func (b *Broker) Transactions() []fsm.TxnInfo { return b.fsm.Transactions() }

// KeyEvents returns up to limit committed events of key in topic from
// offset from on (fsm.FSM.KeyEvents).
func (b *Broker) KeyEvents(topic string, key []byte, from int64, limit int) ([]fsm.KeyEvent, error) {
	return b.fsm.KeyEvents(topic, key, from, limit)
}

// SubjectRecords returns up to limit committed records of topic whose
// subject matches pat, from the offsets of from (fsm.FSM.SubjectRecords).
func (b *Broker) SubjectRecords(topic string, pat subject.Pattern, from map[int32]int64, limit int) ([]fsm.SubjectRecord, map[int32]int64, fsm.SubjectReadStats, error) {
	return b.fsm.SubjectRecords(topic, pat, from, limit)
}

// AllRecords reads topic's committed records whatever their subjects
// (fsm.FSM.AllRecords).
func (b *Broker) AllRecords(topic string, from map[int32]int64, limit int) ([]fsm.SubjectRecord, map[int32]int64, fsm.SubjectReadStats, error) {
	return b.fsm.AllRecords(topic, from, limit)
}

// SubjectCounts lists the subjects seen in topic with their record counts
// (fsm.FSM.SubjectCounts).
func (b *Broker) SubjectCounts(topic string, prefix, after []byte, limit int) ([]fsm.SubjectCount, error) {
	return b.fsm.SubjectCounts(topic, prefix, after, limit)
}

// ProducerKey returns a principal's registered key (fsm.FSM.ProducerKey).
func (b *Broker) ProducerKey(principal string) ([]byte, error) { return b.fsm.ProducerKey(principal) }

// Upgrade returns the committed app version and upgrade state
// (fsm.FSM.Upgrade).
func (b *Broker) Upgrade() fsm.UpgradeStatus { return b.fsm.Upgrade() }

// Membership returns the membership epoch and the validators' votes
// towards a change, as of the last commit.
func (b *Broker) Membership() fsm.MembershipStatus { return b.fsm.Membership() }

// BrokerConfigs returns the committed dynamic broker configs.
func (b *Broker) BrokerConfigs() *fsm.BrokerConfigs { return b.fsm.BrokerConfigs() }

// Quotas returns the committed client quotas.
func (b *Broker) Quotas() *fsm.Quotas { return b.fsm.Quotas() }

// IPQuotas returns the committed IP quotas (connection_creation_rate).
func (b *Broker) IPQuotas() *fsm.IPQuotas { return b.fsm.IPQuotas() }

// ACLs returns the committed ACLs.
func (b *Broker) ACLs() *fsm.ACLs { return b.fsm.ACLs() }

// Users returns the committed users and their SASL credentials.
func (b *Broker) Users() *fsm.Users { return b.fsm.Users() }

// Tenants returns the committed tenants.
func (b *Broker) Tenants() *fsm.TenantsView { return b.fsm.TenantsView() }

// Plugins returns the committed plugin deployments.
func (b *Broker) Plugins() *fsm.PluginsView { return b.fsm.PluginsView() }

// Schemas returns the committed schema registries.
func (b *Broker) Schemas() *fsm.SchemasView { return b.fsm.SchemasView() }

// KeyLatest returns the latest committed record of key (fsm.FSM.KeyLatest).
func (b *Broker) KeyLatest(topic string, key []byte) (fsm.KeyEvent, bool, error) {
	return b.fsm.KeyLatest(topic, key)
}

// TableLatest returns the latest version of key in a table topic, as its
// authenticated leaves hold it (fsm.FSM.TableLatest).
func (b *Broker) TableLatest(topic string, key []byte) (fsm.KeyEvent, bool, error) {
	return b.fsm.TableLatest(topic, key)
}

// ProveTable proves key's latest version in a table topic, or its absence
// (fsm.FSM.ProveTable).
func (b *Broker) ProveTable(topic string, key []byte) (*proof.StateProof, *proof.TableValue, []byte, error) {
	return b.fsm.ProveTable(topic, key)
}

// BatchHeight returns the height that committed the batch holding offset
// (fsm.FSM.BatchHeight).
func (b *Broker) BatchHeight(topic string, partition int32, offset int64) (height, base, last int64, err error) {
	return b.fsm.BatchHeight(topic, partition, offset)
}

// ProveBatch returns the state's proof of the batch holding offset
// (fsm.FSM.ProveBatch).
func (b *Broker) ProveBatch(topic string, partition int32, offset int64) (*fsm.BatchProof, error) {
	return b.fsm.ProveBatch(topic, partition, offset)
}

// ProveState proves keys of the committed state (fsm.FSM.ProveState).
func (b *Broker) ProveState(keys ...[]byte) (*proof.StateProof, error) {
	return b.fsm.ProveState(keys...)
}

// KeySnapshot finds the latest snapshot record of key (fsm.FSM.KeySnapshot).
func (b *Broker) KeySnapshot(topic string, key []byte) (int32, int64, bool, error) {
	return b.fsm.KeySnapshot(topic, key)
}

// Keys lists up to limit keys of topic starting with prefix, after after
// (fsm.FSM.Keys).
func (b *Broker) Keys(topic string, prefix, after []byte, limit int) ([][]byte, error) {
	return b.fsm.Keys(topic, prefix, after, limit)
}

// Groups returns the committed consumer groups.
func (b *Broker) Groups() *fsm.GroupsView { return b.fsm.Groups() }

// ShareGroups returns the committed share groups.
func (b *Broker) ShareGroups() *fsm.ShareGroupsView { return b.fsm.ShareGroups() }

// Height returns the last committed height.
func (b *Broker) Height() int64 { h, _ := b.fsm.Info(); return h }

// Info returns the last committed height and app hash.
func (b *Broker) Info() (int64, []byte) { return b.fsm.Info() }

// Changed returns a channel closed at the next Commit; long-polling readers
// wait on it and then look again.
func (b *Broker) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.changed
}

// Pending is a set of submitted commands whose results are not in yet.
type Pending struct {
	r   *request
	err error // set when the commands never reached the queue
}

// Enqueue queues cmds for ordering and returns at once (blocking only while
// the queue is full, which pushes back on the caller). Commands that fail
// fsm.CheckCommand are answered at once and never ordered, so one bad
// command cannot spoil the transaction it would have shared with others.
// Commands queued by one goroutine are ordered in the order queued.
func (b *Broker) Enqueue(ctx context.Context, cmds ...fsm.Command) *Pending {
	r := &request{cmds: cmds, results: make([]fsm.Result, len(cmds)), errs: make([]error, len(cmds)), done: make(chan struct{})}
	var valid []int
	for i, c := range cmds {
		if res := fsm.CheckCommand(c); res.Code != 0 {
			r.results[i] = res
			continue
		}
		valid = append(valid, i)
	}
	r.left = len(valid)
	if r.left == 0 {
		close(r.done)
		return &Pending{r: r}
	}
	r.valid = valid
	select {
	case b.queue <- r:
		return &Pending{r: r}
	case <-ctx.Done():
		return &Pending{r: r, err: ctx.Err()}
	case <-b.stop:
		return &Pending{r: r, err: ErrClosed}
	}
}

// Wait returns one result per command once the block holding it is
// committed. A per-command error means the command's fate is unknown or it
// was never ordered (ctx ended, orderer refused, shutting down); a Result
// with a non-zero Code means it was ordered and rejected, or refused before
// ordering.
func (p *Pending) Wait(ctx context.Context) ([]fsm.Result, []error) {
	if p.err != nil {
		return p.r.abandon(p.err)
	}
	select {
	case <-p.r.done:
		return p.r.results, p.r.errs
	case <-ctx.Done():
		return p.r.abandon(ctx.Err())
	}
}

// Submit is Enqueue then Wait.
func (b *Broker) Submit(ctx context.Context, cmds ...fsm.Command) ([]fsm.Result, []error) {
	return b.Enqueue(ctx, cmds...).Wait(ctx)
}

// SubmitOne is Submit for a single command, folding an error into the result.
func (b *Broker) SubmitOne(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	res, errs := b.Submit(ctx, c)
	if errs[0] != nil {
		return fsm.Result{}, errs[0]
	}
	return res[0], nil
}

// abandon answers for a request given up on before its results came: the
// results of commands refused up front, err for each command that was
// queued. It copies, since the queued commands' results may still arrive.
func (r *request) abandon(err error) ([]fsm.Result, []error) {
	errs := make([]error, len(r.cmds))
	results := make([]fsm.Result, len(r.cmds))
	queued := map[int]bool{}
	for _, i := range r.valid {
		errs[i] = err
		queued[i] = true
	}
	for i := range r.cmds {
		if !queued[i] {
			results[i] = r.results[i]
		}
	}
	return results, errs
}

// finish records a command's outcome. Callers hold b.mu or own r exclusively.
func (r *request) finish(idx int, res fsm.Result, err error) {
	r.results[idx], r.errs[idx] = res, err
	r.left--
	if r.left == 0 {
		close(r.done)
	}
}

// submitLoop is the group commit: whatever requests are queued when it looks
// go into as few transactions as fit MaxTxBytes.
func (b *Broker) submitLoop() {
	defer b.wg.Done()
	for {
		var first *request
		select {
		case first = <-b.queue:
		case <-b.release:
			b.releaseHeld()
			continue
		case <-b.stop:
			return
		}
		reqs := []*request{first}
	drain:
		for len(reqs) < 4096 {
			select {
			case r := <-b.queue:
				reqs = append(reqs, r)
			default:
				break drain
			}
		}
		b.submitBatch(reqs)
	}
}

// submitBatch packs the requests' commands into transactions and submits
// them: each tenant's produce commands in transactions of their own, and
// the commands without records in theirs (fair.go's classes), in the
// order the classes first come; while tenants contend, a tenant's
// transactions are at most Options.TenantShare bytes.
func (b *Broker) submitBatch(reqs []*request) {
	type pack struct {
		tx    fsm.Tx
		slots []slot
		size  int
	}
	var (
		order []string
		packs = map[string]*pack{}
		limit = b.opts.MaxTxBytes - 64
	)
	for _, r := range reqs {
		for _, i := range r.valid {
			if class := commandClass(r.cmds[i]); packs[class] == nil {
				packs[class] = &pack{}
				order = append(order, class)
			}
		}
	}
	share := limit
	if b.opts.TenantShare > 0 {
		now := time.Now()
		for _, class := range order {
			b.fair.saw(class, now)
		}
		if b.fair.contended(now) && b.opts.TenantShare < int64(share) {
			share = int(b.opts.TenantShare)
		}
	}
	flush := func(class string, p *pack) {
		if len(p.tx.Commands) > 0 {
			b.send(p.tx, p.slots, class)
		}
		p.tx, p.slots, p.size = fsm.Tx{}, nil, 0
	}
	for _, r := range reqs {
		for _, i := range r.valid {
			c := r.cmds[i]
			n := commandSize(c)
			if n > limit {
				b.mu.Lock()
				r.finish(i, fsm.Result{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, limit))
				b.mu.Unlock()
				continue
			}
			class := commandClass(c)
			p := packs[class]
			max := limit
			if isTenantClass(class) {
				max = share
			}
			if p.size > 0 && p.size+n > max {
				flush(class, p)
			}
			p.tx.Commands = append(p.tx.Commands, c)
			p.slots = append(p.slots, slot{r, i})
			p.size += n
		}
	}
	for _, class := range order {
		flush(class, packs[class])
	}
}

func commandSize(c fsm.Command) int {
	if p, ok := c.(fsm.Produce); ok {
		return len(p.Records) + len(p.Topic) + 24
	}
	return 256
}

// send submits a transaction of class (fair.go), or holds it back while
// its tenant has its fill in ordering. It runs on the submit loop only.
func (b *Broker) send(tx fsm.Tx, slots []slot, class string) {
	if _, err := rand.Read(tx.Nonce[:]); err != nil {
		b.failSlots(slots, err)
		return
	}
	raw := fsm.EncodeTx(tx)
	in := &inflight{slots: slots, class: class, size: int64(len(raw))}
	if b.hold(tx, raw, in) {
		return
	}
	b.dispatch(tx, raw, in)
}

// dispatch registers a transaction counted in its flow as waiting and
// hands it to certification or the orderer.
func (b *Broker) dispatch(tx fsm.Tx, raw []byte, in *inflight) {
	in.submitted = time.Now()
	b.mu.Lock()
	b.mu.waiting[tx.Nonce] = in
	b.mu.Unlock()
	if b.opts.Certifier != nil {
		b.certify(tx, raw, in.class)
		return
	}
	b.order(tx, raw)
}

// order hands a transaction (inline, or a certificate of one) to the
// orderer, failing its callers if the orderer refuses it.
func (b *Broker) order(tx fsm.Tx, raw []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.orderer.Submit(ctx, raw); err != nil {
		b.abort(tx, orderingError(err))
		return
	}
	b.metrics.txs.Inc()
	b.metrics.txBytes.Add(float64(len(raw)))
}

// orderingError translates an orderer's refusal into the broker's own
// sentinels, so that front-ends test errors.Is against broker errors and
// never import internal/consensus. The orderer's error stays wrapped.
func orderingError(err error) error {
	switch {
	case errors.Is(err, consensus.ErrMempoolFull):
		return fmt.Errorf("%w: %w", ErrMempoolFull, err)
	case errors.Is(err, consensus.ErrStopped):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, fsm.ErrCertificate):
		// The validator set changed between the certificate and its
		// admission (a signer demoted, removed or voted out; fsm/
		// cluster's membership.go): certifying it again is the cure.
		return fmt.Errorf("%w: %w", ErrUncertified, err)
	}
	return fmt.Errorf("ordering: %w", err)
}

// abort fails the callers of a transaction that will not be ordered.
func (b *Broker) abort(tx fsm.Tx, err error) {
	b.mu.Lock()
	in, still := b.mu.waiting[tx.Nonce]
	if still {
		delete(b.mu.waiting, tx.Nonce)
		b.doneLocked(in)
	}
	b.mu.Unlock()
	if still {
		b.opts.Logger.Warn("a transaction was not ordered", "commands", len(tx.Commands), "err", err)
		b.failSlots(in.slots, err)
	}
}

// certify certifies a transaction in the background and orders it after
// the transactions of its class (fair.go) made before it, so a tenant's
// transactions are ordered in the order they were made while one tenant's
// slow certifications do not hold up another's. It waits while
// MaxCertifying are being certified or waiting for their turn, which
// pushes back on the submit loop and so on Enqueue. It runs on the submit
// loop only.
func (b *Broker) certify(tx fsm.Tx, raw []byte, class string) {
	select {
	case b.certSlots <- struct{}{}:
	case <-b.stop:
		b.abort(tx, ErrClosed)
		return
	}
	prev := b.lastCert[class]
	turn := make(chan struct{})
	b.lastCert[class] = turn
	if len(b.lastCert) > 64 {
		for c, ch := range b.lastCert {
			select {
			case <-ch:
				delete(b.lastCert, c)
			default:
			}
		}
	}
	go func() {
		defer func() { <-b.certSlots }()
		defer close(turn)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cert, err := b.opts.Certifier.Certify(ctx, raw)
		if prev != nil {
			select {
			case <-prev:
			case <-b.stop:
				b.abort(tx, ErrClosed)
				return
			}
		}
		select {
		case <-b.stop:
			b.abort(tx, ErrClosed)
			return
		default:
		}
		if err != nil {
			b.abort(tx, fmt.Errorf("%w: %v", ErrUncertified, err))
			return
		}
		b.mu.Lock()
		b.mu.byBatch[cert.Digest] = tx.Nonce
		b.mu.Unlock()
		b.order(tx, fsm.EncodeCertifiedTx(cert))
	}()
}

func (b *Broker) failSlots(slots []slot, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range slots {
		s.req.finish(s.idx, fsm.Result{}, err)
	}
}

// Liveness returns the validators seen signing blocks and the block time of
// the last commit (see fsm.FSM.Liveness).
func (b *Broker) Liveness() ([]fsm.Signer, int64) { return b.fsm.Liveness() }

// Validators returns the validator set as of the last commit (nil for a
// broker without one): the genesis set less any validator the chain
// voted out (fsm/cluster's membership.go).
func (b *Broker) Validators() *fsm.ValidatorSet { return b.fsm.CommittedValidators() }

// Members returns the membership as of the last commit, shared (read it,
// never change it): a new value after each change (fsm.Members): the
// validator records and the broker directory (the genesis brokers with
// the keys the chain rotated them to, then those it added; fsm/cluster's
// directory.go).
func (b *Broker) Members() *fsm.Members { return b.fsm.Members() }

// Removed returns the validators the chain took out of the cluster
// (stele cluster remove), as of the last commit; nil when none.
func (b *Broker) Removed() map[[20]byte]bool {
	var out map[[20]byte]bool
	for _, r := range b.fsm.ValidatorRecords() {
		if r.Reason == fsm.ReasonRemoved {
			if out == nil {
				out = map[[20]byte]bool{}
			}
			out[r.Address] = true
		}
	}
	return out
}
