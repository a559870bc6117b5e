// Package dataplane is Stele's certified data plane (DESIGN.md §4): record
// bytes travel between brokers over their own HTTP connections, and only
// certificates — a batch's digest signed by validators that stored it —
// are ordered by CometBFT.
//
// The broker that receives produce requests encodes them as one fsm
// transaction (the payload) and calls Certify: the payload is stored durably
// (Store), signed, and pushed to every other validator, which stores it,
// fsyncs and answers with its own signature. Once the signers hold more than
// a third of the voting power, at least one of them is honest and keeps the
// bytes: that is a certificate (fsm.Certificate), and Certify returns it.
// When the state machine applies a certificate it reads the payload through
// Batch, which serves it from the local store or fetches it from one of the
// signers and checks it against the digest. Prefetch, called with a block's
// transactions before it is applied, fetches the block's missing batches
// several at once, each attempt with its own deadline (fetch.go).
//
// Every goroutine the plane starts (pushes, fetches) derives from its
// lifetime context and is waited for by Close.
//
// dataplane imports fsm (certificates, validator sets, payload checks) and
// storage-free standard packages; broker and server import dataplane.
package dataplane

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// Errors of the data plane.
var (
	ErrClosed       = errors.New("stele/dataplane: closed")
	ErrNotCertified = errors.New("stele/dataplane: not enough validators stored the batch")
	ErrNotValidator = errors.New("stele/dataplane: this broker's key is not in the validator set")
)

// Peer is another broker's data plane endpoint.
type Peer struct {
	Validator [20]byte
	// URL is the peer's HTTP base URL, "http://host:port".
	URL string
	// PubKey is the broker's validator key as the directory names it
	// (Options.Directory): a genesis broker's, one the chain added, or
	// one it rotated in.
	PubKey ed25519.PublicKey
}

// Options configures a Plane.
type Options struct {
	Store *Store
	// Key is this broker's validator key: a genesis validator's, or (with
	// Directory set) one the chain added or rotated in. SetKey replaces it
	// when the chain rotates it.
	Key ed25519.PrivateKey
	// Validators are the genesis validators: who the brokers of the
	// cluster are (what authenticates a request, and whose signature a
	// peer's answer must carry).
	Validators *fsm.ValidatorSet
	// Current returns the validator set as of the last commit, as the
	// chain's membership changed it (fsm's CommittedValidators): whose
	// signatures count toward a certificate, with what power, and who may
	// push a batch to be signed. Nil (or a nil set) means Validators.
	Current func() *fsm.ValidatorSet
	// Peers are the other genesis brokers' endpoints.
	Peers []Peer
	// Directory returns the other brokers of the directory as of the last
	// commit (fsm/cluster's directory.go), with their keys: the genesis
	// brokers with their current keys and those the chain added, less the
	// ones taken out. Nil, or nil returned: Peers. It is called for every
	// push and request, so it returns a value computed once per change.
	// Their signed requests authenticate as the genesis brokers' do.
	Directory func() []Peer
	// KeyOf, when set, returns the key of a broker the chain has named at
	// validator address addr (of the directory, or in the chain's records,
	// taken out or not): what authenticates its requests. A broker taken
	// out still fetches what it needs to apply the blocks up to the one
	// that took it out; Excluded refuses its pushes. Nil: the keys of
	// Directory.
	KeyOf func(addr [20]byte) (ed25519.PublicKey, bool)
	// Excluded reports whether the chain took the broker with this
	// validator address out of the cluster (removed, or voted out for
	// misbehavior): its pushes are refused and it certifies nothing. Nil:
	// only validators' pushes are signed.
	Excluded func(validator [20]byte) bool
	// Height returns the last committed height: a new batch's height, and
	// the reference for accepting pushed ones.
	Height func() int64
	// ChainID is the chain's id (CometBFT's genesis chain_id). Bound
	// reports whether certificates made now must name it (fsm:
	// FSM.CertificatesBound, app version 2 on); nil means never. A broker
	// then signs pushed batches only for this chain, and one that names
	// none only while certificates are not bound: a signature that names no
	// chain would verify on any chain whose validators share its key.
	ChainID string
	Bound   func() bool
	// Check admits a pushed payload before it is stored and signed
	// (fsm.Precheck): a broker certifies only well-formed batches.
	Check func(payload []byte) error
	// MaxBatchBytes bounds one payload. Default 16 MiB.
	MaxBatchBytes int
	// MaxPushBytes bounds the payload bytes being pushed to peers at once;
	// Certify waits (back-pressure) beyond it. Default 256 MiB.
	MaxPushBytes int64
	// RecentBytes bounds the payloads kept in memory between being stored
	// and being applied (recent.go). Default 128 MiB, what the broker's 8
	// transactions being certified at once can hold.
	RecentBytes int64
	// RetainHeights is how many heights past a certificate's window its
	// batch is kept for peers that apply it late (block-syncing).
	// Default 10000, the blocks a broker keeps.
	RetainHeights int64
	// PushTimeout bounds one push to one peer. Default 10 s.
	PushTimeout time.Duration
	// FetchTimeout bounds one attempt to fetch a batch from one peer; the
	// next peer is asked after it. Default 10 s, what a push of the same
	// bytes may take.
	FetchTimeout time.Duration
	// FetchParallel bounds the batches of one block fetched at once in
	// the background (Prefetch); Batch may fetch one more itself, one whose
	// fetch had not started. Default 4.
	FetchParallel int
	// Blocks returns the transactions of the committed block at a height,
	// if this broker holds it: what a peer catching up asks for to fetch
	// the next blocks' batches ahead (ahead.go). Nil: none is served.
	Blocks  func(height int64) (txs [][]byte, ok bool)
	Client  *http.Client
	Logger  *slog.Logger
	Metrics *Metrics
}

func (o *Options) setDefaults() {
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 16 << 20
	}
	if o.RecentBytes <= 0 {
		o.RecentBytes = 128 << 20
	}
	if o.MaxPushBytes <= 0 {
		o.MaxPushBytes = 256 << 20
	}
	if o.RetainHeights <= 0 {
		o.RetainHeights = 10000
	}
	if o.PushTimeout <= 0 {
		o.PushTimeout = 10 * time.Second
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = 10 * time.Second
	}
	if o.FetchParallel <= 0 {
		o.FetchParallel = 4
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Check == nil {
		o.Check = fsm.Precheck
	}
}

// Plane is one broker's data plane.
type Plane struct {
	opts   Options
	self   atomic.Pointer[identity]
	sem    *byteSemaphore
	recent *recentBatches
	// ctx is the plane's lifetime: every request to a peer and every
	// background push or fetch derives from it, and Close cancels it, then
	// waits for them (wg).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// fetching holds the background fetches of the block being applied
	// (fetch.go). Its lock is taken before the recent batches' and the
	// store's, never while they are held.
	fetching fetches
	// ahead holds the fetches started for the next blocks while catching
	// up (ahead.go).
	ahead ahead
}

// New checks opts and returns a Plane. Its HTTP side is Handler, to be
// mounted on the broker's HTTP listener.
func New(opts Options) (*Plane, error) {
	opts.setDefaults()
	if opts.Store == nil || opts.Height == nil || opts.Validators == nil || len(opts.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("stele/dataplane: a store, a height function, a validator set and a key are required")
	}
	self := identityOf(opts.Key)
	if _, ok := opts.Validators.Lookup(self.address); !ok && opts.Directory == nil {
		// Without a directory only the genesis validators are brokers. A
		// broker the chain added (or is about to, or rotated in) signs
		// with its own key, and counts once the chain's set holds it.
		return nil, fmt.Errorf("%w: %X", ErrNotValidator, self.address)
	}
	p := &Plane{opts: opts, sem: newByteSemaphore(opts.MaxPushBytes), recent: newRecentBatches(opts.RecentBytes)}
	p.self.Store(self)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.fetching.jobs = map[fsm.Digest]*fetchJob{}
	p.ahead.releases = map[int64]func(){}
	return p, nil
}

// Close stops background pushes and fetches and waits for them; Batch
// then fails with ErrClosed. The store is closed by its owner.
func (p *Plane) Close() {
	p.fetching.Lock()
	p.fetching.closed = true
	p.fetching.Unlock()
	p.cancel()
	p.wg.Wait()
}

// spawn runs f in a goroutine that Close waits for, unless the plane is
// closed (then it reports false and f does not run).
func (p *Plane) spawn(f func()) bool {
	p.fetching.Lock()
	defer p.fetching.Unlock()
	if p.fetching.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// Certify stores payload, has it stored and signed by other validators, and
// returns its certificate once the signers hold more than a third of the
// voting power. Pushes to the peers that had not answered by then go on in
// the background, so that most brokers hold the batch before it is applied.
func (p *Plane) Certify(ctx context.Context, payload []byte) (fsm.Certificate, error) {
	if len(payload) == 0 || len(payload) > p.opts.MaxBatchBytes {
		return fsm.Certificate{}, fmt.Errorf("stele/dataplane: a batch of %d bytes (at most %d)", len(payload), p.opts.MaxBatchBytes)
	}
	start := time.Now()
	vs := p.current()
	me := p.self.Load()
	if p.opts.Excluded != nil && p.opts.Excluded(me.address) {
		// The chain took this broker out (removed, or voted out for
		// misbehavior, or its key rotated out: fsm/cluster's
		// membership.go): no other broker signs its batches.
		return fsm.Certificate{}, fmt.Errorf("%w: the chain took this broker's validator %X out of the cluster", ErrNotCertified, me.address)
	}
	// A replica (added, or demoted) does not sign: its signature would
	// void the certificate. The validators' signatures make it.
	self, validator := vs.Lookup(me.address)
	height := p.opts.Height()
	d, err := p.opts.Store.Put(payload, height)
	if err != nil {
		return fsm.Certificate{}, err
	}
	p.recent.put(d, payload)
	c := fsm.Certificate{Digest: d, Size: uint32(len(payload)), Height: height}
	if p.bound() {
		c.Chain = p.opts.ChainID
	}
	var power int64
	if validator {
		c.Sigs = append(c.Sigs, me.sign(c))
		power = self.Power
	}
	peers := p.peers()
	if len(peers) == 0 {
		if !vs.Enough(power) {
			return fsm.Certificate{}, fmt.Errorf("%w: no peers to ask", ErrNotCertified)
		}
		p.opts.Metrics.certified.Inc()
		p.opts.Metrics.certifySeconds.Observe(time.Since(start).Seconds())
		return c, nil
	}
	if err := p.sem.acquire(ctx, int64(len(payload)), p.ctx.Done()); err != nil {
		return fsm.Certificate{}, err
	}
	sigs := make(chan fsm.CertSig, len(peers))
	var pushes sync.WaitGroup
	// The pushes get the certificate without signatures, so that they do
	// not read c while the loop below adds to it.
	unsigned := fsm.Certificate{Chain: c.Chain, Digest: c.Digest, Size: c.Size, Height: c.Height}
	for _, peer := range peers {
		pushes.Add(1)
		if !p.spawn(func() {
			defer pushes.Done()
			if s, err := p.push(peer, unsigned, payload); err != nil {
				p.opts.Metrics.pushErrors.Inc()
				p.opts.Logger.Debug("push failed", "peer", peer.URL, "err", err)
			} else {
				sigs <- s
			}
		}) {
			pushes.Done() // closed: the select below returns ErrClosed
		}
	}
	all := make(chan struct{})
	go func() {
		pushes.Wait()
		p.sem.release(int64(len(payload)))
		close(all)
	}()
	add := func(s fsm.CertSig) {
		v, ok := vs.Lookup(s.Validator)
		if !ok {
			// Removed from the set since (fsm/cluster's membership.go):
			// the state machine refuses a certificate carrying its
			// signature.
			return
		}
		c.Sigs = append(c.Sigs, s)
		power += v.Power
	}
	for !vs.Enough(power) {
		select {
		case s := <-sigs:
			add(s)
		case <-all:
			// Every push ended; take the signatures that arrived last.
			for len(sigs) > 0 {
				add(<-sigs)
			}
			if !vs.Enough(power) {
				return fsm.Certificate{}, fmt.Errorf("%w: %d of %d validators signed", ErrNotCertified, len(c.Sigs), len(peers)+1)
			}
		case <-ctx.Done():
			return fsm.Certificate{}, ctx.Err()
		case <-p.ctx.Done():
			return fsm.Certificate{}, ErrClosed
		}
	}
	p.opts.Metrics.certified.Inc()
	p.opts.Metrics.certifySeconds.Observe(time.Since(start).Seconds())
	return c, nil
}

// peers are the other brokers: the directory's as of the last commit, or
// the genesis peers.
func (p *Plane) peers() []Peer {
	if p.opts.Directory != nil {
		if d := p.opts.Directory(); d != nil {
			return d
		}
	}
	return p.opts.Peers
}

// key returns the public key of the broker at addr: a genesis validator,
// this broker, or one the chain named (Options.KeyOf, or the directory).
func (p *Plane) key(addr [20]byte) (ed25519.PublicKey, bool) {
	if v, ok := p.opts.Validators.Lookup(addr); ok {
		return v.PubKey, true
	}
	if me := p.self.Load(); addr == me.address {
		return me.pub, true
	}
	if p.opts.KeyOf != nil {
		return p.opts.KeyOf(addr)
	}
	if p.opts.Directory != nil {
		for _, a := range p.opts.Directory() {
			if a.Validator == addr && len(a.PubKey) == ed25519.PublicKeySize {
				return a.PubKey, true
			}
		}
	}
	return nil, false
}

// identity is the key this broker signs with, and its validator address.
type identity struct {
	key     ed25519.PrivateKey
	pub     ed25519.PublicKey
	address [20]byte
}

func identityOf(key ed25519.PrivateKey) *identity {
	pub := key.Public().(ed25519.PublicKey)
	return &identity{key: key, pub: pub, address: [20]byte(addressOf(pub))}
}

// SetKey makes key this broker's validator key from now on: the chain
// rotated its key (fsm/cluster's directory.go), and checks certificates
// against the new one at once.
func (p *Plane) SetKey(key ed25519.PrivateKey) {
	p.self.Store(identityOf(key))
}

// Self is the validator address this broker signs as.
func (p *Plane) Self() [20]byte { return p.self.Load().address }

func (p *Plane) current() *fsm.ValidatorSet {
	if p.opts.Current != nil {
		if vs := p.opts.Current(); vs != nil {
			return vs
		}
	}
	return p.opts.Validators
}

// bound reports whether certificates made now name the chain.
func (p *Plane) bound() bool { return p.opts.Bound != nil && p.opts.Bound() }

// sign signs c's statement with this broker's key.
func (p *Plane) sign(c fsm.Certificate) fsm.CertSig { return p.self.Load().sign(c) }

func (me *identity) sign(c fsm.Certificate) fsm.CertSig {
	s := fsm.CertSig{Validator: me.address}
	copy(s.Signature[:], ed25519.Sign(me.key, c.Statement()))
	return s
}

// Prune drops the stored batches that no certificate can still need: those
// made more than CertWindow + RetainHeights before committed.
func (p *Plane) Prune(committed int64) {
	below := committed - fsm.CertWindow - p.opts.RetainHeights
	if below <= 0 {
		return
	}
	if n, err := p.opts.Store.Prune(below); err != nil {
		p.opts.Logger.Warn("pruning the batch store", "err", err)
	} else if n > 0 {
		p.opts.Logger.Debug("pruned batch segments", "segments", n, "below_height", below)
	}
}

// byteSemaphore bounds the bytes of pushes in flight.
type byteSemaphore struct {
	mu    sync.Mutex
	cap   int64
	used  int64
	freed chan struct{}
}

func newByteSemaphore(capacity int64) *byteSemaphore {
	return &byteSemaphore{cap: capacity, freed: make(chan struct{})}
}

// acquire takes n bytes, waiting while that would exceed the capacity
// (a batch larger than the capacity waits until nothing else is in flight).
func (s *byteSemaphore) acquire(ctx context.Context, n int64, stop <-chan struct{}) error {
	for {
		s.mu.Lock()
		if s.used == 0 || s.used+n <= s.cap {
			s.used += n
			s.mu.Unlock()
			return nil
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrClosed
		}
	}
}

func (s *byteSemaphore) release(n int64) {
	s.mu.Lock()
	s.used -= n
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}
