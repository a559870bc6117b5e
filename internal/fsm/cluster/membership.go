package cluster

// Membership: the validator set as replicated state (docs/cluster.md,
// "Membership"). The genesis names the first validators; from app version
// 7 (MembershipVersion) the chain changes their power, and every change is
// both state (what certificates and upgrade votes are checked against,
// trust.SetValidators) and a validator update handed to CometBFT with the
// block's outcome (core.ValidatorUpdate), which CometBFT applies two
// heights later.
//
// What changes the set: the validators' signed votes (membership_change.go:
// add a broker as a replica (directory.go), demote to a replica, promote
// back), and evidence. A validator that CometBFT's
// committed evidence proves to have misbehaved (a duplicate vote, or a
// light-client attack) loses all its power in the block that commits the
// evidence, with the reason recorded; it can come back only with a new key
// (a broker added anew, directory.go). Evidence against a replica (a validator
// demoted since it misbehaved, membership_change.go) records the same, so
// it is never promoted again. The removal is refused, and only
// logged, when it would leave no validator with power. Evidence against a
// key voted out already changes nothing:
// CometBFT keeps committing evidence for up to two heights after a removal
// (its set changes then), and one removal per key is all there is.
//
// State, authenticated (one leaf per validator the chain changed):
//
//	u/validator/<address>   its key, its power now, and why it lost it
//
// A genesis validator with no record has its genesis power. Versions
// before 7 never write a record, so their state hashes as before.

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// MembershipVersion is the app version from which committed evidence
// removes a validator's power.
const MembershipVersion = 7

var validatorPfx = []byte("u/validator/")

// ValidatorRecord is what the chain says about a validator whose power it
// changed.
type ValidatorRecord struct {
	Address [20]byte
	PubKey  ed25519.PublicKey
	Power   int64
	// Reason is why its power last changed.
	Reason PowerReason
	// ChangedAt is the height of the block that last changed its power
	// and ChangedAtMs that block's time; EvidenceHeight the height of the
	// misbehavior that block proved (a misbehavior's Reason only).
	ChangedAt, ChangedAtMs, EvidenceHeight int64
}

// PowerReason is why the chain changed a validator's power: the
// validators' votes (membership_change.go), committed evidence of a
// misbehavior (its core.MisbehaviorKind, the same numbers), or downtime
// (downtime.go).
type PowerReason uint8

const (
	ReasonVote              PowerReason = 0
	ReasonDuplicateVote     PowerReason = PowerReason(core.DuplicateVote)
	ReasonLightClientAttack PowerReason = PowerReason(core.LightClientAttack)
	ReasonDowntime          PowerReason = 3
	// ReasonRemoved: the validators (or the cluster administrator) took
	// the broker out of the cluster (membership_change.go).
	ReasonRemoved PowerReason = 4
	// ReasonAdded: the validators (or the cluster administrator) added the
	// broker to the directory as a replica (directory.go).
	ReasonAdded PowerReason = 5
	// ReasonRotatedOut: the broker's key was replaced by a new one (`stele
	// cluster rotate-key`, directory.go), which took its power; the old
	// key is out for good.
	ReasonRotatedOut PowerReason = 6
	// ReasonRotatedIn: the new key of a broker whose key was rotated, with
	// the power the old one had.
	ReasonRotatedIn PowerReason = 7
)

// Misbehaved reports whether the reason is a misbehavior: the key was
// voted out.
func (r PowerReason) Misbehaved() bool {
	return r == ReasonDuplicateVote || r == ReasonLightClientAttack
}

// Final reports whether the key is out for good: voted out or removed; it
// is never promoted again.
func (r PowerReason) Final() bool {
	return r.Misbehaved() || r == ReasonRemoved || r == ReasonRotatedOut
}

// Past says what happened to a key out for good, for messages.
func (r PowerReason) Past() string {
	switch r {
	case ReasonRemoved:
		return "removed from the cluster"
	case ReasonRotatedOut:
		return "replaced by its broker's new key"
	}
	return "voted out for " + r.String()
}

func (r PowerReason) String() string {
	switch r {
	case ReasonVote:
		return "vote"
	case ReasonDowntime:
		return "downtime"
	case ReasonRemoved:
		return "removed"
	case ReasonAdded:
		return "added"
	case ReasonRotatedOut:
		return "key-rotated"
	case ReasonRotatedIn:
		return "new-key"
	}
	return core.MisbehaviorKind(r).String()
}

// membershipState is the cluster module's part of the state for
// membership: the records, the ones the block changed, and the records
// as of the last commit for the status.
type membershipState struct {
	validatorRecs   map[[20]byte]ValidatorRecord
	validatorsDirty map[[20]byte]bool
	// membersNew: the records, the votes or the epoch changed since the
	// last publish (set at load too).
	membersNew       bool
	committedMembers struct {
		sync.Mutex // guards committedVotes (membership_change.go)
		// members is the records and the directory as of the last
		// commit, shared with readers (Members).
		members atomic.Pointer[Members]
	}
	// addedBrokers: the brokers the chain added to the directory
	// (directory.go), and those the block added.
	addedBrokers        map[int32]DirectoryBroker
	brokersDirty        map[int32]bool
	membershipVoteState // membership_change.go
	aliveState          // alive.go
}

func encodeValidatorRecord(r ValidatorRecord) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Bytes(r.PubKey)
	w.I64(r.Power)
	w.U8(uint8(r.Reason))
	w.I64(r.ChangedAt)
	w.I64(r.ChangedAtMs)
	w.I64(r.EvidenceHeight)
	return w.B
}

func decodeValidatorRecord(addr [20]byte, b []byte) (ValidatorRecord, error) {
	r := &core.Reader{B: b}
	if v := r.U8(); r.E == nil && v != core.PersistVersion {
		r.Fail("validator record format %d", v)
	}
	rec := ValidatorRecord{Address: addr, PubKey: append(ed25519.PublicKey(nil), r.Bytes()...), Power: r.I64(),
		Reason: PowerReason(r.U8()), ChangedAt: r.I64(), ChangedAtMs: r.I64(), EvidenceHeight: r.I64()}
	if r.E == nil && len(rec.PubKey) != ed25519.PublicKeySize {
		r.Fail("validator %X: a key of %d bytes", addr, len(rec.PubKey))
	}
	if r.E == nil && len(r.B) != 0 {
		r.Fail("validator %X: %d bytes after the record", addr, len(r.B))
	}
	return rec, r.E
}

// effectiveValidators is the genesis set with the chain's records over it
// (nil when the broker has no genesis set).
func (f *Cluster) effectiveValidators() (*trust.ValidatorSet, error) {
	if f.opts.Validators == nil {
		return nil, nil
	}
	if len(f.validatorRecs) == 0 {
		return f.opts.Validators, nil
	}
	var out []trust.Validator
	for _, v := range f.opts.Validators.Validators() {
		if _, ok := f.validatorRecs[v.Address]; !ok {
			out = append(out, v)
		}
	}
	for _, r := range f.sortedValidatorRecs() {
		if r.Power > 0 {
			out = append(out, trust.Validator{Address: r.Address, PubKey: r.PubKey, Power: r.Power})
		}
	}
	return trust.NewValidatorSet(out)
}

func (f *Cluster) sortedValidatorRecs() []ValidatorRecord {
	out := make([]ValidatorRecord, 0, len(f.validatorRecs))
	for _, r := range f.validatorRecs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Address[:], out[j].Address[:]) < 0 })
	return out
}

// applyEvidence removes the power of each validator the block's evidence
// proves misbehaved (from MembershipVersion on).
func (f *Cluster) applyEvidence(evidence []core.Misbehavior) {
	if f.Version < MembershipVersion || len(evidence) == 0 {
		return
	}
	vs := f.Trust.Validators()
	if vs == nil {
		return
	}
	for _, e := range evidence {
		var addr [20]byte
		if len(e.Validator) != len(addr) {
			continue // CometBFT's addresses are 20 bytes: nothing names it
		}
		copy(addr[:], e.Validator)
		v, ok := vs.Lookup(addr)
		if !ok {
			if r, ok := f.validatorRecs[addr]; ok && !r.Reason.Final() {
				// A replica proven to have misbehaved while it voted: it
				// has no power to lose, and is never promoted again.
				r.Reason, r.EvidenceHeight = PowerReason(e.Kind), e.Height
				f.setValidatorRecord(r)
			}
			continue // removed already (or never a validator)
		}
		if v.Power >= vs.Total() {
			// The last validator with power: the chain would stop.
			f.opts.Logger.Warn("evidence against the only validator with power left: it keeps its power",
				"validator", fmt.Sprintf("%X", addr), "kind", e.Kind.String(), "evidence_height", e.Height, "height", f.Height)
			continue
		}
		rec := ValidatorRecord{Address: addr, PubKey: v.PubKey, Power: 0, Reason: PowerReason(e.Kind), EvidenceHeight: e.Height}
		f.setValidatorRecord(rec)
		if vs = f.Trust.Validators(); vs == nil {
			return // faulted
		}
		f.ValidatorUpdates = append(f.ValidatorUpdates, core.ValidatorUpdate{PubKey: append([]byte(nil), v.PubKey...), Power: 0})
		f.opts.Logger.Warn("validator removed for misbehavior", "validator", fmt.Sprintf("%X", addr),
			"kind", e.Kind.String(), "evidence_height", e.Height, "height", f.Height, "validators_left", len(vs.Validators()))
	}
}

// loadMembership reads the records and sets the trust module's validator
// set from them.
func (f *Cluster) loadMembership() error {
	f.validatorRecs, f.validatorsDirty = map[[20]byte]ValidatorRecord{}, map[[20]byte]bool{}
	err := f.Store.Scan(validatorPfx, func(k, v []byte) error {
		var a [20]byte
		if len(k) != len(validatorPfx)+len(a) {
			return fmt.Errorf("stele/fsm: bad validator key %x", k)
		}
		copy(a[:], k[len(validatorPfx):])
		r, err := decodeValidatorRecord(a, v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading validator %X: %w", a, err)
		}
		f.validatorRecs[a] = r
		return nil
	})
	if err != nil {
		return err
	}
	vs, err := f.effectiveValidators()
	if err != nil {
		return fmt.Errorf("stele/fsm: the validator set the state makes: %w", err)
	}
	f.Trust.SetValidators(vs)
	f.membersNew = true
	return nil
}

// persistMembership writes the records the block changed, in address
// order.
func (f *Cluster) persistMembership(b *core.StateBatch) {
	if len(f.validatorsDirty) == 0 {
		return
	}
	addrs := make([][20]byte, 0, len(f.validatorsDirty))
	for a := range f.validatorsDirty {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return bytes.Compare(addrs[i][:], addrs[j][:]) < 0 })
	for _, a := range addrs {
		b.Set(append(append([]byte(nil), validatorPfx...), a[:]...), encodeValidatorRecord(f.validatorRecs[a]))
	}
	clear(f.validatorsDirty)
}

// ValidatorRecords returns, as of the last commit, the validators whose
// power the chain changed, ordered by address. Safe for concurrent use.
func (f *Cluster) ValidatorRecords() []ValidatorRecord {
	return append([]ValidatorRecord(nil), f.Members().Records...)
}

// Members is the membership as of a commit: the validator records and
// the broker directory. A commit that changes either publishes a new
// value and never changes a published one, so a reader may keep what it
// derives from one for as long as Members returns the same pointer. Its
// slices are shared: read them, never change them.
type Members struct {
	Records   []ValidatorRecord
	Directory []DirectoryBroker
}

// Members returns the membership as of the last commit (empty before the
// state is loaded). Safe for concurrent use.
func (f *Cluster) Members() *Members {
	if m := f.committedMembers.members.Load(); m != nil {
		return m
	}
	return &Members{}
}

// registerMembership registers the evidence's block-begin step and the
// membership's state step (RegisterCluster calls it).
func registerMembership(r *core.Registry, h *topics.TopicHooks) {
	// After the upgrades' step (rank 10): evidence in the block that
	// activates version 7 removes, as it would in any later block.
	core.RegisterModuleBlockBegin(r, clusterOf, core.ModuleBlockBegin[*Cluster]{Rank: 12, Name: "evidence", Module: ModCluster,
		Run: func(f *Cluster, b core.Block) { f.applyEvidence(b.Misbehavior) }})
	core.RegisterModuleBlockBegin(r, clusterOf, core.ModuleBlockBegin[*Cluster]{Rank: 13, Name: "downtime", Module: ModCluster,
		Run: func(f *Cluster, _ core.Block) { f.demoteDowntime() }})
	registerChangeMembership(r, h) // membership_change.go
	core.RegisterModuleStep(r, clusterOf, core.ModuleStep[*Cluster]{Rank: 51, Name: "membership", Module: ModCluster,
		Load: func(f *Cluster) error {
			if err := f.loadMembership(); err != nil {
				return err
			}
			if err := f.loadDirectory(); err != nil {
				return err
			}
			if err := f.loadAlive(); err != nil {
				return err
			}
			return f.loadMembershipVotes()
		},
		Stage: func(f *Cluster, b *core.StateBatch) error {
			f.persistMembership(b)
			f.persistDirectory(b)
			f.persistMembershipVotes(b)
			f.persistAlive(b)
			return nil
		},
		Publish: func(f *Cluster, _ bool) {
			if !f.membersNew {
				return
			}
			f.membersNew = false
			recs := f.sortedValidatorRecs()
			st := MembershipStatus{ChainID: f.opts.ChainID, Epoch: f.membershipEpoch}
			for _, a := range sortedMemberVoters(f.memberVotes) {
				st.Votes = append(st.Votes, MembershipVote{Validator: a, Change: f.memberVotes[a]})
			}
			f.committedMembers.members.Store(&Members{Records: recs, Directory: f.directory()})
			f.committedMembers.Lock()
			f.committedVotes.status = st
			f.committedMembers.Unlock()
			f.Trust.PublishValidators()
		}})
}
