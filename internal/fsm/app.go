// Package fsm is Stele's replicated state machine: the modules (topics,
// keys, subjects, views, groups, producers, trust, cluster, security, schemas, shares, tenants; the registry's
// documentation in core/registry.go lists what each owns) assembled on
// the core (package core: blocks, the codec, the registry, the
// authenticated store, the app hash, Commit, snapshots and proofs), and
// the façade the broker imports.
//
// The core is a package of its own (core/), and so is each module
// (topics/, keys/, subjects/, views/, groups/, trust/, producers/, cluster/,
// security/, schemas/, shares/, tenants/). Every
// command is registered by its module with its decoder, check and apply,
// and so is every step of the core a module takes part in: reading its
// state back from the store at Open, staging the block's changes,
// publishing at Commit. A module registers from its registration function
// (topics.RegisterTopics, keys.RegisterKeys, ...), which buildRegistry
// (app.go) calls in a fixed order to build the one registry, never
// changed after; no package of the state machine has init functions or a
// package-level variable written after it is initialised
// (TestNoMutablePackageState). Each module works on its own type, its
// part of a state machine (topics.Topics, keys.Index, subjects.Subjects, groups.Coordinator,
// producers.TxnCoordinator, trust.Trust, cluster.Cluster,
// security.Security, schemas.Schemas, shares.Shares, tenants.Tenants), which Open makes, FSM embeds beside the core's
// Machine, and the module finds again from the machine through the
// application (FSM.TopicsModule and its kin); the views module has no
// state of its own and works on the topics and subjects modules'. The modules form layers
// without a cycle, topics at the bottom: a module imports only the
// modules below it, and a lower module calls an upper one only through
// the hook points it offers (topics/topic_hooks.go), which the upper
// module registers for, in an order of rank; which module may use which
// is pinned by TestModuleLayering and TestLayeringIsADAG
// (modules_test.go), and Go's import rules keep it.
//
// Files are appended during apply; a crash before Commit is repaired at
// Open by cutting every log back to its committed end, after which the
// orderer replays the block. Compaction, the one slow file rewrite, is
// decided in apply and written by a background goroutine after Commit
// (compactor.go): the next housekeeping pass over the partition and
// CaptureSnapshot wait for it, so nothing hashed depends on when it
// finished, and Open reruns a pass a crash interrupted from its plan
// file. Those goroutines and syncLogs' are the package's only ones;
// neither changes the state.
//
// The state machine (fsm, its core and its modules) imports of Stele's
// only its own packages, storage, record, subject, sasl and pkg/proof: never
// consensus, the wall clock or a front-end (TestImportsPointDown).
package fsm

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/keys"
	"github.com/stele-io/stele/internal/fsm/plugins"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/schemas"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/fsm/shares"
	"github.com/stele-io/stele/internal/fsm/subjects"
	"github.com/stele-io/stele/internal/fsm/tenants"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/fsm/views"
)

// The application: the core's machine with the modules assembled on it.
// FSM embeds the core's Machine (its fields and methods are promoted) and
// each module's part; the registry embeds the core's and adds the topics
// module's hook points. The modules register their commands and steps
// with functions of their own types (core.RegisterModuleCommand and its
// kin), which find a machine's part through the application's
// XxxModule methods. The façade the broker imports (Open, Validate,
// Precheck, DecodeTx, EncodeTx, CheckCommand, KindName) is here; the
// modules' names it uses are aliased in core_api.go and the *_api.go
// files.

// FSM is the state machine. ApplyBlock and Commit are called by one goroutine
// (the applier); View, Info and the partitions' read methods by any.
//
// It embeds the core's Machine and each module's part, a type declared
// in that module's package, so that their exported fields and methods are
// promoted (f.WaitCompactions, f.Users); TestModuleLayering checks that
// it embeds nothing else.
type FSM struct {
	*core.Machine
	opts Options
	// reg is what the modules registered: the package's assembled
	// registry, never changed.
	reg *registry

	*topics.Topics            // topics/
	*keys.Index               // keys/
	*groups.Coordinator       // groups/
	*producers.TxnCoordinator // producers/
	*trust.Trust              // trust/
	*cluster.Cluster          // cluster/
	*security.Security        // security/
	*tenants.Tenants          // tenants/
	*subjects.Subjects        // subjects/
	*schemas.Schemas          // schemas/
	*shares.Shares            // shares/
	*plugins.Plugins          // plugins/
}

// TopicsModule is f's topics module (how the topics module finds itself
// in a machine's application).
func (f *FSM) TopicsModule() *topics.Topics { return f.Topics }

// KeysModule is f's keys module (keysOf).
func (f *FSM) KeysModule() *keys.Index { return f.Index }

// GroupsModule is f's groups module (groupsOf).
func (f *FSM) GroupsModule() *groups.Coordinator { return f.Coordinator }

// TrustModule is f's trust module (trustOf).
func (f *FSM) TrustModule() *trust.Trust { return f.Trust }

// ProducersModule is f's producers module (producersOf).
func (f *FSM) ProducersModule() *producers.TxnCoordinator { return f.TxnCoordinator }

// ClusterModule is f's cluster module (clusterOf).
func (f *FSM) ClusterModule() *cluster.Cluster { return f.Cluster }

// SecurityModule is f's security module (securityOf).
func (f *FSM) SecurityModule() *security.Security { return f.Security }

// TenantsModule is f's tenants module (tenantsOf).
func (f *FSM) TenantsModule() *tenants.Tenants { return f.Tenants }

// SubjectsModule is f's subjects module (subjectsOf).
func (f *FSM) SubjectsModule() *subjects.Subjects { return f.Subjects }

// SchemasModule is f's schemas module (schemasOf).
func (f *FSM) SchemasModule() *schemas.Schemas { return f.Schemas }

// SharesModule is f's share groups module (sharesOf).
func (f *FSM) SharesModule() *shares.Shares { return f.Shares }

// PluginsModule is f's plugins module (pluginsOf).
func (f *FSM) PluginsModule() *plugins.Plugins { return f.Plugins }

// appOf is the FSM machine m belongs to.
func appOf(m *core.Machine) *FSM { return m.App.(*FSM) }

// Options configures a state machine. Everything here that influences Apply
// must be the same on every broker of a cluster.
type Options struct {
	// Dir holds the partition logs (Dir/logs) and the metadata store (Dir/meta).
	Dir string
	// HousekeepingIntervalMs is how often, in block time, retention and
	// compaction are evaluated. Default 30000.
	HousekeepingIntervalMs int64
	// Validators are the genesis validators: certified transactions'
	// signatures are checked against them as the chain's membership
	// changes them (cluster/membership.go); nil refuses every certified
	// transaction (inline transactions only).
	Validators *trust.ValidatorSet
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
	// that block's app version has users (security/users.go).
	GenesisUsers []security.GenesisUser
	// GenesisAdminKey is the cluster administrator's ed25519 public key,
	// the genesis app_state's admin_key (nil: none): it may sign
	// membership changes alone (cluster/membership_change.go).
	GenesisAdminKey ed25519.PublicKey
	// GenesisBrokers is the genesis app_state's broker directory, which
	// membership changes add to (cluster/directory.go).
	GenesisBrokers []cluster.DirectoryBroker
	// Batches reads certified transactions' payloads; required when
	// Validators is set.
	Batches trust.BatchSource
	// OffsetsRetentionMs is offsets.retention.minutes in milliseconds: how
	// long the committed offsets of a group without members are kept.
	// Default 7 days, as Kafka's.
	OffsetsRetentionMs int64
	// WithoutKeyIndex turns the key index off (and with it optimistic
	// concurrency and key snapshots' reads, and records' subjects: the
	// produce's pass over each batch's records is skipped), to measure
	// what the index costs the produce path (BenchmarkProduceKeyIndex).
	// Every broker of a chain must agree on it; nothing outside benchmarks
	// sets it.
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

// machineOptions is the core's part of o.
func (o *Options) machineOptions() core.Options {
	return core.Options{Dir: o.Dir, StoreFS: o.StoreFS, Logger: o.Logger, TraceState: o.TraceState, Reword: o.rewordForTest}
}

// Open loads the committed state from opts.Dir (m/state, then every
// module's load step in rank order), cuts every partition log back to its
// committed end, and redoes interrupted deletions and compactions.
func Open(opts Options) (*FSM, error) {
	opts.setDefaults()
	var f *FSM
	bind := func(m *core.Machine) any {
		f = &FSM{Machine: m, opts: opts, reg: assembled}
		f.Topics = topics.NewTopics(m, assembled.TopicHooks, topics.TopicOptions{Dir: opts.Dir, HousekeepingIntervalMs: opts.HousekeepingIntervalMs,
			CompactionWorkers: opts.CompactionWorkers, WithoutKeyIndex: opts.WithoutKeyIndex, Logger: opts.Logger, PassHookForTest: opts.passHookForTest})
		f.Index = keys.NewIndex(m, f.Topics)
		f.Subjects = subjects.NewSubjects(m, f.Topics)
		f.Coordinator = groups.NewCoordinator(m, f.Topics, opts.OffsetsRetentionMs)
		f.TxnCoordinator = producers.NewTxnCoordinator(m, f.Topics, f.Coordinator)
		f.Trust = trust.NewTrust(m, f.Topics, opts.ChainID, opts.Validators, opts.Batches)
		f.Cluster = cluster.NewCluster(m, f.Trust, cluster.ClusterOptions{ChainID: opts.ChainID, Validators: opts.Validators, GenesisAppVersion: opts.GenesisAppVersion, AdminKey: opts.GenesisAdminKey, Brokers: opts.GenesisBrokers,
			Logger: opts.Logger, MaxAppVersionForTest: opts.maxAppVersionForTest})
		f.Security = security.NewSecurity(m, f.Cluster, security.SecurityOptions{ChainID: opts.ChainID, GenesisUsers: opts.GenesisUsers})
		f.Schemas = schemas.NewSchemas(m, f.Cluster)
		// stele.subject.from=field:PATH finds subjects with the registry.
		f.Topics.SubjectOfField = f.Schemas.SubjectOfField
		f.Subjects.CommittedSubjectOfField = f.Schemas.CommittedSubjectOfField
		f.Shares = shares.NewShares(m, f.Topics, f.Coordinator, f.Cluster)
		// A consumer group may not take a share group's name.
		f.Coordinator.IsShareGroup = f.Shares.IsShareGroup
		f.Plugins = plugins.NewPlugins(m, f.Topics, f.Cluster)
		f.Tenants = tenants.NewTenants(m, tenants.Modules{Topics: f.Topics, Groups: f.Coordinator, Producers: f.TxnCoordinator,
			Trust: f.Trust, Cluster: f.Cluster, Security: f.Security, Schemas: f.Schemas, Shares: f.Shares, Plugins: f.Plugins})
		return f
	}
	reopen := func(dir string) (*core.Machine, error) {
		o := opts
		o.Dir = dir
		g, err := Open(o)
		if err != nil {
			return nil, err
		}
		return g.Machine, nil
	}
	if _, err := core.OpenMachine(opts.machineOptions(), assembled.Registry, bind, reopen); err != nil {
		return nil, err
	}
	return f, nil
}

// registry is what the modules register: the core's registry and the
// topics module's hook points. Built by buildRegistry, never changed
// afterwards.
type registry struct {
	*core.Registry
	// topicHooks are the topics module's hook points (topic_hooks.go),
	// made by its registration function, which runs first.
	*topics.TopicHooks
	// AdminGates is signed administration's extension point, made by the
	// security module's registration function, where the tenants module
	// adds its commands.
	AdminGates *security.AdminGates
}

// newRegistry is a registry no module has registered in: the core's and
// hook points not made yet (topics.RegisterTopics makes them).
func newRegistry() *registry {
	return &registry{Registry: core.NewRegistry(), TopicHooks: topics.UnmadeTopicHooks()}
}

// assembled is the registry of every state machine and of the stateless
// codec, built once as the package is initialised and never written
// afterwards (see the package's registry.go: why it is a package value,
// and why the modules' code reaches it through FSM.reg).
var assembled = buildRegistry()

// buildRegistry assembles the state machine: each module's registration
// function, in the order of the layering from the bottom up. The topics
// module goes first, as it makes the hook points the modules above it
// register at; otherwise the order of the calls decides nothing (every
// ordered list is kept by rank), so a module added later goes after
// those it uses.
func buildRegistry() *registry {
	r := newRegistry()
	r.TopicHooks = topics.RegisterTopics(r.Registry)
	keys.RegisterKeys(r.Registry, r.TopicHooks)
	subjects.RegisterSubjects(r.Registry, r.TopicHooks)
	views.RegisterViews(r.TopicHooks)
	groups.RegisterGroups(r.Registry, r.TopicHooks)
	producers.RegisterProducers(r.Registry, r.TopicHooks)
	trust.RegisterTrust(r.Registry, r.TopicHooks)
	cluster.RegisterCluster(r.Registry, r.TopicHooks)
	r.AdminGates = security.RegisterSecurity(r.Registry)
	schemas.RegisterSchemas(r.Registry, r.TopicHooks)
	shares.RegisterShares(r.Registry, r.TopicHooks)
	registerPlugins(r)
	tenants.RegisterTenants(r.Registry, r.AdminGates, r.TopicHooks)
	return r
}

// registerPlugins registers the plugins module, its commands gated by
// signed administration with ALTER_CONFIGS on their topic (after the
// security module, which makes the gates).
func registerPlugins(r *registry) {
	plugins.RegisterPlugins(r.Registry, r.TopicHooks, func(k core.Kind, topic func(core.Command) string) {
		r.AdminGates.Gate(k, func(c core.Command) []security.AdminCheck {
			return []security.AdminCheck{{ResourceType: security.ACLResourceTopic, Name: topic(c), Op: security.ACLOpAlterConfigs}}
		})
	})
}

// KindName is the name a command kind was registered with, or Kind(n).
func KindName(k core.Kind) string { return assembled.KindName(k) }

// CheckCommand validates a command on its own, without the state: what
// every broker would refuse to order. Apply checks it again.
func CheckCommand(c core.Command) core.Result { return assembled.CheckCommand(c) }

// DecodeTx decodes a transaction. Byte slices in the result (such as a
// Produce's Records) alias b. It checks the encoding only; whether the
// commands make sense is checked by Validate and by Apply.
func DecodeTx(b []byte) (core.Tx, error) { return assembled.DecodeTx(b) }

// EncodeTx encodes a transaction.
func EncodeTx(tx core.Tx) []byte { return assembled.EncodeTx(tx) }

// DecodeCommand decodes EncodeCommand's bytes: one command, as a
// SignedAdmin carries it.
func DecodeCommand(b []byte) (core.Command, error) { return security.DecodeOne(assembled.Registry, b) }

// checkSnapshotPath accepts only the paths a snapshot may hold (the
// core's checkSnapshotPath with the modules' directories).
func checkSnapshotPath(p string) error { return assembled.CheckSnapshotPath(p) }

// NewRestore checks an offered snapshot (format, metadata against the
// hash, height, chunk count and trusted app hash) and prepares the staging
// directory dir, removing whatever was there. dir must be on the data
// directory's file system (RestoreSnapshot renames from it).
func NewRestore(dir string, o core.SnapshotOffer) (*core.Restore, error) {
	return core.NewRestoreWith(assembled.Registry, dir, o)
}

// CheckTx is the mempool's admission check: Precheck for an inline
// transaction; for a certificate, that it decodes, is of a form the next
// block may hold (ValidateTx) and its signatures are valid (so an honest
// proposer never proposes one that peers refuse). It reads only what was
// published at the last commit: the mempool calls it while blocks apply.
func (f *FSM) CheckTx(tx []byte) error {
	if trust.IsCertifiedTx(tx) {
		return f.Trust.CheckCertifiedTx(tx)
	}
	return Precheck(tx)
}

// ValidateTx is the full check of a proposal's transaction: Validate for an
// inline one; for a certificate, its form and signatures (its payload was
// checked by the honest signer that stored it, and is checked again when
// applied). The orderer calls it between blocks, for the next one: a
// chain-bound certificate is valid once the next block applies them (app
// version 2 on), and one that names no chain stays valid, refused when
// applied under such a version with ErrResubmit, so that its producer is
// answered at once and retries.
func (f *FSM) ValidateTx(tx []byte) error {
	if trust.IsCertifiedTx(tx) {
		return f.Trust.CheckCertifiedTx(tx)
	}
	_, err := Validate(tx)
	return err
}

// Validate checks that tx decodes and that each command is well formed on its
// own (names, counts, record batches and their CRCs). It depends on nothing
// but tx, so every broker gives the same answer; whether a command applies to
// the current state is decided by ApplyBlock.
func Validate(tx []byte) (core.Tx, error) {
	t, err := DecodeTx(tx)
	if err != nil {
		return core.Tx{}, err
	}
	for i, c := range t.Commands {
		if r := CheckCommand(c); r.Code != 0 {
			return core.Tx{}, fmt.Errorf("%w: command %d (%s): %s", core.ErrMalformed, i, KindName(c.Kind()), r.Message)
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
		if err := assembled.AdmitCommand(c); err != nil {
			return fmt.Errorf("%w: command %d (%s): %v", core.ErrMalformed, i, KindName(c.Kind()), err)
		}
	}
	return nil
}
