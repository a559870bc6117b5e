package fsm

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The command registry: every command kind, the module that owns it, and
// its decoder, stateless check and apply, registered by that module (in an
// init function of the file that defines the command). Decoding, Kind's
// name, CheckCommand and apply all go through it, so a new command is
// defined, encoded, decoded, checked and applied in its module's files and
// nowhere else (TestRegistry checks that every kind is registered once).
//
// The modules of the state machine, and what they own:
//
//	core      blocks, transactions and their codec, this registry, the
//	          authenticated store, the app hash, Commit, snapshots, proofs
//	          and the published views; the Tick command
//	topics    topics, their configs and partitions, the partition logs and
//	          their housekeeping (retention, compaction), Produce and the
//	          Stele record headers it reads, and what a log keeps of its
//	          producers: idempotent producers' sequences, the transaction
//	          markers, the last stable offset and the aborted transactions
//	          (Kafka's ProducerStateManager is a part of its log too)
//	keys      the key stream index and the table leaves derived from logs
//	groups    classic and KIP-848 consumer groups, committed offsets
//	producers producer ids and transactions (the coordinator's part: a
//	          transaction's partitions, offsets, timeouts and its end, for
//	          which it asks topics to write the markers)
//	trust     signers, certificates of the data plane, producer keys and
//	          signed records
//	cluster   the application version and upgrades
//
// Which module may call which is written down in modules_test.go
// (TestModuleLayering), which reads this package's source.
//
// Besides its commands, a module registers its steps (registerStep): what
// it writes into the block's store batch at the end of ApplyBlock (stage)
// and what it publishes to readers at Commit (publish). The core runs them
// in the order of their rank, which is part of what is hashed (a prefix
// deletion and a write of the same key in one batch do not commute).

// module names a part of the state machine.
type module string

// The modules (see the package's registry.go).
const (
	modCore      module = "core"
	modTopics    module = "topics"
	modKeys      module = "keys"
	modGroups    module = "groups"
	modProducers module = "producers"
	modTrust     module = "trust"
	modCluster   module = "cluster"
)

// cmdAt is where a command sits in its block: the index of its transaction
// and its index in that transaction (ids that must be the same on every
// broker, such as generated member ids, derive from them).
type cmdAt struct{ tx, cmd int }

// commandSpec is a registered command kind.
type commandSpec struct {
	kind   Kind
	name   string
	module module
	decode func(*reader) Command
	// check is the command's stateless check (CheckCommand); nil: none.
	check func(Command) Result
	// checkedByApply: apply does the check itself, in its own order (a
	// produce checks each batch as it applies it).
	checkedByApply bool
	apply          func(*FSM, Command, cmdAt) Result
}

// registry holds the registered kinds by value (an array: dispatch never
// ranges over a map).
var registry [256]*commandSpec

// register adds a command kind. It panics when the kind is taken or the
// command's Kind method disagrees: both are programming errors found at
// start-up by every test.
func register[C Command](kind Kind, name string, m module, decode func(*reader) C, check func(Command) Result, apply func(*FSM, C, cmdAt) Result) *commandSpec {
	if registry[kind] != nil {
		panic(fmt.Sprintf("stele/fsm: command kind %d registered as %s and as %s", kind, registry[kind].name, name))
	}
	var zero C
	if zero.Kind() != kind {
		panic(fmt.Sprintf("stele/fsm: command %s registered as kind %d, its Kind method says %d", name, kind, zero.Kind()))
	}
	s := &commandSpec{
		kind: kind, name: name, module: m, check: check,
		decode: func(r *reader) Command { return decode(r) },
		apply:  func(f *FSM, c Command, at cmdAt) Result { return apply(f, c.(C), at) },
	}
	registry[kind] = s
	return s
}

func (k Kind) String() string {
	if s := registry[k]; s != nil {
		return s.name
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

func decodeCommand(k Kind, r *reader) Command {
	s := registry[k]
	if s == nil {
		r.fail("unknown command kind %d", k)
		return nil
	}
	return s.decode(r)
}

// CheckCommand validates a command on its own, without the state: what
// every broker would refuse to order. Apply checks it again.
func CheckCommand(c Command) Result {
	s := registry[c.Kind()]
	if s == nil {
		return fail(kerr.InvalidRequest.Code, fmt.Sprintf("unknown command %T", c))
	}
	if s.check == nil {
		return Result{}
	}
	return s.check(c)
}

// apply runs one command against the state.
func (f *FSM) apply(c Command, txIndex, cmdIndex int) Result {
	s := registry[c.Kind()]
	if s == nil {
		return fail(kerr.InvalidRequest.Code, fmt.Sprintf("unknown command %T", c))
	}
	if !s.checkedByApply && s.check != nil {
		if r := s.check(c); r.Code != 0 {
			return r
		}
	}
	return s.apply(f, c, cmdAt{tx: txIndex, cmd: cmdIndex})
}

// moduleStep is a module's part in the core's per-block steps.
type moduleStep struct {
	rank   int
	name   string
	module module
	// stage adds the block's changes to the state batch.
	stage func(*FSM, *stateBatch) error
	// publish makes the committed state visible to readers; metaChanged
	// says a topic or partition was created, deleted or reconfigured.
	publish func(f *FSM, metaChanged bool)
}

// steps holds the registered steps by rank.
var steps []*moduleStep

// registerStep adds a module's step; two steps of one rank are a
// programming error.
func registerStep(s moduleStep) {
	for _, o := range steps {
		if o.rank == s.rank {
			panic(fmt.Sprintf("stele/fsm: steps %s and %s both of rank %d", o.name, s.name, s.rank))
		}
	}
	steps = append(steps, &s)
	slices.SortFunc(steps, func(a, b *moduleStep) int { return a.rank - b.rank })
}
