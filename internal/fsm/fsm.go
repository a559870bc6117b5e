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

// MachineOptions configures the core: the directory, the store's file
// system and the logger (Options has the modules' options too).
type MachineOptions struct {
	// Dir holds the modules' files and the metadata store (Dir/meta).
	Dir     string
	StoreFS vfs.FS
	Logger  *slog.Logger
	// TraceState logs every authenticated key a block writes or deletes
	// (Options.TraceState).
	TraceState bool
	// Reword, when set, rewrites every result message and log before
	// they leave ApplyBlock (Options.rewordForTest).
	Reword func(string) string
}

// OpenMachine opens the core over opts.Dir with the modules' registry:
// bind makes the application the machine belongs to (called before any
// step runs), reopen opens another one in a directory. It runs every
// module's empty step, loads the committed state (m/state, then every
// module's load step in rank order) and publishes it.
func OpenMachine(opts MachineOptions, reg *Registry, bind func(*Machine) any, reopen func(dir string) (*Machine, error)) (*Machine, error) {
	for _, s := range reg.snapshotFileSteps { // the modules' directories (Dir/logs)
		if err := os.MkdirAll(filepath.Join(opts.Dir, s.dir), 0o755); err != nil {
			return nil, fmt.Errorf("stele/fsm: %w", err)
		}
	}
	store, err := storage.OpenStoreWith(filepath.Join(opts.Dir, "meta"), storage.StoreOptions{FS: opts.StoreFS})
	if err != nil {
		return nil, err
	}
	f := &Machine{opts: opts, store: store, reg: reg, reopen: reopen}
	f.app = bind(f)
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

// digestDomain opens the block digest of app version 1; its version is
// proof.AppHashFormat (TestGoldenAppHashes checks they agree). Later app
// versions may open it with another (blockDigestDomain).
const digestDomain = "stele/block/v8"

// Machine is the core of the state machine: the block being applied, the
// authenticated store, the app hash, Commit and what it publishes. It
// runs the modules only through what they registered (reg); app is the
// application the machine belongs to (FSM), which the modules' functions
// are given, and reopen opens another machine of the same application in
// a directory (a restored snapshot's check).
//
// ApplyBlock and Commit are called by one goroutine (the applier); Info
// and the published views' readers by any.
type Machine struct {
	opts  MachineOptions
	store *storage.Store
	// reg is what the modules registered (registry.go), never changed.
	reg    *Registry
	app    any
	reopen func(dir string) (*Machine, error)

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

// Info returns the height and app hash of the last Commit.
func (f *Machine) Info() (height int64, appHash []byte) {
	f.committed.Lock()
	defer f.committed.Unlock()
	return f.committed.height, append([]byte(nil), f.committed.appHash...)
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
func (f *Machine) ApplyBlock(b Block) (BlockOutcome, error) {
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
			if f.opts.Reword != nil {
				for j := range o.Results {
					o.Results[j].Message = f.opts.Reword(o.Results[j].Message)
					for k := range o.Results[j].RecordErrors {
						e := &o.Results[j].RecordErrors[k]
						e.Message = f.opts.Reword(e.Message)
					}
				}
			}
			o.Data = encodeResults(o.Results)
			o.Log = resultsLog(o.Results)
		}
		if f.opts.Reword != nil {
			o.Log = f.opts.Reword(o.Log)
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
func (r *Registry) txFormatOf(raw []byte) *TxFormat {
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
func (f *Machine) Commit() (retainHeight int64, err error) {
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
func (f *Machine) publish(metaChanged bool) {
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
func (f *Machine) Close() error {
	f.closeSteps()
	return f.store.Close()
}

// closeSteps runs every step's close, in rank order.
func (f *Machine) closeSteps() {
	for _, st := range f.reg.steps {
		if st.close != nil {
			st.close(f)
		}
	}
}
