// Package core is the core of Stele's replicated state machine: blocks
// and their application (Machine.ApplyBlock, Commit), the transaction
// codec (Reader, Writer, Tx), the command registry every module registers
// in (Registry: commands, steps, block-begin and block-end steps, command
// gates, transaction forms, snapshot files, the state mark; registry.go
// says how), the authenticated store and its state trie (authstate.go,
// persist.go), the app hash and its proofs, snapshots (capture, serving,
// restore) and the fail-stop on local faults (fault.go).
//
// It names no module: it runs them only through what they registered,
// and Go's import rules hold it to that, since the modules and the
// application that assembles them (package fsm) import it, never the
// other way. A Machine belongs to an application (its app, which the
// application's registration adapters hand to the modules' functions);
// OpenMachine binds the two before any step runs.
//
// Apply must be deterministic and produce the same result on all peers: given
// the same sequence of blocks, every broker holds byte-identical partition
// logs, the same state and the same app hash. So nothing in this package
// or in the modules reads the wall clock (time comes with the block), a
// random source, the environment, or iterates a map into anything that
// reaches output, and there is no floating point. A malformed command is
// rejected with a result, never panicked on: under BFT a bad transaction
// from a Byzantine proposer must not halt honest brokers.
//
// Effects of FinalizeBlock (ApplyBlock) stay invisible until Commit: readers
// see what the modules publish at Commit. Destructive file operations run
// only after Commit (the modules' settle steps) and are redone at Open if
// a crash interrupted them.
//
// A local I/O or store error is never a result (fault.go, ErrLocalFault):
// ApplyBlock or Commit returns it, the state machine refuses every later
// block, and the broker stops; at the next Open the block is replayed.
//
// core imports storage and pkg/proof, never a module, consensus or a
// front-end.
package core

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
type Options struct {
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

// Registry is the registry the machine runs (what its modules registered).
func (f *Machine) Registry() *Registry { return f.reg }

// BlockAppVersion is the app version of the block being applied (the cluster
// module's, Registry.AppVersionOf), for a module below the cluster module
// whose rules changed with a version; 0 when none is registered. Only the
// applier may call it.
func (f *Machine) BlockAppVersion() uint32 {
	if f.reg.AppVersionOf == nil {
		return 0
	}
	return f.reg.AppVersionOf(f)
}

// OpenMachine opens the core over opts.Dir with the modules' registry:
// bind makes the application the machine belongs to (called before any
// step runs), reopen opens another one in a directory. It runs every
// module's empty step, loads the committed state (m/state, then every
// module's load step in rank order) and publishes it.
func OpenMachine(opts Options, reg *Registry, bind func(*Machine) any, reopen func(dir string) (*Machine, error)) (*Machine, error) {
	for _, s := range reg.SnapshotFileSteps { // the modules' directories (Dir/logs)
		if err := os.MkdirAll(filepath.Join(opts.Dir, s.Dir), 0o755); err != nil {
			return nil, fmt.Errorf("stele/fsm: %w", err)
		}
	}
	store, err := storage.OpenStoreWith(filepath.Join(opts.Dir, "meta"), storage.StoreOptions{FS: opts.StoreFS})
	if err != nil {
		return nil, err
	}
	f := &Machine{opts: opts, Store: store, reg: reg, reopen: reopen}
	f.App = bind(f)
	for _, st := range f.reg.Steps {
		if st.Empty != nil {
			st.Empty(f)
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

// DigestDomain opens the block digest of app version 1; its version is
// proof.AppHashFormat (TestGoldenAppHashes checks they agree). Later app
// versions may open it with another (blockDigestDomain).
const DigestDomain = "stele/block/v8"

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
	opts  Options
	Store *storage.Store
	// reg is what the modules registered (registry.go), never changed.
	reg    *Registry
	App    any
	reopen func(dir string) (*Machine, error)

	// Applier-owned.
	Height      int64
	AppHash     []byte
	BlockTime   int64 // ms
	MetaChanged bool
	// ValidatorUpdates are the block's changes of voting power, which
	// modules add to while it is applied (BlockOutcome.ValidatorUpdates).
	ValidatorUpdates []ValidatorUpdate
	applied          bool     // a block has been applied and not committed
	Leaves           [][]byte // the block's appended batches' leaves (proofs.go)
	blockDigest      []byte   // the block's transactions and changes, for its proof entry
	fault            error    // the local fault that stopped the state machine (fault.go)
	// The authenticated state (authstate.go): the trie, its root as the
	// last app hash committed to it, the other parts of that app hash,
	// and the block's staged batch.
	trie       *stateTrie
	StateRoot  []byte
	leavesRoot []byte
	hashHeight int64 // the height whose block last changed the app hash
	pending    *StateBatch

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
	// Misbehavior is the evidence of validator misbehavior the block
	// commits (CometBFT's, the same on every broker): from app version 7
	// it removes the offender's power (cluster/membership.go).
	Misbehavior []Misbehavior
}

// Misbehavior is committed evidence that a validator misbehaved.
type Misbehavior struct {
	Kind      MisbehaviorKind
	Validator []byte // its address
	Height    int64  // the height of the misbehavior
}

// MisbehaviorKind is what a validator was proven to have done.
type MisbehaviorKind uint8

const (
	// DuplicateVote: it signed two different votes for one height and round.
	DuplicateVote MisbehaviorKind = 1
	// LightClientAttack: it signed a header that conflicts with the chain.
	LightClientAttack MisbehaviorKind = 2
)

func (k MisbehaviorKind) String() string {
	switch k {
	case DuplicateVote:
		return "duplicate-vote"
	case LightClientAttack:
		return "light-client-attack"
	}
	return fmt.Sprintf("misbehavior-%d", uint8(k))
}

// ValidatorUpdate is a change of one validator's voting power a block
// makes (power 0 removes it), handed to the orderer with the block's
// outcome: CometBFT applies it two heights later.
type ValidatorUpdate struct {
	PubKey []byte // ed25519
	Power  int64
}

// ApplyBlock applies a block. Every transaction gets an outcome; one that
// does not decode is skipped with a non-zero code.
func (f *Machine) ApplyBlock(b Block) (BlockOutcome, error) {
	height, timeMs, txs := b.Height, b.TimeMs, b.Txs
	if f.fault != nil {
		return BlockOutcome{}, f.fault
	}
	if f.applied {
		return BlockOutcome{}, fmt.Errorf("%w: block %d applied twice without Commit", ErrHeight, f.Height)
	}
	if height != f.Height+1 {
		return BlockOutcome{}, fmt.Errorf("%w: got height %d after %d", ErrHeight, height, f.Height)
	}
	for _, st := range f.reg.BlockBeginSteps {
		if st.Check == nil {
			continue
		}
		if err := st.Check(f, height); err != nil {
			return BlockOutcome{}, err // nothing applied: e.g. a new binary continues here
		}
	}
	f.applied = true
	f.Height = height
	f.ValidatorUpdates = f.ValidatorUpdates[:0]
	if timeMs > f.BlockTime { // block time never goes backwards for us
		f.BlockTime = timeMs
	}
	for _, st := range f.reg.BlockBeginSteps {
		if st.Run != nil {
			st.Run(f, b)
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
	domain := DigestDomain
	if f.reg.DigestDomainOf != nil {
		domain = f.reg.DigestDomainOf(f)
	}
	h.Write([]byte(domain))
	h.Write(f.AppHash)
	var num [8]byte
	binary.BigEndian.PutUint64(num[:], uint64(height))
	h.Write(num[:])
	binary.BigEndian.PutUint64(num[:], uint64(f.BlockTime))
	h.Write(num[:])
	for i, raw := range txs {
		o := &out.Txs[i]
		var (
			tx  Tx
			err error
		)
		format := f.reg.txFormatOf(raw)
		if format != nil {
			if tx, o.Batch, err = format.Open(f, raw); err != nil && format.Halts(err) {
				return BlockOutcome{}, err
			}
		} else {
			tx, err = f.reg.DecodeTx(raw)
		}
		if err == nil {
			err = f.reg.unknownUnder(f, tx)
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
				o.Results[j] = f.Apply(c, i, j)
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
			o.Data = EncodeResults(o.Results)
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
	var changes []Change
	for _, st := range f.reg.BlockEndSteps {
		changes = append(changes, st.Run(f)...)
		if f.fault != nil { // e.g. a compaction housekeeping awaited failed
			return BlockOutcome{}, f.fault
		}
	}
	if len(changes) > 0 {
		w := &Writer{}
		for _, c := range changes {
			c.Encode(w)
			f.opts.Logger.Debug("block-time change", "height", height, "change", c) // c.String(), only if logged
		}
		h.Write(w.B)
	}
	// The state the block leaves, staged for Commit and mirrored into the
	// state trie, whose root the app hash commits to.
	if err := f.stage(); err != nil {
		return BlockOutcome{}, f.Faulted(err)
	}
	root, err := f.trie.root()
	if err != nil {
		return BlockOutcome{}, f.Faulted(err)
	}
	if len(txs) > 0 || len(changes) > 0 || !bytes.Equal(root, f.StateRoot) {
		f.blockDigest = h.Sum(nil)
		f.hashHeight = height
		f.StateRoot = root
		f.leavesRoot = merkle.HashFromByteSlices(f.Leaves)
		f.AppHash = proof.AppHash(f.blockDigest, f.StateRoot, f.leavesRoot)
	}
	f.persistProofs(f.pending.B.Set)
	out.AppHash = append([]byte(nil), f.AppHash...)
	out.ValidatorUpdates = append([]ValidatorUpdate(nil), f.ValidatorUpdates...)
	return out, nil
}

// txFormatOf is the registered form raw is in, or nil for a plain
// transaction.
func (r *Registry) txFormatOf(raw []byte) *TxFormat {
	for _, t := range r.TxFormats {
		if t.Is(raw) {
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
	for _, st := range f.reg.Steps {
		if st.Sync != nil {
			if err := st.Sync(f); err != nil {
				return 0, f.Faulted(err)
			}
		}
	}
	if err := f.persist(); err != nil {
		return 0, f.Faulted(err)
	}
	if f.Height%TrieRefreshBlocks == 0 {
		// The trie keeps every node it resolved in memory; starting afresh
		// from the committed root bounds that to what recent blocks touched.
		f.trie = openStateTrie(f.Store, f.StateRoot)
	}
	f.applied = false
	f.publish(f.MetaChanged)
	var afterErrs []error
	for _, st := range f.reg.Steps {
		if st.Settle != nil {
			afterErrs = append(afterErrs, st.Settle(f))
		}
	}
	afterErr := errors.Join(afterErrs...)
	f.MetaChanged = false
	for _, st := range f.reg.Steps {
		if st.Forget != nil {
			st.Forget(f)
		}
	}
	clear(f.Leaves)
	f.Leaves = f.Leaves[:0]
	if afterErr != nil {
		// The block is durable and published; the files it decided to
		// delete or rewrite are not. Open redoes those steps at restart.
		return 0, f.Faulted(afterErr)
	}
	return f.Height, nil
}

// publish makes the committed state visible to readers.
func (f *Machine) publish(metaChanged bool) {
	for _, st := range f.reg.Steps {
		if st.Publish != nil {
			st.Publish(f, metaChanged)
		}
	}
	f.committed.Lock()
	f.committed.height = f.Height
	f.committed.appHash = append([]byte(nil), f.AppHash...)
	f.committed.blockTime = f.BlockTime
	f.committed.hash = hashParts{height: f.hashHeight, digest: f.blockDigest, stateRoot: f.StateRoot, leavesRoot: f.leavesRoot}
	f.committed.Unlock()
}

// Close closes the modules' files (the logs, which stops the compactions
// in flight: their plans stay for the next Open), and the metadata store.
func (f *Machine) Close() error {
	f.closeSteps()
	return f.Store.Close()
}

// closeSteps runs every step's close, in rank order.
func (f *Machine) closeSteps() {
	for _, st := range f.reg.Steps {
		if st.Close != nil {
			st.Close(f)
		}
	}
}
