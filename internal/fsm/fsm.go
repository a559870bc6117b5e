// Package fsm is Stele's replicated state machine: the commands, their
// encoding, Apply, the replicated state (topics, partitions and their logs),
// the authenticated state trie over it (authstate.go) and the app hash.
//
// It is made of a core and modules (topics, keys, groups, producers,
// trust, cluster; registry.go lists what each owns). Every command is
// registered by its module with its decoder, check and apply, and so is
// every step of the core a module takes part in: reading its state back
// from the store at Open, staging the block's changes, publishing at
// Commit. A module registers from its registration function
// (registerTopics, registerKeys, ...), which buildRegistry (registry.go)
// calls in a fixed order to build the one registry, never changed after;
// the package has no init functions and no package-level variable written
// after it is initialised (TestNoMutablePackageState). Each module keeps
// its state in a struct declared in its own files and embedded in FSM
// (topicsState, keysState, groupsState, producersState, trustState,
// clusterState); FSM's named fields are the core's. The modules form layers without a cycle, topics at
// the bottom: a lower module calls an upper one only through the hook
// points it offers (topic_hooks.go), which the upper module registers for,
// in an order of rank; which module may use which is pinned by
// TestModuleLayering and TestLayeringIsADAG (modules_test.go). The core
// is below every module: it runs them only through their registrations
// (commands, steps, block-begin and block-end steps, transaction forms,
// snapshot files) and names them only where it assembles them: their
// types in FSM, Options and the registry, their registration functions in
// buildRegistry. The modules share this package for now.
//
// Apply must be deterministic and produce the same result on all peers: given
// the same sequence of blocks, every broker holds byte-identical partition
// logs, the same state and the same app hash. So nothing in this package reads
// the wall clock (time comes with the block), a random source, the
// environment, or iterates a map into anything that reaches output, and there
// is no floating point. A malformed command is rejected with a result, never
// panicked on: under BFT a bad transaction from a Byzantine proposer must not
// halt honest brokers.
//
// Effects of FinalizeBlock (ApplyBlock) stay invisible until Commit: readers
// see the View and the partition offsets published at Commit. Files are
// appended during apply; a crash before Commit is repaired at Open by cutting
// every log back to its committed end, after which the orderer replays the
// block. Destructive file operations (deleting segments or whole logs) run
// only after Commit and are redone at Open if a crash interrupted them.
// Compaction, the one slow file rewrite, is decided in apply and written by
// a background goroutine after Commit (compactor.go): the next housekeeping
// pass over the partition and CaptureSnapshot wait for it, so nothing
// hashed depends on when it finished, and Open reruns a pass a crash
// interrupted from its plan file. Those goroutines and syncLogs' are the
// package's only ones; neither changes the state.
//
// A local I/O or store error is never a result (fault.go, ErrLocalFault):
// ApplyBlock or Commit returns it, the state machine refuses every later
// block, and the broker stops; at the next Open the block is replayed.
//
// fsm imports storage and record, never consensus or a front-end.
package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cometbft/cometbft/crypto/merkle"

	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/pkg/proof"
)

// ErrHeight is returned when a block does not follow the last applied one.
var ErrHeight = errors.New("stele/fsm: block out of order")

// Options configures a state machine. Everything here that influences Apply
// must be the same on every broker of a cluster.
type Options struct {
	// Dir holds the partition logs (Dir/logs) and the metadata store (Dir/meta).
	Dir string
	// HousekeepingIntervalMs is how often, in block time, retention and
	// compaction are evaluated. Default 30000.
	HousekeepingIntervalMs int64
	// Validators checks certified transactions' signatures; nil refuses
	// every certified transaction (inline transactions only).
	Validators *ValidatorSet
	// ChainID is the chain's id (CometBFT's genesis chain_id), the same on
	// every broker of a chain. Upgrade votes are signed for it
	// (UpgradeStatement); empty refuses every upgrade vote.
	ChainID string
	// GenesisAppVersion is the app version the chain's first block is
	// applied under (CometBFT's genesis consensus_params.version.app); 0
	// and 1 both mean version 1, which every chain made before version 2
	// existed runs until it upgrades. It is read only by a state machine
	// that has applied no block; a later one reads the version from its
	// state.
	GenesisAppVersion uint32
	// GenesisUsers are the users the chain starts with (the genesis
	// app_state's, `stele cluster init --admin-password-file`): the
	// security module creates them as it applies the first block, when
	// that block's app version has users (users.go).
	GenesisUsers []GenesisUser
	// Batches reads certified transactions' payloads; required when
	// Validators is set.
	Batches BatchSource
	// OffsetsRetentionMs is offsets.retention.minutes in milliseconds: how
	// long the committed offsets of a group without members are kept.
	// Default 7 days, as Kafka's.
	OffsetsRetentionMs int64
	// WithoutKeyIndex turns the key index off (and with it optimistic
	// concurrency and key snapshots' reads), to measure what the index
	// costs the produce path (BenchmarkProduceKeyIndex). Every broker of a
	// chain must agree on it; nothing outside benchmarks sets it.
	WithoutKeyIndex bool
	// CompactionWorkers is how many compaction passes may rewrite files at
	// once, in the background (compactor.go). Default 1. It changes nothing
	// in the state.
	CompactionWorkers int
	// StoreFS is the file system of the metadata store; nil is the
	// operating system's. Tests inject faults with pebble's errorfs.
	StoreFS vfs.FS
	Logger  *slog.Logger

	// TraceState logs every authenticated key a block writes or deletes,
	// with a hash of its value, to compare brokers that diverged
	// (STELE_TRACE_STATE=1 on stele serve). Values themselves are not
	// logged.
	TraceState bool

	// rewordForTest, when set, rewrites every result message and log
	// before they leave ApplyBlock: the test that nothing hashed depends
	// on message text (TestMessagesAreNotHashed).
	rewordForTest func(string) string
	// passHookForTest, when set, runs on a compaction's goroutine before
	// the pass: tests delay or hold passes with it.
	passHookForTest func(topic string, partition int32)
	// maxAppVersionForTest, when set, stands for MaxAppVersion: a test
	// runs an old binary and a new one in one process (upgrade_test.go).
	maxAppVersionForTest uint32
}

// digestDomain opens the block digest of app version 1; its version is
// proof.AppHashFormat (TestGoldenAppHashes checks they agree). Later app
// versions may open it with another (blockDigestDomain).
const digestDomain = "stele/block/v8"

func (o *Options) setDefaults() {
	if o.HousekeepingIntervalMs <= 0 {
		o.HousekeepingIntervalMs = 30_000
	}
	if o.OffsetsRetentionMs <= 0 {
		o.OffsetsRetentionMs = 7 * 24 * 60 * 60 * 1000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CompactionWorkers <= 0 {
		o.CompactionWorkers = 1
	}
}

// FSM is the state machine. ApplyBlock and Commit are called by one goroutine
// (the applier); View, Info and the partitions' read methods by any.
//
// Its fields are the core's; each module's state is a struct declared in
// that module's files and embedded here, so that its fields are promoted
// (f.topics, f.groups) and TestModuleLayering attributes each field to the
// module that declares it.
type FSM struct {
	opts  Options
	store *storage.Store
	// reg is what the modules registered (registry.go): the package's
	// assembled registry, never changed.
	reg *registry

	topicsState    // topic_state.go
	keysState      // keys.go
	groupsState    // group_state.go
	producersState // producer_state.go
	trustState     // cert_apply.go
	clusterState   // upgrade.go
	securityState  // users.go

	// Applier-owned.
	height      int64
	appHash     []byte
	blockTime   int64 // ms
	metaChanged bool
	applied     bool     // a block has been applied and not committed
	leaves      [][]byte // the block's appended batches' leaves (proofs.go)
	blockDigest []byte   // the block's transactions and changes, for its proof entry
	fault       error    // the local fault that stopped the state machine (fault.go)
	// The authenticated state (authstate.go): the trie, its root as the
	// last app hash committed to it, the other parts of that app hash,
	// and the block's staged batch.
	trie       *stateTrie
	stateRoot  []byte
	leavesRoot []byte
	hashHeight int64 // the height whose block last changed the app hash
	pending    *stateBatch

	// Published at Commit.
	committed struct {
		sync.Mutex
		height    int64
		appHash   []byte
		blockTime int64
		hash      hashParts // what appHash is made of (stateproof.go)
	}
}

// Open loads the committed state from opts.Dir (m/state, then every
// module's load step in rank order), cuts every partition log back to its
// committed end, and redoes interrupted deletions and compactions.
func Open(opts Options) (*FSM, error) {
	opts.setDefaults()
	for _, s := range assembled.snapshotFileSteps { // the modules' directories (Dir/logs)
		if err := os.MkdirAll(filepath.Join(opts.Dir, s.dir), 0o755); err != nil {
			return nil, fmt.Errorf("stele/fsm: %w", err)
		}
	}
	store, err := storage.OpenStoreWith(filepath.Join(opts.Dir, "meta"), storage.StoreOptions{FS: opts.StoreFS})
	if err != nil {
		return nil, err
	}
	f := &FSM{opts: opts, store: store, reg: assembled}
	for _, st := range f.reg.steps {
		if st.empty != nil {
			st.empty(f)
		}
	}
	if err := f.load(); err != nil {
		f.closeSteps()
		store.Close()
		return nil, err
	}
	f.publish(true)
	return f, nil
}

// Info returns the height and app hash of the last Commit.
func (f *FSM) Info() (height int64, appHash []byte) {
	f.committed.Lock()
	defer f.committed.Unlock()
	return f.committed.height, append([]byte(nil), f.committed.appHash...)
}

// Validate checks that tx decodes and that each command is well formed on its
// own (names, counts, record batches and their CRCs). It depends on nothing
// but tx, so every broker gives the same answer; whether a command applies to
// the current state is decided by ApplyBlock.
func Validate(tx []byte) (Tx, error) {
	t, err := DecodeTx(tx)
	if err != nil {
		return Tx{}, err
	}
	for i, c := range t.Commands {
		if r := CheckCommand(c); r.Code != 0 {
			return Tx{}, fmt.Errorf("%w: command %d (%s): %s", ErrMalformed, i, c.Kind(), r.Message)
		}
	}
	return t, nil
}

// Precheck is the cheap admission check for the mempool (CheckTx): the
// transaction decodes and every command passes its kind's admission check
// (admitCommand: CheckCommand, or something cheaper a module registered; a
// Produce's batches are whole with good CRCs, their records not decoded).
// Validate does the whole check before a block is proposed or accepted.
func Precheck(tx []byte) error {
	t, err := DecodeTx(tx)
	if err != nil {
		return err
	}
	for i, c := range t.Commands {
		if err := assembled.admitCommand(c); err != nil {
			return fmt.Errorf("%w: command %d (%s): %v", ErrMalformed, i, c.Kind(), err)
		}
	}
	return nil
}

// ErrResubmit marks the refusal of a transaction that its submitter can
// have applied by submitting it again in another form (a module's: the
// trust module's certificate made under the app version before an
// upgrade). Its outcome carries CodeResubmit, so the broker answers the
// client with a retriable error.
var ErrResubmit = errors.New("stele/fsm: submit again")

// CodeResubmit is the outcome code of a transaction refused with
// ErrResubmit; any other refusal is 1.
const CodeResubmit uint32 = 2

// Block is an ordered block as the state machine sees it.
type Block struct {
	Height int64
	// TimeMs is the block time in milliseconds since the epoch: the only
	// clock the state machine reads.
	TimeMs int64
	Txs    [][]byte
	// Signers are the validator addresses whose vote for the previous block
	// this block carries; they tell which brokers are alive (Liveness).
	Signers [][]byte
}

// ApplyBlock applies a block. Every transaction gets an outcome; one that
// does not decode is skipped with a non-zero code.
func (f *FSM) ApplyBlock(b Block) (BlockOutcome, error) {
	height, timeMs, txs := b.Height, b.TimeMs, b.Txs
	if f.fault != nil {
		return BlockOutcome{}, f.fault
	}
	if f.applied {
		return BlockOutcome{}, fmt.Errorf("%w: block %d applied twice without Commit", ErrHeight, f.height)
	}
	if height != f.height+1 {
		return BlockOutcome{}, fmt.Errorf("%w: got height %d after %d", ErrHeight, height, f.height)
	}
	for _, st := range f.reg.blockBeginSteps {
		if st.check == nil {
			continue
		}
		if err := st.check(f, height); err != nil {
			return BlockOutcome{}, err // nothing applied: e.g. a new binary continues here
		}
	}
	f.applied = true
	f.height = height
	if timeMs > f.blockTime { // block time never goes backwards for us
		f.blockTime = timeMs
	}
	for _, st := range f.reg.blockBeginSteps {
		if st.run != nil {
			st.run(f, b)
		}
	}
	out := BlockOutcome{Height: height, Txs: make([]TxOutcome, len(txs))}
	// The app hash chains every transaction and its results, and whatever
	// the block-time timers and housekeeping changed, all as codes and
	// structured fields (encodeResults, change.encode): messages for people
	// go to the transaction's Log, which is not hashed. A block that changes nothing keeps the previous
	// hash: CometBFT makes another block after every block whose app hash
	// changed, so a hash that moved on empty blocks would never let the
	// chain idle.
	h := sha256.New()
	domain := digestDomain
	if f.reg.digestDomainOf != nil {
		domain = f.reg.digestDomainOf(f)
	}
	h.Write([]byte(domain))
	h.Write(f.appHash)
	var num [8]byte
	binary.BigEndian.PutUint64(num[:], uint64(height))
	h.Write(num[:])
	binary.BigEndian.PutUint64(num[:], uint64(f.blockTime))
	h.Write(num[:])
	for i, raw := range txs {
		o := &out.Txs[i]
		var (
			tx  Tx
			err error
		)
		format := f.reg.txFormatOf(raw)
		if format != nil {
			if tx, o.Batch, err = format.open(f, raw); err != nil && format.halts(err) {
				return BlockOutcome{}, err
			}
		} else {
			tx, err = f.reg.decodeTx(raw)
		}
		if err != nil {
			o.Code, o.Log = 1, err.Error()
			if errors.Is(err, ErrResubmit) {
				o.Code = CodeResubmit
			}
		} else {
			o.Nonce = tx.Nonce
			o.Results = make([]Result, len(tx.Commands))
			for j, c := range tx.Commands {
				o.Results[j] = f.apply(c, i, j)
				if f.fault != nil {
					return BlockOutcome{}, f.fault
				}
			}
			if f.opts.rewordForTest != nil {
				for j := range o.Results {
					o.Results[j].Message = f.opts.rewordForTest(o.Results[j].Message)
					for k := range o.Results[j].RecordErrors {
						e := &o.Results[j].RecordErrors[k]
						e.Message = f.opts.rewordForTest(e.Message)
					}
				}
			}
			o.Data = encodeResults(o.Results)
			o.Log = resultsLog(o.Results)
		}
		if f.opts.rewordForTest != nil {
			o.Log = f.opts.rewordForTest(o.Log)
		}
		// A certified batch is hashed as its payload: the state, app hash
		// included, is the same whether a batch came inline or certified.
		txHash := o.Batch
		if txHash == (Digest{}) {
			txHash = sha256.Sum256(raw)
		}
		h.Write(txHash[:])
		binary.BigEndian.PutUint32(num[:4], o.Code)
		h.Write(num[:4])
		resHash := sha256.Sum256(o.Data)
		h.Write(resHash[:])
	}
	var changes []change
	for _, st := range f.reg.blockEndSteps {
		changes = append(changes, st.run(f)...)
		if f.fault != nil { // e.g. a compaction housekeeping awaited failed
			return BlockOutcome{}, f.fault
		}
	}
	if len(changes) > 0 {
		w := &writer{}
		for _, c := range changes {
			c.encode(w)
			f.opts.Logger.Debug("block-time change", "height", height, "change", c) // c.String(), only if logged
		}
		h.Write(w.b)
	}
	// The state the block leaves, staged for Commit and mirrored into the
	// state trie, whose root the app hash commits to.
	if err := f.stage(); err != nil {
		return BlockOutcome{}, f.faulted(err)
	}
	root, err := f.trie.root()
	if err != nil {
		return BlockOutcome{}, f.faulted(err)
	}
	if len(txs) > 0 || len(changes) > 0 || !bytes.Equal(root, f.stateRoot) {
		f.blockDigest = h.Sum(nil)
		f.hashHeight = height
		f.stateRoot = root
		f.leavesRoot = merkle.HashFromByteSlices(f.leaves)
		f.appHash = proof.AppHash(f.blockDigest, f.stateRoot, f.leavesRoot)
	}
	f.persistProofs(f.pending.b.Set)
	out.AppHash = append([]byte(nil), f.appHash...)
	return out, nil
}

// txFormatOf is the registered form raw is in, or nil for a plain
// transaction.
func (r *registry) txFormatOf(raw []byte) *txFormat {
	for _, t := range r.txFormats {
		if t.is(raw) {
			return t
		}
	}
	return nil
}

// Commit makes the last applied block durable (logs fsynced, state written
// with a synced batch), publishes it to readers, then runs the file deletions
// the block decided and starts its compactions in the background. It returns the lowest height the orderer
// must keep: every block up to the committed one is reflected in durable state.
func (f *FSM) Commit() (retainHeight int64, err error) {
	if f.fault != nil {
		return 0, f.fault
	}
	if !f.applied {
		return 0, fmt.Errorf("%w: Commit without a block", ErrHeight)
	}
	for _, st := range f.reg.steps {
		if st.sync != nil {
			if err := st.sync(f); err != nil {
				return 0, f.faulted(err)
			}
		}
	}
	if err := f.persist(); err != nil {
		return 0, f.faulted(err)
	}
	if f.height%trieRefreshBlocks == 0 {
		// The trie keeps every node it resolved in memory; starting afresh
		// from the committed root bounds that to what recent blocks touched.
		f.trie = openStateTrie(f.store, f.stateRoot)
	}
	f.applied = false
	f.publish(f.metaChanged)
	var afterErrs []error
	for _, st := range f.reg.steps {
		if st.settle != nil {
			afterErrs = append(afterErrs, st.settle(f))
		}
	}
	afterErr := errors.Join(afterErrs...)
	f.metaChanged = false
	for _, st := range f.reg.steps {
		if st.forget != nil {
			st.forget(f)
		}
	}
	clear(f.leaves)
	f.leaves = f.leaves[:0]
	if afterErr != nil {
		// The block is durable and published; the files it decided to
		// delete or rewrite are not. Open redoes those steps at restart.
		return 0, f.faulted(afterErr)
	}
	return f.height, nil
}

// publish makes the committed state visible to readers.
func (f *FSM) publish(metaChanged bool) {
	for _, st := range f.reg.steps {
		if st.publish != nil {
			st.publish(f, metaChanged)
		}
	}
	f.committed.Lock()
	f.committed.height = f.height
	f.committed.appHash = append([]byte(nil), f.appHash...)
	f.committed.blockTime = f.blockTime
	f.committed.hash = hashParts{height: f.hashHeight, digest: f.blockDigest, stateRoot: f.stateRoot, leavesRoot: f.leavesRoot}
	f.committed.Unlock()
}

// Close closes the modules' files (the logs, which stops the compactions
// in flight: their plans stay for the next Open), and the metadata store.
func (f *FSM) Close() error {
	f.closeSteps()
	return f.store.Close()
}

// closeSteps runs every step's close, in rank order.
func (f *FSM) closeSteps() {
	for _, st := range f.reg.steps {
		if st.close != nil {
			st.close(f)
		}
	}
}
