package cometbft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"

	dbm "github.com/cometbft/cometbft-db"
	abcicli "github.com/cometbft/cometbft/abci/client"
	abci "github.com/cometbft/cometbft/abci/types"
	cmtcfg "github.com/cometbft/cometbft/config"
	mempl "github.com/cometbft/cometbft/mempool"
	"github.com/cometbft/cometbft/node"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/proxy"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/consensus"
)

// ErrNotStarted is returned by Submit before Start has succeeded.
var ErrNotStarted = errors.New("stele/consensus/cometbft: orderer not started")

// ErrRejected is wrapped, together with the application's own error, by
// Submit when CheckTx refuses a transaction.
var ErrRejected = errors.New("stele/consensus/cometbft: transaction rejected")

// ErrTxTooLarge is returned by Submit for a transaction larger than the
// mempool or a block admits.
var ErrTxTooLarge = errors.New("stele/consensus/cometbft: transaction too large")

// ErrDuplicateTx is returned by Submit for a transaction whose exact bytes
// are pending or were recently seen (CometBFT's mempool cache). Callers
// make their transactions unique (a nonce) rather than resubmit the same
// bytes.
var ErrDuplicateTx = errors.New("stele/consensus/cometbft: duplicate transaction")

// Orderer runs a CometBFT node in-process with the application as its
// ABCI++ application. It implements consensus.Orderer.
type Orderer struct {
	cfg    Config
	app    consensus.Application
	logger *slog.Logger

	// submitMu serialises Submit. CometBFT's mempool checks its limits
	// before CheckTx and again after; a transaction that passes the first
	// check and fails the second is dropped while CheckTx reports success.
	// With local submissions serialised only peers' gossip can still race
	// that way. CheckTx calls are serialised by CometBFT anyway.
	submitMu sync.Mutex

	// lifeMu is held for the whole of Start and Stop, so Stop waits for a
	// Start in progress. Lock order: lifeMu, then mu; submitMu is never
	// held with either.
	lifeMu sync.Mutex

	mu struct {
		sync.Mutex
		state   int // one of the state* constants
		node    *node.Node
		abci    *abciApp
		cleanup *resources
	}
}

const (
	stateNew = iota
	stateRunning
	stateStopped
)

var _ consensus.Orderer = (*Orderer)(nil)

// New returns an orderer for app with configuration cfg; nothing runs
// until Start. A nil logger discards everything.
func New(cfg Config, app consensus.Application, logger *slog.Logger) (*Orderer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if app == nil {
		return nil, errors.New("stele/consensus/cometbft: nil application")
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Orderer{cfg: cfg, app: app, logger: logger}, nil
}

// Start builds the node from the home Init wrote, performs CometBFT's
// handshake (Info, then replay of every stored block the application lacks,
// or InitChain for a fresh application), and starts consensus and the
// peer-to-peer layer. It returns once the node runs. ctx bounds the
// handshake; the node itself runs until Stop.
func (o *Orderer) Start(ctx context.Context) error {
	o.lifeMu.Lock()
	defer o.lifeMu.Unlock()
	o.mu.Lock()
	state := o.mu.state
	o.mu.Unlock()
	switch state {
	case stateStopped:
		return consensus.ErrStopped
	case stateRunning:
		return errors.New("stele/consensus/cometbft: Start called twice")
	}

	n, a, res, err := o.build(ctx)
	if err == nil {
		if err = n.Start(); err != nil {
			err = fmt.Errorf("stele/consensus/cometbft: starting node: %w", err)
			o.undoFailedStart(n)
		}
	}
	if err != nil {
		res.release()
		return err
	}
	pushCtx, stopPush := context.WithCancel(context.Background())
	startVotePush(pushCtx, n, o.logger.With("module", "push"))
	res.stopPush = stopPush
	o.mu.Lock()
	o.mu.state, o.mu.node, o.mu.abci, o.mu.cleanup = stateRunning, n, a, res
	o.mu.Unlock()
	o.logger.Info("cometbft node started", "home", o.cfg.Home, "p2p", o.cfg.P2PListen,
		"node_id", n.NodeInfo().ID(), "height", n.BlockStore().Height())
	return nil
}

// undoFailedStart closes what a node whose Start failed still holds. A
// failed Start leaves the node "not started", so Stop would not run OnStop;
// OnStop is run directly, guarded because parts of it may already have been
// undone by Start's own cleanup.
func (o *Orderer) undoFailedStart(n *node.Node) {
	defer func() {
		if r := recover(); r != nil {
			o.logger.Warn("cleaning up after a failed node start", "panic", r)
		}
	}()
	n.OnStop()
}

// build makes the node; it returns the resources to release on failure.
func (o *Orderer) build(ctx context.Context) (*node.Node, *abciApp, *resources, error) {
	res := &resources{}
	doc, st, err := ReadGenesis(o.cfg.Home)
	if err != nil {
		return nil, nil, res, err
	}
	cc := o.cfg.cometConfig(st.MaxTxBytes)
	if err := cc.ValidateBasic(); err != nil {
		return nil, nil, res, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	nodeKey, err := p2p.LoadNodeKey(filepath.Join(o.cfg.Home, nodeKeyFile))
	if err != nil {
		return nil, nil, res, fmt.Errorf("%w: node key: %v", ErrNotInitialised, err)
	}
	pv, err := loadFilePV(o.cfg.Home)
	if err != nil {
		return nil, nil, res, err
	}
	syncOpts, err := o.stateSyncOptions(ctx, doc, cc)
	if err != nil {
		return nil, nil, res, err
	}
	// module=, as CometBFT names its own parts: the logger already says
	// component=cometbft, and a second component= would repeat the key.
	a := newABCIApp(o.app, st.MaxTxBytes, o.logger.With("module", "abci"))
	if a.headers, err = openHeaderArchive(o.cfg.Home); err != nil {
		return nil, nil, res, err
	}
	res.headers = a.headers
	committed := func() int64 { h, _ := o.app.Info(); return h }
	signer, err := newRotatingSigner(o.cfg.Home, pv, o.cfg.KeyRotation, committed, o.cfg.OnKey, o.logger.With("module", "privval"))
	if err != nil {
		return nil, nil, res, err
	}
	n, err := node.NewNodeWithContext(ctx, cc, byzantineSigner(signer), nodeKey,
		res.clientCreator(proxy.NewConnSyncLocalClientCreator(a)),
		func() (*types.GenesisDoc, error) { return doc, nil },
		res.dbProvider(cmtcfg.DefaultDBProvider),
		node.DefaultMetricsProvider(cc.Instrumentation),
		haltingLogger(newCometLogger(o.logger), func(err error) { a.fail(err) }),
		syncOpts...,
	)
	if err != nil {
		return nil, nil, res, fmt.Errorf("stele/consensus/cometbft: starting node: %w", err)
	}
	if mp, ok := n.Mempool().(txRemover); ok {
		a.mempool.Store(&mp)
	}
	a.blocks.Store(n.BlockStore())
	var ws waitSyncer = n.ConsensusReactor()
	a.syncer.Store(&ws)
	return n, a, res, nil
}

// Submit puts tx into the node's mempool after the application's CheckTx.
// A nil error means tx was admitted; the application learns of its commit
// through FinalizeBlock and Commit. A full mempool gives
// consensus.ErrMempoolFull; a CheckTx refusal an error wrapping both
// ErrRejected and the application's error. Submit keeps its own copy of tx.
func (o *Orderer) Submit(ctx context.Context, tx []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.mu.Lock()
	state, n, a := o.mu.state, o.mu.node, o.mu.abci
	o.mu.Unlock()
	switch state {
	case stateStopped:
		return consensus.ErrStopped
	case stateNew:
		return ErrNotStarted
	}
	if err := a.err(); err != nil {
		return err
	}

	tx = append([]byte(nil), tx...)
	key := types.Tx(tx).Key()
	o.submitMu.Lock()
	defer o.submitMu.Unlock()
	a.waiting.Store(key, nil)
	defer a.waiting.Delete(key)

	resCh := make(chan *abci.ResponseCheckTx, 1)
	err := n.Mempool().CheckTx(tx, func(r *abci.ResponseCheckTx) { resCh <- r }, mempl.TxInfo{})
	if err != nil {
		return mapMempoolError(err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case r := <-resCh:
		if r.Code == abci.CodeTypeOK {
			return nil
		}
		if v, ok := a.waiting.Load(key); ok && v != nil {
			return fmt.Errorf("%w: %w", ErrRejected, v.(error))
		}
		if r.Code == CodeTooLarge {
			return fmt.Errorf("%w: %s", ErrTxTooLarge, r.Log)
		}
		return fmt.Errorf("%w: code %d: %s", ErrRejected, r.Code, r.Log)
	}
}

// mapMempoolError turns CometBFT's mempool errors into Stele's.
func mapMempoolError(err error) error {
	var full mempl.ErrMempoolIsFull
	var large mempl.ErrTxTooLarge
	switch {
	case errors.As(err, &full), errors.Is(err, mempl.ErrRecheckFull):
		return fmt.Errorf("%w: %v", consensus.ErrMempoolFull, err)
	case errors.As(err, &large), mempl.IsPreCheckError(err):
		return fmt.Errorf("%w: %v", ErrTxTooLarge, err)
	case errors.Is(err, mempl.ErrTxInCache):
		return ErrDuplicateTx
	}
	return fmt.Errorf("stele/consensus/cometbft: mempool: %w", err)
}

// Err returns the application failure that halted consensus, if any.
func (o *Orderer) Err() error {
	o.mu.Lock()
	a := o.mu.abci
	o.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.err()
}

// Node returns the running CometBFT node (nil before Start and after Stop),
// for status and for tests. Callers must not stop it themselves.
func (o *Orderer) Node() *node.Node {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.state != stateRunning {
		return nil
	}
	return o.mu.node
}

// Stop stops the node and waits for it (and for a Start in progress). Stop
// may be called more than once and at any time; an orderer cannot be
// started again.
func (o *Orderer) Stop() error {
	o.lifeMu.Lock()
	defer o.lifeMu.Unlock()
	o.mu.Lock()
	prev, n, res := o.mu.state, o.mu.node, o.mu.cleanup
	o.mu.state, o.mu.node, o.mu.cleanup = stateStopped, nil, nil
	o.mu.Unlock()
	if prev == stateRunning {
		o.stopNode(n, res)
	}
	return nil
}

// stopNode stops a started node, its ABCI clients and its stores.
func (o *Orderer) stopNode(n *node.Node, res *resources) {
	if res.stopPush != nil {
		res.stopPush()
	}
	if err := n.Stop(); err != nil {
		o.logger.Warn("stopping cometbft node", "err", err)
	}
	n.Wait()
	res.release()
	o.logger.Info("cometbft node stopped", "home", o.cfg.Home)
}

// resources records what a node opens so that a failed start, which
// CometBFT does not undo, and a stop release it all: the ABCI clients
// (whose watcher goroutine outlives the node otherwise) and the databases
// (whose file locks would make the next start on the home fail).
type resources struct {
	stopPush context.CancelFunc // ends the vote pusher (push.go)
	mu       sync.Mutex
	clients  []abcicli.Client
	dbs      []dbm.DB
	headers  *headerArchive
}

type clientCreatorFunc func() (abcicli.Client, error)

func (f clientCreatorFunc) NewABCIClient() (abcicli.Client, error) { return f() }

func (r *resources) clientCreator(cc proxy.ClientCreator) proxy.ClientCreator {
	return clientCreatorFunc(func() (abcicli.Client, error) {
		c, err := cc.NewABCIClient()
		if err == nil {
			r.mu.Lock()
			r.clients = append(r.clients, c)
			r.mu.Unlock()
		}
		return c, err
	})
}

func (r *resources) dbProvider(p cmtcfg.DBProvider) cmtcfg.DBProvider {
	return func(ctx *cmtcfg.DBContext) (dbm.DB, error) {
		db, err := p(ctx)
		if err != nil {
			return nil, err
		}
		w := &stoppedDB{DB: db}
		r.mu.Lock()
		r.dbs = append(r.dbs, w)
		r.mu.Unlock()
		return w, nil
	}
}

// release stops the clients and closes the databases; closing one twice
// (the node closes most of them itself) is harmless.
func (r *resources) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		if c.IsRunning() {
			_ = c.Stop()
		}
	}
	for _, db := range r.dbs {
		_ = db.Close()
	}
	if r.headers != nil {
		_ = r.headers.close()
	}
	r.clients, r.dbs, r.headers = nil, nil, nil
}
