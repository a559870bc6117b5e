package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The command registry: every command kind, the module that owns it, and
// its decoder, stateless check and apply, registered by that module (in
// the registration function of the file that defines the command, which
// its module's registration function calls: buildRegistry, in package fsm's app.go).
// Decoding, Kind's name, CheckCommand and apply all go through it, so a
// new command is defined, encoded, decoded, checked and applied in its
// module's files and nowhere else (TestRegistry checks that every kind is
// registered once).
//
// The modules of the state machine, and what they own (each is the
// package of its name under internal/fsm, where the files named are):
//
//	core      blocks, transactions and their codec, this registry, the
//	          authenticated store, the app hash, Commit, snapshots, proofs
//	          and the published views; the Tick command
//	topics    topics, their configs and partitions, the cluster-wide log
//	          defaults of those configs (log_defaults.go), the partition logs and
//	          their housekeeping (retention, compaction), Produce and the
//	          Stele record headers it reads, and what a log keeps of its
//	          producers: idempotent producers' sequences, the transaction
//	          markers, the last stable offset and the aborted transactions
//	          (Kafka's ProducerStateManager is a part of its log too)
//	keys      the key stream index and the table leaves derived from logs
//	subjects  each batch's subject summary and each topic's subject counts,
//	          derived from logs (subjects/)
//	views     the copies of their sources' matching records into views
//	          (topics whose stele.view.* configs make them views; views/);
//	          no state of its own
//	groups    classic and KIP-848 consumer groups, committed offsets
//	producers producer ids and transactions (the coordinator's part: a
//	          transaction's partitions, offsets, timeouts and its end, for
//	          which it asks topics to write the markers)
//	trust     signers, certificates of the data plane, producer keys and
//	          signed records
//	cluster   the application version and upgrades, the dynamic broker
//	          configs (broker_configs.go)
//	security  users and their SASL credentials (users.go), ACLs
//	          (acls.go, acls_view.go), client and IP quotas (quotas.go,
//	          ip_quotas.go) and signed administration (admin_signed.go)
//	schemas   each tenant's schema registry: schemas, subjects and their
//	          versions, compatibility levels, mode (schemas/)
//	shares    share groups (KIP-932) and key-ordered share groups: members,
//	          acquisitions, acknowledgements, locks, start offsets (shares/)
//	tenants   tenants and their quotas, the gates that keep a tenant's
//	          names its own and within its quotas, a tenant's deletion
//	          across every module (tenants/)
//
// The modules form layers, topics at the bottom: keys, subjects, groups
// and trust use topics, views uses topics and subjects, producers use
// topics and groups, cluster uses trust and
// topics' config definitions, security uses cluster (the app version,
// stele.admin.signed), trust (the keys that sign administration), and
// topics and groups (the commands it gates), schemas uses cluster (the
// app version) and topics (it validates produced records), shares uses topics, groups and cluster (the logs it reads, the consumer groups' names, the app version), tenants uses every module
// but keys, subjects and views (what a tenant owns in each) (allowedCalls in package
// fsm's modules_test.go; TestModuleLayering reads the modules' source,
// TestLayeringIsADAG checks that there is no cycle). A
// lower module never calls an upper one: it offers hook points (hook,
// below; the topics module's are in topic_hooks.go), and the upper module
// registers its hooks there from its registration function, each with a
// rank, as Cosmos SDK modules take hooks from the modules above them (TestHooks pins every point's order: it is part of
// what is hashed). So a produce checks a producer's transaction and a
// batch's signatures, indexes its keys and updates table leaves; a
// deleted topic drops its groups' offsets, key entries and leaves;
// housekeeping expires offsets and transactional ids; a commit marker
// updates table leaves: all without the topics module naming keys,
// groups, producers or trust. The core is the bottom layer: it calls no
// module and names no module's function, value or state, only what the
// modules register below; the places it names them are where it
// assembles them: FSM's embedded states, Options' validator set and
// batch source, the registry's embedded topic hook points and
// buildRegistry's calls of the modules' registration functions
// (coreAssembly in modules_test.go).
//
// Besides its commands and hooks, a module registers its steps
// (registerStep): its state of an empty state machine (empty), what it reads back from the store at Open (load), what
// it writes into the block's store batch at the end of ApplyBlock (stage)
// and what it publishes to readers at Commit (publish); around Commit, the
// files beside the store it makes durable before the state is written
// (sync), what it does to them once the block is committed (settle: the
// topics' segment deletions and compactions), the block's changes it
// forgets then (forget: its dirty sets), and how it lets its files go at
// Close (close). The core runs each of these in the order of the steps'
// ranks, which is the one list of that order (TestSteps pins it). For stage the order is part of what is
// hashed (a prefix deletion and a write of the same key in one batch do
// not commute); for load it is what the modules' state refers to: the
// cluster's app version (50) is checked before the topics' load (60)
// opens any partition log, and every load that refers to topics (the
// producers' and transactions' partitions) ranks after it. Two more kinds
// of registration take the same ranked form: a module's block-end step
// (registerBlockEnd: expired certificates, group sessions, transaction
// timeouts, housekeeping), run once per block after its transactions in
// rank order, their changes hashed in that order; a module's block-begin
// step (registerBlockBegin: the cluster's upgrade check and activation,
// the trust module's signers), run before them; a module's command gate
// (registerCommandGate: the security module's refusal of unsigned
// administration under stele.admin.signed, the tenants module's names
// and quotas), run before every command's apply, after its stateless
// check, or before the check (the tenants module's names before app
// version 4); a module's form of
// transaction (registerTxFormat: the trust module's certificates), and
// the cluster's digest domain (setDigestDomain); and a module's files in
// a snapshot (registerSnapshotFiles: the topics module's partition logs
// under logs/, topic_snapshot.go), which the core captures, ships and
// restores without knowing what they hold.
//
// How the registry is built and reached. There are no init functions and
// no package-level variable is written after the package is initialised
// (TestNoMutablePackageState, package_state_test.go): buildRegistry makes the
// registry by calling each module's registration function in a fixed
// order, and nothing changes it afterwards. That order is the layering's,
// from the bottom up (topics, keys, groups, producers, trust, cluster,
// security, tenants),
// and each module's function calls its files' in an order it lists; the
// topics module comes first because it makes the hook points the modules
// above it register at. Beyond that the order decides nothing: every list
// that is run in an order (steps, block-begin and block-end steps,
// command gates, hooks, snapshot files) is kept in the order of its ranks, whatever order they
// were registered in, and there is one transaction form, so the registry,
// and what is hashed, is the same for any order of the calls.
//
// The registry is built once, by the initialiser of package fsm's package-level
// value assembled (a function call, not an init side effect), rather than
// by each Open, because half of what it holds is the stateless codec that
// the broker, the mempool and the HTTP API use without a state machine:
// DecodeTx, EncodeTx's size estimate, CheckCommand, Precheck and Kind's
// names read assembled, and so do Open, before it has a state machine,
// and the check of a peer's snapshot paths (checkSnapshotPath). A state
// machine reaches it through its field reg, which Open sets to
// assembled: whatever a command, a step or a hook runs reads f.reg, never
// the package name, and the compiler holds it to that, as Go refuses to
// build a package whose initialiser reaches a function naming the value
// being initialised (a produce's apply runs the topics' hooks, a
// certified transaction's open decodes its payload: both with f.reg).
// The field also says plainly which registry a state machine runs.

// Module names a part of the state machine.
type Module string

// ModCore is the core's own name as a module (its Tick command).
const ModCore Module = "core"

// CmdAt is where a command sits in its block: the index of its transaction
// and its index in that transaction (ids that must be the same on every
// broker, such as generated member ids, derive from them).
type CmdAt struct{ Tx, Cmd int }

// CommandSpec is a registered command kind.
type CommandSpec struct {
	Kind   Kind
	Name   string
	Module Module
	Decode func(*Reader) Command
	// check is the command's stateless check (CheckCommand); nil: none.
	check func(Command) Result
	// CheckedByApply: apply does the check itself, in its own order (a
	// produce checks each batch as it applies it).
	CheckedByApply bool
	Apply          func(*Machine, Command, CmdAt) Result
	// Admit is the command's admission check for the mempool (Precheck),
	// in place of its check: something cheaper where the check is costly
	// (a produce's batches are only split and their CRCs checked; Validate
	// decodes the records). nil: the check.
	Admit func(Command) error
	// Size estimates the command's encoded body, for EncodeTx's buffer
	// (a produce's records); nil: a small command.
	Size func(Command) int
	// Since is the app version that introduced the command (0: every
	// version). Under an older version a transaction holding it fails as
	// a whole, as it does on the binaries that predate the command, which
	// cannot decode it (ApplyBlock; AppVersionOf says the version), so
	// brokers of mixed binaries agree on its result.
	Since uint32
}

// Registry is what the modules register: built by buildRegistry, never
// changed afterwards.
type Registry struct {
	// Commands holds the registered kinds by value (an array: dispatch
	// never ranges over a map).
	Commands [256]*CommandSpec
	// Steps holds the registered steps by rank.
	Steps []*Step
	// BlockBeginSteps holds the registered block-begin steps by rank.
	BlockBeginSteps []*BlockBeginStep
	// BlockEndSteps holds the registered block-end steps by rank.
	BlockEndSteps []*BlockEndStep
	// commandGates holds the registered command gates by rank.
	commandGates []*CommandGate
	// preCheckGates holds the command gates that run before the check.
	preCheckGates []*CommandGate
	// TxFormats holds the registered forms of transactions, asked in order.
	TxFormats []*TxFormat
	// DigestDomainOf opens the digest of the block being applied: the
	// cluster module's, which depends on the app version
	// (blockDigestDomain); nil is digestDomain.
	DigestDomainOf func(*Machine) string
	// AppVersionOf is the app version of the block being applied: the
	// cluster module's; nil: commands' Since is not checked.
	AppVersionOf func(*Machine) uint32
	// SnapshotFileSteps holds the registered snapshot files by rank.
	SnapshotFileSteps []*SnapshotFiles
	// StateMark is the registered state mark, or nil.
	StateMark *StateMark
}

// RegisterCommand adds a command kind to r. It panics when the kind is
// taken or the command's Kind method disagrees: both are programming
// errors found as the package is initialised, by every test.
func RegisterCommand[C Command](r *Registry, kind Kind, name string, m Module, decode func(*Reader) C, check func(Command) Result, apply func(*Machine, C, CmdAt) Result) *CommandSpec {
	if o := r.Commands[kind]; o != nil {
		panic(fmt.Sprintf("stele/fsm: command kind %d registered as %s and as %s", kind, o.Name, name))
	}
	var zero C
	if zero.Kind() != kind {
		panic(fmt.Sprintf("stele/fsm: command %s registered as kind %d, its Kind method says %d", name, kind, zero.Kind()))
	}
	s := &CommandSpec{
		Kind: kind, Name: name, Module: m, check: check,
		Decode: func(r *Reader) Command { return decode(r) },
		Apply:  func(f *Machine, c Command, at CmdAt) Result { return apply(f, c.(C), at) },
	}
	r.Commands[kind] = s
	return s
}

// KindName is the name kind k was registered with, or Kind(n).
func (g *Registry) KindName(k Kind) string {
	if s := g.Commands[k]; s != nil {
		return s.Name
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

func (g *Registry) DecodeCommand(k Kind, r *Reader) Command {
	s := g.Commands[k]
	if s == nil {
		r.Fail("unknown command kind %d", k)
		return nil
	}
	return s.Decode(r)
}

func (g *Registry) CheckCommand(c Command) Result {
	s := g.Commands[c.Kind()]
	if s == nil {
		return Fail(kerr.InvalidRequest.Code, fmt.Sprintf("unknown command %T", c))
	}
	if s.check == nil {
		return Result{}
	}
	return s.check(c)
}

// AdmitCommand is a command's admission check (Precheck): its kind's
// admit, or else its check.
func (g *Registry) AdmitCommand(c Command) error {
	if s := g.Commands[c.Kind()]; s != nil && s.Admit != nil {
		return s.Admit(c)
	}
	if r := g.CheckCommand(c); r.Code != 0 {
		return errors.New(r.Message)
	}
	return nil
}

// encodedSize estimates the encoding of c's body (EncodeTx).
func (g *Registry) encodedSize(c Command) int {
	if s := g.Commands[c.Kind()]; s != nil && s.Size != nil {
		return s.Size(c)
	}
	return 64
}

// Apply runs one command against the state.
func (f *Machine) Apply(c Command, txIndex, cmdIndex int) Result {
	s := f.reg.Commands[c.Kind()]
	if s == nil {
		return Fail(kerr.InvalidRequest.Code, fmt.Sprintf("unknown command %T", c))
	}
	if !s.CheckedByApply {
		for _, g := range f.reg.preCheckGates {
			if r, ok := g.Run(f, c); !ok {
				return r
			}
		}
		if s.check != nil {
			if r := s.check(c); r.Code != 0 {
				return r
			}
		}
	}
	for _, g := range f.reg.commandGates {
		if r, ok := g.Run(f, c); !ok {
			return r
		}
	}
	return s.Apply(f, c, CmdAt{Tx: txIndex, Cmd: cmdIndex})
}

// moduleStep is a module's part in the core's steps: at Open and per block.
type Step struct {
	Rank   int
	Name   string
	Module Module
	// Empty sets the module's state of an empty state machine at Open,
	// before any load (its maps, its compactor).
	Empty func(*Machine)
	// Load reads the step's part of the committed state from the store at
	// Open (and when a restored snapshot is swapped in): the module's
	// prefixes, through decoders of its own that bound what they allocate
	// by the bytes they are given (FuzzDecodeStoreValues). It sets that
	// part whole, replacing what the state machine held.
	Load func(*Machine) error
	// Stage adds the block's changes to the state batch.
	Stage func(*Machine, *StateBatch) error
	// Publish makes the committed state visible to readers; metaChanged
	// says a topic or partition was created, deleted or reconfigured.
	Publish func(f *Machine, metaChanged bool)
	// Sync makes the files the block wrote beside the store durable, at
	// Commit before the state batch is written (the partition logs).
	Sync func(*Machine) error
	// Settle runs what the committed block decided to do to those
	// files (deletions, compactions), after publish. An error is a local
	// fault; Open redoes the work.
	Settle func(*Machine) error
	// Forget forgets the block's changes once it is committed (the dirty
	// sets staged and published), after every step's settle.
	Forget func(*Machine)
	// Close lets the module's files go (Close, or an Open that failed).
	Close func(*Machine)
}

// RegisterStep adds a module's step; two steps of one rank are a
// programming error.
func (r *Registry) RegisterStep(s Step) {
	r.Steps = InsertRanked(r.Steps, &s, "steps", func(s *Step) (int, string) { return s.Rank, s.Name })
}

// InsertRanked adds s to list, which it keeps in the order of the ranks
// key gives; two registrations of one rank are a programming error (what
// names the kind in the panic).
func InsertRanked[T any](list []*T, s *T, what string, key func(*T) (int, string)) []*T {
	rank, name := key(s)
	for _, o := range list {
		if r, n := key(o); r == rank {
			panic(fmt.Sprintf("stele/fsm: %s %s and %s both of rank %d", what, n, name, rank))
		}
	}
	list = append(list, s)
	slices.SortFunc(list, func(a, b *T) int { ra, _ := key(a); rb, _ := key(b); return ra - rb })
	return list
}

// BlockBeginStep is a module's work at the start of every block, before
// its transactions: check may refuse the block before anything of it is
// applied (the cluster's upgrade this binary cannot run; ApplyBlock
// returns the error), run then sees the block with the state's height and
// block time set to it (the cluster's upgrade activated, the trust
// module's signers noted). Both run in the order of the steps' ranks.
type BlockBeginStep struct {
	Rank   int
	Name   string
	Module Module
	Check  func(f *Machine, height int64) error
	Run    func(*Machine, Block)
}

// RegisterBlockBegin adds a module's block-begin step; two of one rank are
// a programming error.
func (r *Registry) RegisterBlockBegin(s BlockBeginStep) {
	r.BlockBeginSteps = InsertRanked(r.BlockBeginSteps, &s, "block-begin steps", func(s *BlockBeginStep) (int, string) { return s.Rank, s.Name })
}

// SetDigestDomain registers what opens the digest of the block being
// applied (the cluster module's); a second one is a programming error.
func (r *Registry) SetDigestDomain(fn func(*Machine) string) {
	if r.DigestDomainOf != nil {
		panic("stele/fsm: two digest domains registered")
	}
	r.DigestDomainOf = fn
}

// SetAppVersion registers what says the app version of the block being
// applied (the cluster module's); a second one is a programming error.
func (r *Registry) SetAppVersion(fn func(*Machine) uint32) {
	if r.AppVersionOf != nil {
		panic("stele/fsm: two app versions registered")
	}
	r.AppVersionOf = fn
}

// unknownUnder fails a transaction holding a command the app version of
// the block being applied does not have yet, with the error the binaries
// before the command give when they decode it.
func (r *Registry) unknownUnder(f *Machine, tx Tx) error {
	if r.AppVersionOf == nil {
		return nil
	}
	v := r.AppVersionOf(f)
	for _, c := range tx.Commands {
		if s := r.Commands[c.Kind()]; s != nil && s.Since > v {
			return fmt.Errorf("%w: unknown command kind %d", ErrMalformed, c.Kind())
		}
	}
	return nil
}

// TxFormat is a module's form of a transaction besides the plain one
// (tx.go): the trust module's certificates of the data plane (cert.go).
type TxFormat struct {
	Name   string
	Module Module
	// Is says that raw is in this form (it may then still be malformed).
	Is func(raw []byte) bool
	// Open checks raw against the state and returns its transaction and
	// the digest the block hashes it as (zero: the SHA-256 of raw). An
	// error rejects the transaction, unless halts says the block cannot
	// be applied here yet (ApplyBlock returns it).
	Open  func(f *Machine, raw []byte) (Tx, Digest, error)
	Halts func(error) bool
}

// RegisterTxFormat adds a module's form of transactions, asked after
// those registered before it.
func (r *Registry) RegisterTxFormat(t TxFormat) { r.TxFormats = append(r.TxFormats, &t) }

// CommandGate is a module's check of every command, run as the command is
// applied, after its stateless check and before its apply: a refusal (ok
// false) is the command's result and the command is not applied. The
// gates run in the order of their ranks; the first refusal wins.
//
// A gate BeforeCheck runs before the stateless check instead, for the
// commands whose apply does not check them in its own order
// (CheckedByApply): how a check that changed with an app version keeps
// its old results under the versions before (the tenants module's names).
type CommandGate struct {
	Rank        int
	Name        string
	Module      Module
	BeforeCheck bool
	Run         func(*Machine, Command) (Result, bool)
}

// RegisterCommandGate adds a module's command gate; two of one rank are a
// programming error.
func (r *Registry) RegisterCommandGate(g CommandGate) {
	key := func(g *CommandGate) (int, string) { return g.Rank, g.Name }
	if g.BeforeCheck {
		r.preCheckGates = InsertRanked(r.preCheckGates, &g, "command gates before the check", key)
		return
	}
	r.commandGates = InsertRanked(r.commandGates, &g, "command gates", key)
}

// BlockEndStep is a module's work at the end of every block, after the
// block's transactions and before its state is staged: timers on block
// time, housekeeping, dropping what expired. It returns a description of
// each change it made, which the core encodes into the block's digest
// (change.encode): the steps run in the order of their ranks, and their
// changes are hashed in that order (TestSteps pins it).
type BlockEndStep struct {
	Rank   int
	Name   string
	Module Module
	Run    func(*Machine) []Change
}

// RegisterBlockEnd adds a module's block-end step; two of one rank are a
// programming error.
func (r *Registry) RegisterBlockEnd(s BlockEndStep) {
	r.BlockEndSteps = InsertRanked(r.BlockEndSteps, &s, "block-end steps", func(s *BlockEndStep) (int, string) { return s.Rank, s.Name })
}

// SnapshotFiles is a module's files in a snapshot, besides the metadata
// store the core ships whole: a directory of the data directory,
// Options.Dir/<dir>, of files the module keeps beside its state in the
// store (the topics module's partition logs, Dir/logs). The core creates
// the directory at Open, ships the files capture records under <dir>/ in
// the snapshot, refuses a peer's snapshot with a path under <dir>/ that
// checkPath does not accept, and moves the restored directory into place
// before Open loads the restored state; what the files hold is the
// module's (its load step opens them).
type SnapshotFiles struct {
	Rank   int
	Name   string
	Module Module
	Dir    string // one path element, neither the store's nor a state file's
	// Capture records the module's committed files on the applier, right
	// after a Commit, without copying them (CaptureSnapshot). The parts
	// it returns are released even when it also returns an error.
	Capture func(*Machine) ([]CapturedFiles, error)
	// CheckPath says what is wrong with the path of a file of a peer's
	// snapshot under dir/ (given without "dir/"), or "" if nothing.
	CheckPath func(rest string) string
}

// CapturedFiles is a part of a module's captured files.
type CapturedFiles interface {
	// Materialise writes the files under root, the snapshot's files
	// directory, and lists them with their paths relative to root.
	Materialise(root string) ([]SnapFile, error)
	// Release lets the captured files go; it may be called more than once.
	Release()
}

// RegisterSnapshotFiles adds a module's snapshot files; two of one rank or
// one directory, or a directory that is not one plain path element or
// would collide with the store's files, are programming errors.
func (r *Registry) RegisterSnapshotFiles(s SnapshotFiles) {
	if s.Dir == "" || s.Dir == "." || s.Dir == ".." || strings.ContainsAny(s.Dir, `/\`) ||
		s.Dir == "meta" || s.Dir == MetaKVPath || s.Dir == "state" {
		panic(fmt.Sprintf("stele/fsm: snapshot files %s in directory %q", s.Name, s.Dir))
	}
	for _, o := range r.SnapshotFileSteps {
		if o.Rank == s.Rank || o.Dir == s.Dir {
			panic(fmt.Sprintf("stele/fsm: snapshot files %s and %s both of rank %d or in %q", o.Name, s.Name, s.Rank, s.Dir))
		}
	}
	r.SnapshotFileSteps = append(r.SnapshotFileSteps, &s)
	slices.SortFunc(r.SnapshotFileSteps, func(a, b *SnapshotFiles) int { return a.Rank - b.Rank })
}

// stateMarkSpec is the one field of the core's m/state record that a
// module owns. m/state (persist.go) was laid out before the modules, with
// the block time of the topics' last housekeeping pass as its fifth field;
// the core writes there what the registered module's value returns and
// hands the stored value to its restore at Open, so the record's bytes stay those of
// its format. With none registered the field is 0.
type StateMark struct {
	Name    string
	Module  Module
	Value   func(*Machine) int64
	Restore func(*Machine, int64)
}

// RegisterStateMark registers the state mark; a second one is a
// programming error (m/state has room for one).
func (r *Registry) RegisterStateMark(s StateMark) {
	if r.StateMark != nil {
		panic(fmt.Sprintf("stele/fsm: state marks %s and %s: m/state has one", r.StateMark.Name, s.Name))
	}
	r.StateMark = &s
}

// hook is one module's function at a hook point of a lower module: what
// the upper module does when the lower one reaches that point (a batch
// about to be appended, a topic deleted, housekeeping), without the lower
// module naming it. The lower module runs a point's hooks in the order of
// their rank, which is part of what is hashed where the hooks write state
// or answer with a result (TestHooks pins every point's order).
type hook[F any] struct {
	rank   int
	name   string
	module Module
	Fn     F
}

// HookPoint is a lower module's list of hooks, by rank.
type HookPoint[F any] struct {
	Name  string
	Owner Module // the lower module, which runs the hooks
	Hooks []hook[F]
}

// Register adds a hook (from the upper module's registration function);
// two hooks of one rank at one point, or a hook at a point its owner has
// not made yet (a module registered before the topics), are programming
// errors.
func (p *HookPoint[F]) Register(rank int, name string, m Module, fn F) {
	if p.Name == "" {
		panic(fmt.Sprintf("stele/fsm: hook %s at a hook point not made yet: register the point's module first", name))
	}
	for _, o := range p.Hooks {
		if o.rank == rank {
			panic(fmt.Sprintf("stele/fsm: hooks %s and %s at %s both of rank %d", o.name, name, p.Name, rank))
		}
	}
	p.Hooks = append(p.Hooks, hook[F]{rank: rank, name: name, module: m, Fn: fn})
	slices.SortFunc(p.Hooks, func(a, b hook[F]) int { return a.rank - b.rank })
}

// hookInfo describes a registered hook, without its function.
type hookInfo struct {
	Rank   int
	Name   string
	Module Module
}

// HookPointer is any hookPoint, for TestHooks.
type HookPointer interface {
	Describe() (name string, owner Module, hooks []hookInfo)
}

func (p *HookPoint[F]) Describe() (string, Module, []hookInfo) {
	out := make([]hookInfo, len(p.Hooks))
	for i, h := range p.Hooks {
		out[i] = hookInfo{h.rank, h.name, h.module}
	}
	return p.Name, p.Owner, out
}
