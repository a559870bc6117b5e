// Package cluster is the state machine's cluster module: the app version
// and upgrades without forks (appversion.go, upgrade.go), the cluster-wide
// broker configs (broker_configs.go: Kafka's dynamic broker configs and
// Stele's own, stele.admin.signed among them), and the proposer's part of
// each block (proposals.go: the append clock it opens each proposal with).
//
// It uses the trust module below it (the validators whose signatures
// schedule an upgrade) and the topics module's config definitions, which
// broker configs reuse; it imports no module above it, and works on
// Cluster, its part of a state machine, which the application (package
// fsm) makes with NewCluster and hands over through its ClusterModule
// method (clusterOf).
package cluster

// Upgrades without forks (docs/cluster.md, "Upgrades"). The state carries
// the application version: the rules, and what is hashed, that blocks are
// applied with. Version 1 is the format this package has always had; a
// binary runs the versions 1..MaxAppVersion. Validators holding more than
// two thirds of the voting power schedule a new version at a height with
// ScheduleUpgrade; block H is then applied under the new version, and a
// binary that cannot run it refuses to apply H (ErrUpgradeRequired), after
// committing H-1, so it never computes a different app hash: the operator
// starts the new binary on the same data directory and it continues at H.
// Everything version-dependent reads the cluster's AppVersion(), so a new binary
// replaying the chain from genesis applies the old rules before H and the
// new ones from H.
//
// State, authenticated (a leaf of the state trie each):
//
//	u/version          the app version (u32), absent while it is 1, so a
//	                   chain that never upgraded hashes as before
//	u/plan             the scheduled upgrade, until its height is applied
//	u/vote/<address>   a validator's vote for an upgrade not yet scheduled
//
// A validator votes by signing UpgradeStatement, which names the chain
// (CometBFT's genesis chain_id, Options.ChainID): a vote signed for one
// chain, say a staging cluster run with the same validator keys, is refused
// on another (INVALID_REQUEST, before any signature is checked; a signature
// over another chain id would not verify anyway). One command may carry the
// signatures of several. A validator's later vote replaces its earlier
// one. Once the validators whose latest votes name the same (height,
// version, name) hold more than two thirds of the power, that upgrade is
// scheduled, replacing one scheduled before that has not happened yet, and
// the votes are cleared. Scheduling the running version cancels: at its
// height nothing but the plan's removal happens.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// KindScheduleUpgrade votes for, and with enough votes schedules, an
// application version upgrade.
const KindScheduleUpgrade core.Kind = 22

// MinUpgradeDelay is how many heights past the one that applies it an
// upgrade must be scheduled: time for every operator to see it coming.
const MinUpgradeDelay = 10

// maxUpgradeName bounds an upgrade's name.
const maxUpgradeName = 64

// upgradeStatementPrefix opens an UpgradeStatement. v1 did not name the
// chain; v2 does, and a v1 signature verifies under nothing v2 builds.
var upgradeStatementPrefix = []byte("stele/upgrade-statement/v2\x00")

var (
	keyAppVersion  = []byte("u/version")
	keyUpgradePlan = []byte("u/plan")
	upgradeVotePfx = []byte("u/vote/")
)

// upgradeStateVer is the version of the stored upgrade state's encoding.
const upgradeStateVer uint8 = 1

// ErrUpgradeRequired is returned by ApplyBlock for the height of an upgrade
// to an app version this binary cannot run (wrapped in an
// *UpgradeRequiredError). Nothing of the block was applied; the state stays
// at the height before, and the new binary continues from there.
var ErrUpgradeRequired = errors.New("stele/fsm: upgrade required")

// UpgradeRequiredError says which upgrade this binary cannot run.
type UpgradeRequiredError struct {
	Plan       UpgradePlan
	MaxVersion uint32
}

func (e *UpgradeRequiredError) Error() string {
	return fmt.Sprintf("stele/fsm: upgrade required: the chain runs app version %d (upgrade %q) from height %d, "+
		"and this binary runs app versions up to %d; start a binary that runs version %d on the same data directory: it continues at height %d",
		e.Plan.Version, e.Plan.Name, e.Plan.Height, e.MaxVersion, e.Plan.Version, e.Plan.Height)
}

func (e *UpgradeRequiredError) Unwrap() error { return ErrUpgradeRequired }

// UpgradePlan is an upgrade: from Height on, blocks are applied under app
// version Version. Name is for people (a release name); it is signed.
type UpgradePlan struct {
	Height  int64  `json:"height"`
	Version uint32 `json:"version"`
	Name    string `json:"name"`
}

// UpgradeStatement returns the bytes a validator signs to vote for p on
// the chain chainID.
//
//	"stele/upgrade-statement/v2\x00" | u16 len(chain id) | chain id |
//	i64 height | u32 version | u16 len(name) | name
func UpgradeStatement(chainID string, p UpgradePlan) []byte {
	b := make([]byte, 0, len(upgradeStatementPrefix)+2+len(chainID)+8+4+2+len(p.Name))
	b = append(b, upgradeStatementPrefix...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(chainID)))
	b = append(b, chainID...)
	b = binary.BigEndian.AppendUint64(b, uint64(p.Height))
	b = binary.BigEndian.AppendUint32(b, p.Version)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.Name)))
	return append(b, p.Name...)
}

// ScheduleUpgrade carries validators' signatures of
// UpgradeStatement(ChainID, Plan). ChainID names the chain the votes were
// signed for, so that a vote for another chain is refused with a message
// that says so rather than as a bad signature.
type ScheduleUpgrade struct {
	ChainID string
	Plan    UpgradePlan
	Sigs    []trust.CertSig
}

func (ScheduleUpgrade) Kind() core.Kind { return KindScheduleUpgrade }

// clusterState is the cluster module's part of the state machine (embedded
// in FSM): the app version, the upgrade state and the dynamic broker
// configs.
// modCluster is the cluster module's name.
const ModCluster core.Module = "cluster"

// Cluster is the cluster module of a state machine: the core's machine it
// runs on, the trust module below it (and through it the topics module),
// its options and its state.
type Cluster struct {
	*core.Machine
	*trust.Trust
	opts ClusterOptions
	clusterState
}

// ClusterOptions are the cluster module's options (Options').
type ClusterOptions struct {
	ChainID           string
	Validators        *trust.ValidatorSet
	GenesisAppVersion uint32
	// AdminKey is the cluster administrator's ed25519 public key from the
	// genesis (nil: none), which may sign membership changes alone.
	AdminKey ed25519.PublicKey
	// Brokers is the genesis broker directory (directory.go), by node id.
	Brokers              []DirectoryBroker
	Logger               *slog.Logger
	MaxAppVersionForTest uint32
}

// NewCluster is the cluster module of the machine m, above the trust
// module t.
func NewCluster(m *core.Machine, t *trust.Trust, o ClusterOptions) *Cluster {
	f := &Cluster{Machine: m, Trust: t, opts: o}
	t.KnownSigners = f.knownSigners // directory.go
	return f
}

// clusterOf is the cluster module of the machine m.
func clusterOf(m *core.Machine) *Cluster {
	return m.App.(interface{ ClusterModule() *Cluster }).ClusterModule()
}

type clusterState struct {
	Version      uint32
	upgradePlan  *UpgradePlan
	upgradeVotes map[[20]byte]UpgradePlan
	upgradeDirty bool
	// The status as of the last Commit (Upgrade, UpgradeRequired).
	committedUpgrade struct {
		sync.Mutex
		status UpgradeStatus
	}

	brokerConfigsState // broker_configs.go
	membershipState    // membership.go
}

func (c ScheduleUpgrade) Encode(w *core.Writer) {
	w.Str(c.ChainID)
	w.I64(c.Plan.Height)
	w.I32(int32(c.Plan.Version))
	w.Str(c.Plan.Name)
	encodeSigs(w, c.Sigs)
}

// encodeSigs writes validators' signatures (an upgrade's, a membership
// change's): a count, then each address and signature.
func encodeSigs(w *core.Writer, sigs []trust.CertSig) {
	w.Count(len(sigs))
	for _, s := range sigs {
		w.Raw(s.Validator[:])
		w.Raw(s.Signature[:])
	}
}

// decodeSigs reads what encodeSigs wrote.
func decodeSigs(r *core.Reader) []trust.CertSig {
	var sigs []trust.CertSig
	n := r.Count(trust.CertSigSize)
	for i := 0; i < n && r.E == nil; i++ {
		var s trust.CertSig
		copy(s.Validator[:], r.Take(20))
		copy(s.Signature[:], r.Take(ed25519.SignatureSize))
		sigs = append(sigs, s)
	}
	return sigs
}

// signedOnce refuses signatures of which two are one validator's; what
// names what they sign.
func signedOnce(sigs []trust.CertSig, what string) core.Result {
	seen := make(map[[20]byte]bool, len(sigs))
	for _, s := range sigs {
		if seen[s.Validator] {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("validator %X signed the %s twice", s.Validator, what))
		}
		seen[s.Validator] = true
	}
	return core.Result{}
}

// RegisterCluster is the cluster module's registration function
// (buildRegistry, registry.go): its files' registrations.
func RegisterCluster(r *core.Registry, h *topics.TopicHooks) {
	registerScheduleUpgrade(r, h) // upgrade.go
	registerUpgradeSteps(r, h)    // upgrade.go
	registerBrokerConfigs(r, h)   // broker_configs.go
	registerProposals(r, h)       // proposals.go
	registerMembership(r, h)      // membership.go
	registerReplicaAlive(r, h)    // alive.go
}

// registerScheduleUpgrade registers ScheduleUpgrade (RegisterCluster
// calls it).
func registerScheduleUpgrade(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, clusterOf, KindScheduleUpgrade, "ScheduleUpgrade", ModCluster, decodeScheduleUpgrade,
		func(c core.Command) core.Result { return checkUpgrade(c.(ScheduleUpgrade)) },
		func(f *Cluster, c ScheduleUpgrade, _ core.CmdAt) core.Result { return f.scheduleUpgrade(c) })
}

func decodeScheduleUpgrade(r *core.Reader) ScheduleUpgrade {
	c := ScheduleUpgrade{ChainID: r.Str()}
	c.Plan = UpgradePlan{Height: r.I64(), Version: uint32(r.I32()), Name: r.Str()}
	c.Sigs = decodeSigs(r)
	return c
}

// SignUpgrade returns key's signature of p on the chain chainID, as
// validator addr.
func SignUpgrade(chainID string, p UpgradePlan, addr [20]byte, key ed25519.PrivateKey) trust.CertSig {
	s := trust.CertSig{Validator: addr}
	copy(s.Signature[:], ed25519.Sign(key, UpgradeStatement(chainID, p)))
	return s
}

// checkUpgrade is the stateless check of a ScheduleUpgrade.
func checkUpgrade(c ScheduleUpgrade) core.Result {
	if c.ChainID == "" || len(c.ChainID) > trust.MaxChainID {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("an upgrade vote names the chain it is for, 1 to %d bytes, got %d", trust.MaxChainID, len(c.ChainID)))
	}
	p := c.Plan
	if c.ChainID == "" || len(c.ChainID) > trust.MaxChainID {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("an upgrade vote names the chain it is signed for, 1 to %d bytes, got %d", trust.MaxChainID, len(c.ChainID)))
	}
	if p.Height <= 0 || p.Version == 0 {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("an upgrade needs a height and a version above 0, got height %d version %d", p.Height, p.Version))
	}
	if len(p.Name) > maxUpgradeName {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("an upgrade's name is at most %d bytes, got %d", maxUpgradeName, len(p.Name)))
	}
	for _, r := range p.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == '+') {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("upgrade name %q: use letters, digits and . _ - + only", p.Name))
		}
	}
	if len(c.Sigs) == 0 || len(c.Sigs) > trust.MaxCertSigs {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("an upgrade carries 1 to %d validator signatures, got %d", trust.MaxCertSigs, len(c.Sigs)))
	}
	return signedOnce(c.Sigs, "upgrade")
}

// scheduleUpgrade applies a ScheduleUpgrade: every signature must be a
// validator's good one, or nothing is recorded.
func (f *Cluster) scheduleUpgrade(c ScheduleUpgrade) core.Result {
	vs := f.Trust.Validators() // the genesis set, as membership changed it
	if vs == nil {
		return core.Fail(kerr.ClusterAuthorizationFailed.Code, "this broker has no validator set to check upgrade votes against")
	}
	if f.opts.ChainID == "" {
		return core.Fail(kerr.ClusterAuthorizationFailed.Code, "this broker does not know its chain id to check upgrade votes against")
	}
	if c.ChainID != f.opts.ChainID {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the upgrade votes are for chain %q, and this is chain %q: sign the upgrade for this chain", c.ChainID, f.opts.ChainID))
	}
	p := c.Plan
	stmt := UpgradeStatement(f.opts.ChainID, p)
	for _, s := range c.Sigs {
		v, ok := vs.Lookup(s.Validator)
		if !ok {
			return core.Fail(kerr.ClusterAuthorizationFailed.Code, fmt.Sprintf("%X is not a validator: only validators vote for upgrades", s.Validator))
		}
		if !ed25519.Verify(v.PubKey, stmt, s.Signature[:]) {
			return core.Fail(kerr.ClusterAuthorizationFailed.Code, fmt.Sprintf("validator %X's signature of the upgrade does not verify", s.Validator))
		}
	}
	if p.Version < f.Version {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the chain runs app version %d: an upgrade cannot go back to %d (schedule %d to cancel a pending upgrade)", f.Version, p.Version, f.Version))
	}
	if p.Height < f.Height+MinUpgradeDelay {
		return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("height %d is too soon: an upgrade must be at least %d heights ahead of the block that schedules it (%d), at %d or later", p.Height, MinUpgradeDelay, f.Height, f.Height+MinUpgradeDelay))
	}
	if f.upgradeVotes == nil {
		f.upgradeVotes = map[[20]byte]UpgradePlan{}
	}
	for _, s := range c.Sigs {
		f.upgradeVotes[s.Validator] = p
	}
	f.upgradeDirty = true
	power := votedPower(vs, func(a [20]byte) bool { q, ok := f.upgradeVotes[a]; return ok && q == p })
	if vs.Supermajority(power) {
		f.upgradePlan = &p
		clear(f.upgradeVotes)
		f.opts.Logger.Info("upgrade scheduled", "height", p.Height, "version", p.Version, "name", p.Name, "at_height", f.Height)
	}
	return core.Result{}
}

// votedPower is the power of the validators of vs whose vote voted
// counts (upgrades', membership changes').
func votedPower(vs *trust.ValidatorSet, voted func([20]byte) bool) int64 {
	var power int64
	for _, v := range vs.Validators() { // in address order
		if voted(v.Address) {
			power += v.Power
		}
	}
	return power
}

// upgradeDue is checked before block height is applied: when the
// scheduled upgrade is due and this binary cannot run its version, the
// block must not be applied.
func (f *Cluster) upgradeDue(height int64) error {
	p := f.upgradePlan
	if p == nil || p.Height > height {
		return nil
	}
	if p.Version > f.maxAppVersion() {
		return &UpgradeRequiredError{Plan: *p, MaxVersion: f.maxAppVersion()}
	}
	return nil
}

// maxAppVersion is MaxAppVersion, or what a test stands in for it.
func (f *Cluster) maxAppVersion() uint32 {
	if f.opts.MaxAppVersionForTest != 0 {
		return f.opts.MaxAppVersionForTest
	}
	return MaxAppVersion
}

// activateUpgrade switches to the scheduled version at its height.
func (f *Cluster) activateUpgrade(height int64) {
	p := f.upgradePlan
	if p == nil || p.Height > height {
		return
	}
	f.opts.Logger.Info("upgrade: applying blocks under a new app version", "height", height, "from", f.Version, "to", p.Version, "name", p.Name)
	f.Version = p.Version
	f.upgradePlan = nil
	clear(f.upgradeVotes)
	f.upgradeDirty = true
}

// UpgradeRequired returns an *UpgradeRequiredError when the next block is
// the height of an upgrade this binary cannot run: the broker must stop
// (and not start) rather than wait for it.
func (f *Cluster) UpgradeRequired() error {
	f.committedUpgrade.Lock()
	defer f.committedUpgrade.Unlock()
	s := f.committedUpgrade.status
	if p := s.Plan; p != nil && p.Height <= s.Height+1 && p.Version > f.maxAppVersion() {
		return &UpgradeRequiredError{Plan: *p, MaxVersion: f.maxAppVersion()}
	}
	return nil
}

// UpgradeVote is a validator's vote for an upgrade not yet scheduled.
type UpgradeVote struct {
	Validator [20]byte
	Plan      UpgradePlan
}

// UpgradeStatus is the committed app version and upgrade state.
type UpgradeStatus struct {
	// Height is the committed height the status is of.
	Height int64
	// ChainID is the chain's id (Options.ChainID), which votes are signed for.
	ChainID string
	// Version is the app version the chain runs; MaxVersion the highest
	// this binary runs.
	Version, MaxVersion uint32
	// Plan is the scheduled upgrade (nil: none).
	Plan *UpgradePlan
	// Votes are the validators' votes towards another upgrade, by address.
	Votes []UpgradeVote
}

// Upgrade returns the committed upgrade status.
func (f *Cluster) Upgrade() UpgradeStatus {
	f.committedUpgrade.Lock()
	defer f.committedUpgrade.Unlock()
	s := f.committedUpgrade.status
	s.Votes = append([]UpgradeVote(nil), s.Votes...)
	if s.Plan != nil {
		p := *s.Plan
		s.Plan = &p
	}
	return s
}

// AppVersion returns the committed app version.
func (f *Cluster) AppVersion() uint32 {
	f.committedUpgrade.Lock()
	defer f.committedUpgrade.Unlock()
	return f.committedUpgrade.status.Version
}

// AppliedVersion is the app version after the last ApplyBlock, committed
// or not. Only the applier (the goroutine calling ApplyBlock) may call it.
func (f *Cluster) AppliedVersion() uint32 { return f.Version }

// upgradeStatus is the applier's upgrade state, for publish.
func (f *Cluster) UpgradeStatus() UpgradeStatus {
	s := UpgradeStatus{Height: f.Height, ChainID: f.opts.ChainID, Version: f.Version, MaxVersion: f.maxAppVersion()}
	if f.upgradePlan != nil {
		p := *f.upgradePlan
		s.Plan = &p
	}
	for _, a := range sortedVoters(f.upgradeVotes) {
		s.Votes = append(s.Votes, UpgradeVote{Validator: a, Plan: f.upgradeVotes[a]})
	}
	return s
}

func sortedVoters(m map[[20]byte]UpgradePlan) [][20]byte {
	out := make([][20]byte, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][:], out[j][:]) < 0 })
	return out
}

func EncodePlan(p UpgradePlan) []byte {
	w := &core.Writer{}
	w.U8(upgradeStateVer)
	w.I64(p.Height)
	w.I32(int32(p.Version))
	w.Str(p.Name)
	return w.B
}

func DecodePlan(v []byte) (UpgradePlan, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); r.E == nil && ver != upgradeStateVer {
		r.Fail("upgrade state format %d", ver)
	}
	p := UpgradePlan{Height: r.I64(), Version: uint32(r.I32()), Name: r.Str()}
	return p, r.Done()
}

// decodeAppVersion reads u/version: the app version, a u32.
func DecodeAppVersion(v []byte) (uint32, error) {
	if len(v) != 4 {
		return 0, fmt.Errorf("stele/fsm: bad %s value %x", keyAppVersion, v)
	}
	return binary.BigEndian.Uint32(v), nil
}

// persistUpgrade stages the upgrade state when the block changed it: the
// version (only once it is not 1), the plan, and every vote anew.
func (f *Cluster) persistUpgrade(b *core.StateBatch) {
	if !f.upgradeDirty {
		return
	}
	f.upgradeDirty = false
	if f.Version != 1 {
		b.Set(keyAppVersion, binary.BigEndian.AppendUint32(nil, f.Version))
	}
	if f.upgradePlan != nil {
		b.Set(keyUpgradePlan, EncodePlan(*f.upgradePlan))
	} else {
		b.Delete(keyUpgradePlan)
	}
	b.DeletePrefix(upgradeVotePfx)
	for _, a := range sortedVoters(f.upgradeVotes) {
		b.Set(append(bytes.Clone(upgradeVotePfx), a[:]...), EncodePlan(f.upgradeVotes[a]))
	}
}

// loadUpgrade reads the upgrade state, and refuses a state applied under
// an app version this binary does not run (before the topics' load opens
// any partition log: the step's rank is below theirs).
func (f *Cluster) loadUpgrade() error {
	f.Version, f.upgradePlan, f.upgradeDirty = 1, nil, false
	if v, ok, err := f.Store.Get(keyAppVersion); err != nil {
		return err
	} else if ok {
		if f.Version, err = DecodeAppVersion(v); err != nil {
			return err
		}
	} else if f.Height == 0 && f.opts.GenesisAppVersion > 1 {
		// A new chain starts under its genesis version, written with the
		// first block.
		f.Version, f.upgradeDirty = f.opts.GenesisAppVersion, true
	}
	if f.Version > f.maxAppVersion() {
		// Blocks were applied under this version: a binary that cannot
		// run it must not apply more.
		return &UpgradeRequiredError{Plan: UpgradePlan{Height: f.Height + 1, Version: f.Version, Name: "applied already"}, MaxVersion: f.maxAppVersion()}
	}
	if v, ok, err := f.Store.Get(keyUpgradePlan); err != nil {
		return err
	} else if ok {
		p, err := DecodePlan(v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading the upgrade plan: %w", err)
		}
		f.upgradePlan = &p
	}
	f.ChainBound = f.Version >= chainCertsVersion
	f.upgradeVotes = map[[20]byte]UpgradePlan{}
	return f.Store.Scan(upgradeVotePfx, func(k, v []byte) error {
		var a [20]byte
		if len(k) != len(upgradeVotePfx)+20 {
			return fmt.Errorf("stele/fsm: bad upgrade vote key %x", k)
		}
		copy(a[:], k[len(upgradeVotePfx):])
		p, err := DecodePlan(v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading upgrade vote of %X: %w", a, err)
		}
		f.upgradeVotes[a] = p
		return nil
	})
}

// registerUpgradeSteps registers the upgrades' block-begin step, the
// digest domain of the app version and the app version's step
// (RegisterCluster calls it).
func registerUpgradeSteps(r *core.Registry, h *topics.TopicHooks) {
	// An upgrade this binary cannot run stops the block before anything
	// of it is applied; one it can run is activated at its height.
	core.RegisterModuleBlockBegin(r, clusterOf, core.ModuleBlockBegin[*Cluster]{Rank: 10, Name: "upgrades", Module: ModCluster,
		Check: (*Cluster).upgradeDue,
		Run: func(f *Cluster, b core.Block) {
			f.activateUpgrade(b.Height)
			f.ChainBound = f.Version >= chainCertsVersion
		}})
	r.SetDigestDomain(func(m *core.Machine) string { return blockDigestDomain(clusterOf(m).Version) })
	r.SetAppVersion(func(m *core.Machine) uint32 { return clusterOf(m).Version })
	core.RegisterModuleStep(r, clusterOf, core.ModuleStep[*Cluster]{Rank: 50, Name: "app version and upgrades", Module: ModCluster,
		Load:  (*Cluster).loadUpgrade,
		Stage: func(f *Cluster, b *core.StateBatch) error { f.persistUpgrade(b); return nil },
		Publish: func(f *Cluster, _ bool) {
			s := f.UpgradeStatus()
			f.committedUpgrade.Lock()
			f.committedUpgrade.status = s
			f.committedUpgrade.Unlock()
			f.ChainBoundNext.Store(f.versionAt(f.Height+1) >= chainCertsVersion)
		}})
}
