package cluster

// Membership changes signed by the validators (docs/cluster.md,
// "Membership"): add a broker to the directory as a replica (from app
// version 8, directory.go), replace a broker's key (from app version 9,
// directory.go), demote a validator to a replica (power 0: it
// follows the chain and serves reads, and votes on nothing) or promote a
// replica back (or re-weight a validator). A change is applied once
// validators holding more than two thirds of the current voting power
// signed the same change for the same membership epoch, over one or
// several commands
// (each validator may vote apart, as for upgrades, and a later vote
// replaces its earlier one), or at once when the cluster administrator's
// key, which the genesis names (`stele cluster init` writes DIR/admin.key),
// signed it; one broker, Byzantine or not, can never change the set
// alone.
//
// The epoch counts the changes applied: a change is signed for the epoch
// it is meant to follow, so a signature can be replayed neither after
// its change nor after another one (it is refused as stale: sign again).
// A change of power (a demotion, promotion, removal or key rotation) is
// refused, whoever signed it, when it would leave no validator with
// power, or when the validators it would leave that are signing now (a
// signature within LiveWindowMs of block time, from the chain's own
// record of commit signatures; a rotated-in key is not signing yet)
// would not hold more than two thirds of the power it leaves: the guard
// against demoting the wrong broker while another is down. Adding a
// broker changes no power, so no guard weighs it. A key voted out for misbehavior
// (membership.go) is never promoted again: it needs a new key.
//
// State, authenticated:
//
//	u/membership-epoch      the epoch (u64), absent while 0
//	u/member-vote/<address> a validator's vote for a change not yet applied

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// KindChangeMembership votes for, and with enough votes applies, a change
// of one validator's voting power.
const KindChangeMembership core.Kind = 35

// MaxValidatorPower bounds the power a change gives one validator (far
// below CometBFT's bound on the total).
const MaxValidatorPower = 1 << 40

// LiveWindowMs is how recent, in block time, a validator's last commit
// signature must be for it to count as signing in a change's guard (as
// Metadata counts a broker alive: internal/kafka's LiveWindow).
const LiveWindowMs = 10_000

var (
	keyMembershipEpoch = []byte("u/membership-epoch")
	memberVotePfx      = []byte("u/member-vote/")
	// membershipStatementPrefix opens a MembershipStatement.
	membershipStatementPrefix = []byte("stele/membership-statement/v1\x00")
)

// MembershipChange sets one validator's voting power: 0 makes it a
// replica, more makes it (again) a validator with that power. Remove
// (with power 0) takes the broker out of the cluster for good: it stops
// serving, Metadata no longer lists it, and its key is never promoted.
//
// With Broker set (from app version 8, directory.go) the change adds a
// broker to the directory as a replica: Validator is its key's address
// and Power 0. From app version 9, a Broker whose key is not Validator's
// replaces the key of the broker with its node id (IsRotation): Validator
// is that broker's current key, Power 0 (the new key takes the old one's
// power).
type MembershipChange struct {
	Epoch     uint64 // the membership epoch it is signed for
	Validator [20]byte
	Power     int64
	Remove    bool
	Broker    BrokerEntry
}

// encodeBrokerEntry appends a change's broker, when it adds one: a
// change without is encoded (and signed) as before version 8.
func encodeBrokerEntry(w *core.Writer, e BrokerEntry) {
	if e.IsZero() {
		return
	}
	w.U8(1)
	w.I64(int64(e.NodeID))
	w.B = append(w.B, e.PubKey[:]...)
	w.Str(e.Kafka)
	w.Str(e.HTTP)
	w.Str(e.Rack)
}

// decodeBrokerEntry reads what encodeBrokerEntry wrote, if anything is
// left.
func decodeBrokerEntry(r *core.Reader) BrokerEntry {
	var e BrokerEntry
	if r.E != nil || len(r.B) == 0 {
		return e
	}
	if tag := r.U8(); tag != 1 {
		r.Fail("broker entry tag %d", tag)
		return e
	}
	id := r.I64()
	if id < -1<<31 || id > 1<<31-1 {
		r.Fail("node id %d", id)
	}
	e.NodeID = int32(id)
	copy(e.PubKey[:], r.Take(ed25519.PublicKeySize))
	e.Kafka, e.HTTP, e.Rack = r.Str(), r.Str(), r.Str()
	if r.E == nil && e.IsZero() {
		r.Fail("an empty broker entry")
	}
	return e
}

// ChangeMembership carries validators' signatures of a MembershipChange
// on chain ChainID, or the cluster administrator's (AdminSig, empty when
// none), or both.
type ChangeMembership struct {
	ChainID  string
	Change   MembershipChange
	Sigs     []trust.CertSig
	AdminSig []byte
}

func (ChangeMembership) Kind() core.Kind { return KindChangeMembership }

func (c ChangeMembership) Encode(w *core.Writer) {
	w.Str(c.ChainID)
	w.I64(int64(c.Change.Epoch))
	w.B = append(w.B, c.Change.Validator[:]...)
	w.I64(c.Change.Power)
	w.Bool(c.Change.Remove)
	encodeSigs(w, c.Sigs)
	w.Bytes(c.AdminSig)
	encodeBrokerEntry(w, c.Change.Broker)
}

func decodeChangeMembership(r *core.Reader) ChangeMembership {
	c := ChangeMembership{ChainID: r.Str()}
	c.Change.Epoch = uint64(r.I64())
	copy(c.Change.Validator[:], r.Take(20))
	c.Change.Power = r.I64()
	c.Change.Remove = r.Bool()
	c.Sigs = decodeSigs(r)
	if b := r.Bytes(); len(b) > 0 {
		c.AdminSig = append([]byte(nil), b...)
	}
	c.Change.Broker = decodeBrokerEntry(r)
	return c
}

// MembershipStatement is what a validator signs to vote for ch on chain
// chainID.
func MembershipStatement(chainID string, ch MembershipChange) []byte {
	w := &core.Writer{B: append([]byte(nil), membershipStatementPrefix...)}
	w.Str(chainID)
	w.I64(int64(ch.Epoch))
	w.B = append(w.B, ch.Validator[:]...)
	w.I64(ch.Power)
	w.Bool(ch.Remove)
	encodeBrokerEntry(w, ch.Broker)
	return w.B
}

// SignMembership returns key's signature of ch on chain chainID, as
// validator addr.
func SignMembership(chainID string, ch MembershipChange, addr [20]byte, key ed25519.PrivateKey) trust.CertSig {
	s := trust.CertSig{Validator: addr}
	copy(s.Signature[:], ed25519.Sign(key, MembershipStatement(chainID, ch)))
	return s
}

// checkChangeMembership is the stateless check of a ChangeMembership.
func checkChangeMembership(c ChangeMembership) core.Result {
	if c.ChainID == "" || len(c.ChainID) > trust.MaxChainID {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a membership vote names the chain it is signed for, 1 to %d bytes, got %d", trust.MaxChainID, len(c.ChainID)))
	}
	if c.Change.Power < 0 || c.Change.Power > MaxValidatorPower {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a validator's power is 0 (a replica) to %d, got %d", int64(MaxValidatorPower), c.Change.Power))
	}
	if c.Change.Remove && c.Change.Power != 0 {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a broker removed from the cluster has power 0, got %d", c.Change.Power))
	}
	if len(c.AdminSig) != 0 && len(c.AdminSig) != ed25519.SignatureSize {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the cluster administrator's signature is %d bytes, got %d", ed25519.SignatureSize, len(c.AdminSig)))
	}
	if len(c.Sigs) > trust.MaxCertSigs || len(c.Sigs) == 0 && len(c.AdminSig) == 0 {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a membership change carries the cluster administrator's signature or 1 to %d validator signatures, got %d", trust.MaxCertSigs, len(c.Sigs)))
	}
	if !c.Change.Broker.IsZero() {
		if res := checkBrokerEntry(c.Change); res.Code != 0 {
			return res
		}
	}
	return signedOnce(c.Sigs, "change")
}

// MembershipStatus is the membership's state as of the last commit: the
// epoch and the votes towards a change.
type MembershipStatus struct {
	ChainID string
	Epoch   uint64
	Votes   []MembershipVote // by validator address
}

// MembershipVote is one validator's vote for a change not yet applied.
type MembershipVote struct {
	Validator [20]byte
	Change    MembershipChange
}

// changeMembership applies a ChangeMembership: every signature must be a
// current validator's good one, or nothing is recorded.
func (f *Cluster) changeMembership(c ChangeMembership) core.Result {
	if IsRotation(c.Change) && f.Version < RotationVersion {
		// Refused first, with the code the binaries before version 9 give
		// it (their stateless check): they must agree on the results.
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("replacing a broker's key needs app version %d; this chain runs %d (stele cluster upgrade)", RotationVersion, f.Version))
	}
	if f.Version < MembershipVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("membership changes need app version %d; this chain runs %d (stele cluster upgrade)", MembershipVersion, f.Version))
	}
	vs := f.Trust.Validators()
	if vs == nil || f.opts.ChainID == "" {
		return core.Fail(kerr.ClusterAuthorizationFailed.Code, "this broker has no validator set or chain id to check membership votes against")
	}
	if c.ChainID != f.opts.ChainID {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the membership votes are for chain %q, and this is chain %q: sign the change for this chain", c.ChainID, f.opts.ChainID))
	}
	ch := c.Change
	if ch.Epoch != f.membershipEpoch {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the change is signed for membership epoch %d, and the membership is at epoch %d: sign it again", ch.Epoch, f.membershipEpoch))
	}
	stmt := MembershipStatement(f.opts.ChainID, ch)
	admin := len(c.AdminSig) > 0
	if admin {
		if len(f.opts.AdminKey) != ed25519.PublicKeySize {
			return core.Fail(kerr.ClusterAuthorizationFailed.Code, "this chain's genesis names no cluster administrator key: only the validators vote for membership changes")
		}
		if !ed25519.Verify(f.opts.AdminKey, stmt, c.AdminSig) {
			return core.Fail(kerr.ClusterAuthorizationFailed.Code, "the cluster administrator's signature of the change does not verify")
		}
	}
	for _, s := range c.Sigs {
		v, ok := vs.Lookup(s.Validator)
		if !ok {
			return core.Fail(kerr.ClusterAuthorizationFailed.Code, fmt.Sprintf("%X is not a validator: only validators vote for membership changes", s.Validator))
		}
		if !ed25519.Verify(v.PubKey, stmt, s.Signature[:]) {
			return core.Fail(kerr.ClusterAuthorizationFailed.Code, fmt.Sprintf("validator %X's signature of the change does not verify", s.Validator))
		}
	}
	var key ed25519.PublicKey
	var current int64
	var res core.Result
	var rotated DirectoryBroker
	rotation := IsRotation(ch)
	switch {
	case rotation:
		if rotated, res = f.rotationTarget(ch); res.Code == 0 {
			key, current, res = f.changeTarget(ch.Validator)
		}
	case !ch.Broker.IsZero():
		res, key = f.addBroker(ch), ch.Broker.PubKey[:]
	default:
		key, current, res = f.changeTarget(ch.Validator)
	}
	if res.Code != 0 {
		return res
	}
	if f.memberVotes == nil {
		f.memberVotes = map[[20]byte]MembershipChange{}
	}
	for _, s := range c.Sigs {
		f.memberVotes[s.Validator] = ch
	}
	f.memberDirty = true
	power := votedPower(vs, func(a [20]byte) bool { q, ok := f.memberVotes[a]; return ok && q == ch })
	if !admin && !vs.Supermajority(power) {
		return core.Result{} // a vote; the change waits for more
	}
	// A broker added as a replica changes no validator's power: the
	// guard has nothing to weigh; nor has a replica's key rotation. A
	// validator's moves the old key's power to a key that signs nothing
	// yet.
	powers := []powerChange{{ch.Validator, ch.Power}}
	if rotation {
		powers = append(powers, powerChange{ch.Broker.Address(), current})
	}
	guarded := ch.Broker.IsZero() || rotation && current > 0
	if res := f.membershipGuard(vs, powers); guarded && res.Code != 0 {
		// Enough votes for a change that must not be made now: they are
		// dropped, so it is not made later by surprise either.
		clear(f.memberVotes)
		return res
	}
	clear(f.memberVotes)
	f.membershipEpoch++
	reason := ReasonVote
	switch {
	case ch.Remove:
		reason = ReasonRemoved
	case rotation:
		f.rotateKey(ch.Broker, rotated, key, current)
		return core.Result{}
	case !ch.Broker.IsZero():
		reason = ReasonAdded
		e := entryOf(ch.Broker)
		e.AddedAt = f.Height
		f.recordBroker(e)
	}
	if ch.Power == current && reason == ReasonVote {
		return core.Result{} // nothing to record or hand CometBFT
	}
	f.setValidatorRecord(ValidatorRecord{Address: ch.Validator, PubKey: key, Power: ch.Power, Reason: reason})
	if ch.Power != current {
		f.ValidatorUpdates = append(f.ValidatorUpdates, core.ValidatorUpdate{PubKey: append([]byte(nil), key...), Power: ch.Power})
	}
	f.opts.Logger.Warn("validator power changed by the validators' votes", "validator", fmt.Sprintf("%X", ch.Validator),
		"from", current, "to", ch.Power, "removed", ch.Remove, "height", f.Height, "epoch", f.membershipEpoch)
	return core.Result{}
}

// changeTarget finds the validator a change names: a genesis validator or
// one the chain has a record of, with its key and current power. A key
// voted out for misbehavior is refused.
func (f *Cluster) changeTarget(addr [20]byte) (ed25519.PublicKey, int64, core.Result) {
	if r, ok := f.validatorRecs[addr]; ok {
		if r.Reason.Final() {
			return nil, 0, core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("validator %X was %s at height %d: it comes back only with a new key", addr, r.Reason.Past(), r.ChangedAt))
		}
		return r.PubKey, r.Power, core.Result{}
	}
	if f.opts.Validators != nil {
		if v, ok := f.opts.Validators.Lookup(addr); ok {
			return v.PubKey, v.Power, core.Result{}
		}
	}
	return nil, 0, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%X is no broker of this chain: membership changes name a broker of the directory (stele cluster status lists them)", addr))
}

// rotateKey replaces broker b's key (oldKey, with power) by e's: the old
// key's power goes to 0 for good, the new key gets it, and the directory
// entry of b's node id names the new key.
func (f *Cluster) rotateKey(e BrokerEntry, b DirectoryBroker, oldKey ed25519.PublicKey, power int64) {
	n := entryOf(e)
	n.AddedAt, n.RotatedAt = b.AddedAt, f.Height
	f.recordBroker(n)
	f.setValidatorRecord(ValidatorRecord{Address: b.Validator, PubKey: oldKey, Power: 0, Reason: ReasonRotatedOut})
	f.setValidatorRecord(ValidatorRecord{Address: n.Validator, PubKey: n.PubKey, Power: power, Reason: ReasonRotatedIn})
	if power > 0 {
		f.ValidatorUpdates = append(f.ValidatorUpdates,
			core.ValidatorUpdate{PubKey: append([]byte(nil), oldKey...), Power: 0},
			core.ValidatorUpdate{PubKey: append([]byte(nil), n.PubKey...), Power: power})
	}
	f.opts.Logger.Warn("broker key rotated by the validators' votes", "node_id", e.NodeID, "from", fmt.Sprintf("%X", b.Validator),
		"to", fmt.Sprintf("%X", n.Validator), "power", power, "height", f.Height, "epoch", f.membershipEpoch)
}

// powerChange is one validator's power after a change.
type powerChange struct {
	validator [20]byte
	power     int64
}

// membershipGuard refuses a change that would leave no validator with
// power, or leave validators whose signing part holds two thirds of the
// power or less.
func (f *Cluster) membershipGuard(vs *trust.ValidatorSet, changes []powerChange) core.Result {
	signers, now := f.Trust.Liveness()
	live := map[[20]byte]bool{}
	for _, s := range signers {
		if len(s.Address) == 20 && now-s.LastTimeMs <= LiveWindowMs {
			live[[20]byte(s.Address)] = true
		}
	}
	var total, signing int64
	add := func(a [20]byte, p int64) {
		total += p
		if live[a] {
			signing += p
		}
	}
	changed := func(a [20]byte) bool {
		return slices.ContainsFunc(changes, func(c powerChange) bool { return c.validator == a })
	}
	for _, v := range vs.Validators() {
		if !changed(v.Address) {
			add(v.Address, v.Power)
		}
	}
	for _, c := range changes {
		add(c.validator, c.power)
	}
	ch := changes[0]
	if total <= 0 {
		return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("the change would leave no validator with power (validator %X to %d)", ch.validator, ch.power))
	}
	if signing*3 <= total*2 {
		return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf("after the change the validators signing now would hold %d of %d voting power, not more than 2/3: the chain could stop (validator %X to %d)", signing, total, ch.validator, ch.power))
	}
	return core.Result{}
}

// setValidatorRecord records r, changed in this block, and makes the
// trust module's set follow.
func (f *Cluster) setValidatorRecord(r ValidatorRecord) {
	r.ChangedAt, r.ChangedAtMs = f.Height, f.BlockTime
	f.membersNew = true
	if f.validatorRecs == nil {
		f.validatorRecs = map[[20]byte]ValidatorRecord{}
	}
	if f.validatorsDirty == nil {
		f.validatorsDirty = map[[20]byte]bool{}
	}
	f.validatorRecs[r.Address], f.validatorsDirty[r.Address] = r, true
	vs, err := f.effectiveValidators()
	if err != nil {
		// Not reachable: the guards keep a validator with power.
		f.Faulted(fmt.Errorf("stele/fsm: validator %X to power %d: %w", r.Address, r.Power, err))
		return
	}
	f.Trust.SetValidators(vs)
}

// membershipVoteState is the cluster module's part of the state for
// membership changes.
type membershipVoteState struct {
	membershipEpoch uint64
	memberVotes     map[[20]byte]MembershipChange
	memberDirty     bool
	committedVotes  struct {
		status MembershipStatus
	}
}

func encodeMemberVote(ch MembershipChange) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I64(int64(ch.Epoch))
	w.B = append(w.B, ch.Validator[:]...)
	w.I64(ch.Power)
	w.Bool(ch.Remove)
	encodeBrokerEntry(w, ch.Broker)
	return w.B
}

func decodeMemberVote(b []byte) (MembershipChange, error) {
	r := &core.Reader{B: b}
	if v := r.U8(); r.E == nil && v != core.PersistVersion {
		r.Fail("membership vote format %d", v)
	}
	var ch MembershipChange
	ch.Epoch = uint64(r.I64())
	copy(ch.Validator[:], r.Take(20))
	ch.Power = r.I64()
	ch.Remove = r.Bool()
	ch.Broker = decodeBrokerEntry(r)
	if r.E == nil && len(r.B) != 0 {
		r.Fail("%d bytes after the vote", len(r.B))
	}
	return ch, r.E
}

func (f *Cluster) loadMembershipVotes() error {
	f.membershipEpoch, f.memberVotes, f.memberDirty = 0, map[[20]byte]MembershipChange{}, false
	if v, ok, err := f.Store.Get(keyMembershipEpoch); err != nil {
		return err
	} else if ok {
		if len(v) != 8 {
			return fmt.Errorf("stele/fsm: membership epoch of %d bytes", len(v))
		}
		f.membershipEpoch = binary.BigEndian.Uint64(v)
	}
	return f.Store.Scan(memberVotePfx, func(k, v []byte) error {
		var a [20]byte
		if len(k) != len(memberVotePfx)+len(a) {
			return fmt.Errorf("stele/fsm: bad membership vote key %x", k)
		}
		copy(a[:], k[len(memberVotePfx):])
		ch, err := decodeMemberVote(v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading the membership vote of %X: %w", a, err)
		}
		f.memberVotes[a] = ch
		return nil
	})
}

func (f *Cluster) persistMembershipVotes(b *core.StateBatch) {
	if !f.memberDirty {
		return
	}
	f.memberDirty, f.membersNew = false, true
	if f.membershipEpoch != 0 {
		b.Set(keyMembershipEpoch, binary.BigEndian.AppendUint64(nil, f.membershipEpoch))
	}
	b.DeletePrefix(memberVotePfx)
	for _, a := range sortedMemberVoters(f.memberVotes) {
		b.Set(append(bytes.Clone(memberVotePfx), a[:]...), encodeMemberVote(f.memberVotes[a]))
	}
}

func sortedMemberVoters(m map[[20]byte]MembershipChange) [][20]byte {
	out := make([][20]byte, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][:], out[j][:]) < 0 })
	return out
}

// Membership returns the epoch and the votes as of the last commit. Safe
// for concurrent use.
func (f *Cluster) Membership() MembershipStatus {
	f.committedMembers.Lock()
	defer f.committedMembers.Unlock()
	st := f.committedVotes.status
	st.Votes = append([]MembershipVote(nil), st.Votes...)
	return st
}

// registerChangeMembership registers ChangeMembership and its state step
// (registerMembership calls it).
func registerChangeMembership(r *core.Registry, _ *topics.TopicHooks) {
	core.RegisterModuleCommand(r, clusterOf, KindChangeMembership, "ChangeMembership", ModCluster, decodeChangeMembership,
		func(c core.Command) core.Result { return checkChangeMembership(c.(ChangeMembership)) },
		func(f *Cluster, c ChangeMembership, _ core.CmdAt) core.Result { return f.changeMembership(c) })
}
