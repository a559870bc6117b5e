package fsm

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

const membershipChain = "membership-test"

func openMembership(t testing.TB, dir string, version uint32, vs *trust.ValidatorSet, src trust.BatchSource) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: version, ChainID: membershipChain, Validators: vs, Batches: src})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func addressOf(k ed25519.PrivateKey) []byte {
	h := sha256.Sum256(k.Public().(ed25519.PublicKey))
	return h[:20]
}

// directoryOpener returns what opens a state machine of the validators
// keys (vs) whose genesis directory lists a broker for each, node ids 0
// up, at the app version given.
func directoryOpener(t testing.TB, vs *trust.ValidatorSet, keys []ed25519.PrivateKey, src trust.BatchSource) func(dir string, version uint32) *FSM {
	var genesis []cluster.DirectoryBroker
	for i, k := range keys {
		genesis = append(genesis, cluster.DirectoryBroker{NodeID: int32(i), Validator: [20]byte(addressOf(k)),
			Kafka: fmt.Sprintf("127.0.0.1:%d", 19092+i), HTTP: fmt.Sprintf("127.0.0.1:%d", 19192+i)})
	}
	return func(dir string, version uint32) *FSM {
		t.Helper()
		f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: version, ChainID: membershipChain,
			Validators: vs, Batches: src, GenesisBrokers: genesis})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// applyCommit applies one block and commits it.
func applyCommit(t testing.TB, f *FSM, b core.Block) core.BlockOutcome {
	t.Helper()
	out, err := f.ApplyBlock(b)
	if err != nil {
		t.Fatalf("height %d: %v", b.Height, err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEvidenceRemovesValidator (issue 19, "offenders voted out"): from
// app version 7 committed evidence removes the offender's power in the
// block that commits it, the block hands CometBFT the update, the record
// says why, certificates stop counting the offender, and the removal
// survives a restart; evidence against it again, or naming nobody,
// changes nothing.
func TestEvidenceRemovesValidator(t *testing.T) {
	vs, keys := testValidators(t, 4)
	src := mapBatches{}
	dir := t.TempDir()
	f := openMembership(t, dir, cluster.MaxAppVersion, vs, src)
	offender := addressOf(keys[3])

	applyCommit(t, f, core.Block{Height: 1, TimeMs: 1000})
	out := applyCommit(t, f, core.Block{Height: 2, TimeMs: 2000, Misbehavior: []core.Misbehavior{{Kind: core.DuplicateVote, Validator: offender, Height: 1}}})
	if len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 0 || !bytes.Equal(out.ValidatorUpdates[0].PubKey, keys[3].Public().(ed25519.PublicKey)) {
		t.Fatalf("validator updates %+v, want validator 3's key at power 0", out.ValidatorUpdates)
	}
	cur := f.CommittedValidators()
	if got := len(cur.Validators()); got != 3 || cur.Total() != 30 {
		t.Fatalf("after the evidence: %d validators, power %d; want 3 and 30", got, cur.Total())
	}
	recs := f.ValidatorRecords()
	if len(recs) != 1 || !bytes.Equal(recs[0].Address[:], offender) || recs[0].Reason != cluster.ReasonDuplicateVote || recs[0].ChangedAt != 2 || recs[0].EvidenceHeight != 1 || recs[0].Power != 0 {
		t.Fatalf("records %+v", recs)
	}

	// Evidence against it again (CometBFT commits more for two heights),
	// and evidence naming no validator: nothing changes.
	before := f.AppHash
	out = applyCommit(t, f, core.Block{Height: 3, TimeMs: 3000, Misbehavior: []core.Misbehavior{
		{Kind: core.DuplicateVote, Validator: offender, Height: 2},
		{Kind: core.LightClientAttack, Validator: bytes.Repeat([]byte{7}, 20), Height: 2},
		{Kind: core.DuplicateVote, Validator: []byte{1, 2, 3}, Height: 2},
	}})
	if len(out.ValidatorUpdates) != 0 || !bytes.Equal(out.AppHash, before) {
		t.Fatalf("repeated evidence: updates %+v, app hash moved %v", out.ValidatorUpdates, !bytes.Equal(out.AppHash, before))
	}

	// A certificate the offender helps sign carries its signature, which no
	// longer counts: refused. One the others sign is applied.
	payload := tx(1, topics.DeleteTopic{Name: "nothing"})
	src[sha256.Sum256(payload)] = payload
	withOffender := trust.EncodeCertifiedTx(certifyFor(membershipChain, payload, 3, keys[0], keys[3]))
	if err := f.CheckTx(withOffender); err == nil {
		t.Fatal("CheckTx took a certificate signed by a removed validator")
	}
	out = applyCommit(t, f, core.Block{Height: 4, TimeMs: 4000, Txs: [][]byte{withOffender}})
	if out.Txs[0].Code != core.CodeResubmit {
		// Good signatures of the set before: the broker's client retries,
		// and the batch is certified again by the set there is now.
		t.Fatalf("a certificate signed by a removed validator: code %d (%s), want %d (submit again)", out.Txs[0].Code, out.Txs[0].Log, core.CodeResubmit)
	}
	forged := certifyFor(membershipChain, payload, 3, keys[0], keys[1])
	forged.Sigs[1].Signature[0] ^= 1
	out = applyCommit(t, f, core.Block{Height: 5, TimeMs: 4500, Txs: [][]byte{trust.EncodeCertifiedTx(forged)}})
	if out.Txs[0].Code != 1 {
		t.Fatalf("a certificate with a bad signature after the change: code %d, want 1", out.Txs[0].Code)
	}
	good := trust.EncodeCertifiedTx(certifyFor(membershipChain, payload, 4, keys[0], keys[1]))
	out = applyCommit(t, f, core.Block{Height: 6, TimeMs: 5000, Txs: [][]byte{good}})
	if out.Txs[0].Code != 0 {
		t.Fatalf("a certificate of two validators left was refused: %s", out.Txs[0].Log)
	}
	f.Close()

	g := openMembership(t, dir, cluster.MaxAppVersion, vs, src)
	defer g.Close()
	if got := len(g.CommittedValidators().Validators()); got != 3 {
		t.Fatalf("after a restart: %d validators, want 3", got)
	}
	if recs := g.ValidatorRecords(); len(recs) != 1 || recs[0].Reason != cluster.ReasonDuplicateVote {
		t.Fatalf("after a restart: records %+v", recs)
	}
}

// TestEvidenceBeforeMembershipVersion: under app version 6 evidence
// changes nothing, so a chain that has not upgraded hashes as its
// binaries always did.
func TestEvidenceBeforeMembershipVersion(t *testing.T) {
	vs, keys := testValidators(t, 4)
	a := openMembership(t, t.TempDir(), cluster.MembershipVersion-1, vs, mapBatches{})
	b := openMembership(t, t.TempDir(), cluster.MembershipVersion-1, vs, mapBatches{})
	defer a.Close()
	defer b.Close()
	ev := []core.Misbehavior{{Kind: core.DuplicateVote, Validator: addressOf(keys[1]), Height: 1}}
	for h := int64(1); h <= 3; h++ {
		oa := applyCommit(t, a, core.Block{Height: h, TimeMs: h * 1000, Misbehavior: ev})
		ob := applyCommit(t, b, core.Block{Height: h, TimeMs: h * 1000})
		if len(oa.ValidatorUpdates) != 0 || !bytes.Equal(oa.AppHash, ob.AppHash) {
			t.Fatalf("height %d: under version 6 evidence made updates %+v or moved the app hash", h, oa.ValidatorUpdates)
		}
	}
	if got := len(a.CommittedValidators().Validators()); got != 4 {
		t.Fatalf("%d validators under version 6, want 4", got)
	}
}

// TestEvidenceKeepsTheLastValidator: evidence never removes the last
// validator with power (the chain would stop), and removals down to it
// go one by one, each handed to CometBFT once.
func TestEvidenceKeepsTheLastValidator(t *testing.T) {
	vs, keys := testValidators(t, 3)
	f := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer f.Close()
	var ev []core.Misbehavior
	for _, k := range keys {
		ev = append(ev, core.Misbehavior{Kind: core.DuplicateVote, Validator: addressOf(k), Height: 1})
	}
	out := applyCommit(t, f, core.Block{Height: 1, TimeMs: 1000, Misbehavior: ev})
	if len(out.ValidatorUpdates) != 2 {
		t.Fatalf("%d updates, want 2 (the last validator keeps its power)", len(out.ValidatorUpdates))
	}
	cur := f.CommittedValidators().Validators()
	if len(cur) != 1 {
		t.Fatalf("%d validators left, want 1", len(cur))
	}
	if recs := f.ValidatorRecords(); len(recs) != 2 {
		t.Fatalf("records %+v", recs)
	}
}

// TestMembershipDeterministic: two state machines fed the same blocks,
// evidence included, end with the same app hashes, validator sets and
// updates.
func TestMembershipDeterministic(t *testing.T) {
	vs, keys := testValidators(t, 7)
	a := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	b := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer a.Close()
	defer b.Close()
	for h := int64(1); h <= 8; h++ {
		var ev []core.Misbehavior
		if h%3 == 0 {
			ev = append(ev, core.Misbehavior{Kind: core.MisbehaviorKind(1 + h%2), Validator: addressOf(keys[h%7]), Height: h - 1},
				core.Misbehavior{Kind: core.DuplicateVote, Validator: addressOf(keys[(h+3)%7]), Height: h - 1})
		}
		blk := core.Block{Height: h, TimeMs: h * 1000, Txs: [][]byte{tx(int(h), topics.DeleteTopic{Name: "t"})}, Misbehavior: ev}
		oa, ob := applyCommit(t, a, blk), applyCommit(t, b, blk)
		if !bytes.Equal(oa.AppHash, ob.AppHash) || len(oa.ValidatorUpdates) != len(ob.ValidatorUpdates) {
			t.Fatalf("height %d: the machines differ", h)
		}
		for i := range oa.ValidatorUpdates {
			if !bytes.Equal(oa.ValidatorUpdates[i].PubKey, ob.ValidatorUpdates[i].PubKey) || oa.ValidatorUpdates[i].Power != ob.ValidatorUpdates[i].Power {
				t.Fatalf("height %d: update %d differs", h, i)
			}
		}
	}
	if !bytes.Equal(a.StateRoot, b.StateRoot) || len(a.CommittedValidators().Validators()) != 4 {
		t.Fatalf("state roots differ, or %d validators left (want 4)", len(a.CommittedValidators().Validators()))
	}
}

// signersOf is the addresses of keys, as a block's signers.
func signersOf(keys ...ed25519.PrivateKey) [][]byte {
	var out [][]byte
	for _, k := range keys {
		out = append(out, addressOf(k))
	}
	return out
}

// memberChange is a ChangeMembership of validator who to power for epoch,
// signed by keys.
func memberChange(epoch uint64, who ed25519.PrivateKey, power int64, keys ...ed25519.PrivateKey) ChangeMembership {
	c := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Epoch: epoch, Validator: [20]byte(addressOf(who)), Power: power}}
	for _, k := range keys {
		c.Sigs = append(c.Sigs, SignMembership(membershipChain, c.Change, [20]byte(addressOf(k)), k))
	}
	return c
}

// TestMembershipChanges (issue 19, demote and promote): a change is
// applied once validators holding more than 2/3 of the power signed it for
// the current epoch, hands CometBFT the update, moves the epoch on (a
// replay is stale), and is refused when the validators signing now would
// not hold more than 2/3 of what it leaves, when it would leave no power,
// when a signer is no validator, for a key that is no broker of the
// chain, and before app version 7.
func TestMembershipChanges(t *testing.T) {
	vs, keys := testValidators(t, 4)
	f := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer f.Close()
	signers := signersOf
	h, now := int64(0), int64(0)
	block := func(sg [][]byte, cmds ...core.Command) core.BlockOutcome {
		h++
		now += 1000
		b := core.Block{Height: h, TimeMs: now, Signers: sg}
		for i, c := range cmds {
			b.Txs = append(b.Txs, tx(int(h)*10+i, c))
		}
		return applyCommit(t, f, b)
	}
	code := func(out core.BlockOutcome) int16 { return out.Txs[0].Results[0].Code }
	all := signers(keys...)
	block(all)
	block(all)

	if out := block(all, memberChange(0, keys[3], 0, keys[0], keys[1])); code(out) != 0 || len(out.ValidatorUpdates) != 0 {
		t.Fatalf("a vote of 20 of 40: code %d, updates %+v", code(out), out.ValidatorUpdates)
	}
	if st := f.Membership(); st.Epoch != 0 || len(st.Votes) != 2 {
		t.Fatalf("after two votes: %+v", st)
	}
	out := block(all, memberChange(0, keys[3], 0, keys[2]))
	if code(out) != 0 || len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 0 || !bytes.Equal(out.ValidatorUpdates[0].PubKey, keys[3].Public().(ed25519.PublicKey)) {
		t.Fatalf("the third vote: code %d (%s), updates %+v", code(out), out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	if st := f.Membership(); st.Epoch != 1 || len(st.Votes) != 0 {
		t.Fatalf("after the change: %+v", st)
	}
	if n := len(f.CommittedValidators().Validators()); n != 3 {
		t.Fatalf("%d validators after demoting one, want 3", n)
	}
	if recs := f.ValidatorRecords(); len(recs) != 1 || recs[0].Power != 0 || recs[0].Reason != cluster.ReasonVote {
		t.Fatalf("records %+v", recs)
	}
	three := signers(keys[0], keys[1], keys[2])
	if c := code(block(three, memberChange(0, keys[3], 0, keys[0], keys[1], keys[2]))); c != kerr.InvalidRequest.Code {
		t.Fatalf("a replay of the applied change: code %d", c)
	}
	// The demoted key signs for nothing now.
	if c := code(block(three, memberChange(1, keys[2], 0, keys[3]))); c != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("a vote by the demoted validator: code %d", c)
	}
	// Validator 1 stops signing; 11 s of block time later demoting 2 would
	// leave 0 and 1 with only 0 signing: refused, and its votes dropped.
	for range 11 {
		block(signers(keys[0], keys[2]))
	}
	if c := code(block(signers(keys[0], keys[2]), memberChange(1, keys[2], 0, keys[0], keys[1], keys[2]))); c != kerr.PolicyViolation.Code {
		t.Fatalf("demoting a validator while another is down: code %d", c)
	}
	if st := f.Membership(); st.Epoch != 1 || len(st.Votes) != 0 {
		t.Fatalf("after a refused change: %+v", st)
	}
	// Back to all three signing; the replica promoted with its power.
	block(three)
	out = block(three, memberChange(1, keys[3], 10, keys[0], keys[1], keys[2]))
	if code(out) != 0 || len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 10 {
		t.Fatalf("promoting the replica: code %d (%s), updates %+v", code(out), out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	if n := len(f.CommittedValidators().Validators()); n != 4 || f.Membership().Epoch != 2 {
		t.Fatalf("%d validators at epoch %d after the promotion, want 4 at 2", n, f.Membership().Epoch)
	}
	// A key that is no broker of the chain.
	_, strangers := testValidators(t, 5)
	stranger := memberChange(2, strangers[4], 10, keys[0], keys[1], keys[2])
	if c := code(block(all, stranger)); c != kerr.InvalidRequest.Code {
		t.Fatalf("promoting a stranger: code %d", c)
	}
}

// TestMembershipChangeGuards: a change that would leave no validator with
// power is refused; under app version 6 membership changes do not exist.
func TestMembershipChangeGuards(t *testing.T) {
	vs, keys := testValidators(t, 1)
	f := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer f.Close()
	sg := [][]byte{addressOf(keys[0])}
	applyCommit(t, f, core.Block{Height: 1, TimeMs: 1000, Signers: sg})
	out := applyCommit(t, f, core.Block{Height: 2, TimeMs: 2000, Signers: sg, Txs: [][]byte{tx(1, memberChange(0, keys[0], 0, keys[0]))}})
	if c := out.Txs[0].Results[0].Code; c != kerr.PolicyViolation.Code || len(out.ValidatorUpdates) != 0 {
		t.Fatalf("demoting the only validator: code %d, updates %+v", c, out.ValidatorUpdates)
	}
	old := openMembership(t, t.TempDir(), cluster.MembershipVersion-1, vs, mapBatches{})
	defer old.Close()
	out = applyCommit(t, old, core.Block{Height: 1, TimeMs: 1000, Signers: sg, Txs: [][]byte{tx(1, memberChange(0, keys[0], 5, keys[0]))}})
	if c := out.Txs[0].Results[0].Code; c != kerr.UnsupportedVersion.Code {
		t.Fatalf("a membership change under version 6: code %d", c)
	}
}

// TestDowntimeDemotion (issue 19): with stele.validator.downtime.ms set, a
// validator that signed nothing for that long is demoted, and no other; a
// validator promoted again is measured from its promotion.
func TestDowntimeDemotion(t *testing.T) {
	vs, keys := testValidators(t, 4)
	f := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer f.Close()
	sg := signersOf
	h, now := int64(0), int64(0)
	block := func(signers [][]byte, cmds ...core.Command) core.BlockOutcome {
		h++
		now += 1000
		b := core.Block{Height: h, TimeMs: now, Signers: signers}
		for i, c := range cmds {
			b.Txs = append(b.Txs, tx(int(h)*10+i, c))
		}
		return applyCommit(t, f, b)
	}
	set := cluster.AlterBrokerConfigs{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.ValidatorDowntimeConfig, Value: "5000"}}}
	if out := block(sg(keys...), set); out.Txs[0].Results[0].Code != 0 {
		t.Fatalf("setting %s: %s", cluster.ValidatorDowntimeConfig, out.Txs[0].Results[0].Message)
	}
	perBroker := set
	perBroker.Broker = "1"
	if out := block(sg(keys...), perBroker); out.Txs[0].Results[0].Code != kerr.InvalidRequest.Code {
		t.Fatalf("%s on one broker: code %d", cluster.ValidatorDowntimeConfig, out.Txs[0].Results[0].Code)
	}
	// Validator 3 stops signing. About 5 s of block time later it is
	// demoted, and nobody else.
	three := sg(keys[0], keys[1], keys[2])
	var demoted []core.ValidatorUpdate
	for range 10 {
		demoted = append(demoted, block(three).ValidatorUpdates...)
	}
	if len(demoted) != 1 || demoted[0].Power != 0 || !bytes.Equal(demoted[0].PubKey, keys[3].Public().(ed25519.PublicKey)) {
		t.Fatalf("updates %+v, want validator 3 demoted", demoted)
	}
	recs := f.ValidatorRecords()
	if len(recs) != 1 || recs[0].Reason != cluster.ReasonDowntime || recs[0].Power != 0 {
		t.Fatalf("records %+v", recs)
	}
	// Promoted again, it is not demoted again at once, though its last
	// signature is old; after 5 s more without one it is.
	back := three
	out := block(back, memberChange(0, keys[3], 10, keys[0], keys[1], keys[2]))
	if len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 10 {
		t.Fatalf("promoting it: %s, updates %+v", out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	for range 3 {
		if out := block(back); len(out.ValidatorUpdates) != 0 {
			t.Fatalf("demoted again right after its promotion: %+v", out.ValidatorUpdates)
		}
	}
	for range 5 {
		block(back)
	}
	if n := len(f.CommittedValidators().Validators()); n != 3 {
		t.Fatalf("%d validators after it signed nothing for 8 s since its promotion, want 3", n)
	}
}

// TestMembershipAdminKey: the cluster administrator's key the genesis
// names applies a change alone, under the same guards; another key's
// signature, or any on a chain whose genesis names none, is refused.
func TestMembershipAdminKey(t *testing.T) {
	vs, keys := testValidators(t, 4)
	seed := sha256.Sum256([]byte("cluster admin"))
	admin := ed25519.NewKeyFromSeed(seed[:])
	dir := t.TempDir()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, GenesisAppVersion: cluster.MaxAppVersion, ChainID: membershipChain,
		Validators: vs, Batches: mapBatches{}, GenesisAdminKey: admin.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all := signersOf(keys...)
	h := int64(0)
	apply := func(c ChangeMembership) core.BlockOutcome {
		h++
		return applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all, Txs: [][]byte{tx(int(h), c)}})
	}
	signed := func(k ed25519.PrivateKey, epoch uint64, who ed25519.PrivateKey, power int64) ChangeMembership {
		c := memberChange(epoch, who, power)
		c.AdminSig = ed25519.Sign(k, MembershipStatement(membershipChain, c.Change))
		return c
	}
	if out := apply(signed(keys[0], 0, keys[3], 0)); out.Txs[0].Results[0].Code != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("a validator's key as the administrator's: code %d", out.Txs[0].Results[0].Code)
	}
	out := apply(signed(admin, 0, keys[3], 0))
	if out.Txs[0].Results[0].Code != 0 || len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 0 {
		t.Fatalf("the administrator's demotion: %s, updates %+v", out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	if f.Membership().Epoch != 1 || len(f.CommittedValidators().Validators()) != 3 {
		t.Fatalf("after the administrator's demotion: epoch %d, %d validators", f.Membership().Epoch, len(f.CommittedValidators().Validators()))
	}
	if out := apply(signed(admin, 0, keys[3], 10)); out.Txs[0].Results[0].Code != kerr.InvalidRequest.Code {
		t.Fatalf("the administrator's signature replayed for an old epoch: code %d", out.Txs[0].Results[0].Code)
	}

	none := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer none.Close()
	o := applyCommit(t, none, core.Block{Height: 1, TimeMs: 1000, Signers: all, Txs: [][]byte{tx(1, signed(admin, 0, keys[3], 0))}})
	if c := o.Txs[0].Results[0].Code; c != kerr.ClusterAuthorizationFailed.Code || len(o.ValidatorUpdates) != 0 {
		t.Fatalf("an administrator's signature on a chain without one: code %d", c)
	}
}

// TestMembershipRemove: a broker removed by the validators' votes loses its
// power (an update only when it had some), is recorded as removed, and is
// never promoted again; a removal with power is refused statelessly.
func TestMembershipRemove(t *testing.T) {
	vs, keys := testValidators(t, 4)
	f := openMembership(t, t.TempDir(), cluster.MaxAppVersion, vs, mapBatches{})
	defer f.Close()
	all := signersOf(keys...)
	h := int64(0)
	apply := func(c ChangeMembership) core.BlockOutcome {
		h++
		return applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all, Txs: [][]byte{tx(int(h), c)}})
	}
	remove := func(epoch uint64, who ed25519.PrivateKey, signers ...ed25519.PrivateKey) ChangeMembership {
		c := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Epoch: epoch, Validator: [20]byte(addressOf(who)), Remove: true}}
		for _, k := range signers {
			c.Sigs = append(c.Sigs, SignMembership(membershipChain, c.Change, [20]byte(addressOf(k)), k))
		}
		return c
	}
	h++
	applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all}) // the chain has seen them sign
	out := apply(remove(0, keys[3], keys[0], keys[1], keys[2]))
	if out.Txs[0].Results[0].Code != 0 || len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 0 {
		t.Fatalf("removing validator 3: %s, updates %+v", out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	if recs := f.ValidatorRecords(); len(recs) != 1 || recs[0].Reason != cluster.ReasonRemoved {
		t.Fatalf("records %+v", recs)
	}
	if c := apply(memberChange(1, keys[3], 10, keys[0], keys[1], keys[2])).Txs[0].Results[0].Code; c != kerr.PolicyViolation.Code {
		t.Fatalf("promoting a removed broker: code %d", c)
	}
	// A replica removed: recorded, nothing for CometBFT.
	if out := apply(memberChange(1, keys[2], 0, keys[0], keys[1], keys[2])); len(out.ValidatorUpdates) != 1 {
		t.Fatalf("demoting validator 2: %s", out.Txs[0].Results[0].Message)
	}
	out = apply(remove(2, keys[2], keys[0], keys[1]))
	if out.Txs[0].Results[0].Code != 0 || len(out.ValidatorUpdates) != 0 {
		t.Fatalf("removing the replica: %s, updates %+v", out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	removed := 0
	for _, r := range f.ValidatorRecords() {
		if r.Reason == cluster.ReasonRemoved {
			removed++
		}
	}
	if removed != 2 || f.Membership().Epoch != 3 {
		t.Fatalf("%d removed at epoch %d, want 2 at 3", removed, f.Membership().Epoch)
	}
	bad := remove(3, keys[1], keys[0])
	bad.Change.Power = 10
	bad.Sigs = []trust.CertSig{SignMembership(membershipChain, bad.Change, [20]byte(addressOf(keys[0])), keys[0])}
	if c := apply(bad).Txs[0].Results[0].Code; c != kerr.InvalidRequest.Code || f.Membership().Epoch != 3 {
		t.Fatalf("a removal with power: code %d, epoch %d", c, f.Membership().Epoch)
	}
}

// TestMembershipAddBroker (issue 19, `stele cluster add`): from app
// version 8 a change signed like any other adds a broker to the directory
// as a replica (no update for CometBFT), the directory survives a
// restart, and the new key is promoted like any replica; a node id or a
// key the chain knows, a change giving the new broker power, a key that
// is not the change's validator, a bad address and a chain at version 7
// are refused.
func TestMembershipAddBroker(t *testing.T) {
	vs, keys := testValidators(t, 4)
	src := mapBatches{}
	open := directoryOpener(t, vs, keys, src)
	dir := t.TempDir()
	f := open(dir, cluster.MaxAppVersion)
	all := signersOf(keys...)
	h := int64(0)
	apply := func(c ChangeMembership) core.BlockOutcome {
		h++
		return applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all, Txs: [][]byte{tx(int(h), c)}})
	}
	seed := sha256.Sum256([]byte("broker 4"))
	k4 := ed25519.NewKeyFromSeed(seed[:])
	add := func(epoch uint64, id int32, k ed25519.PrivateKey, signers ...ed25519.PrivateKey) ChangeMembership {
		e := BrokerEntry{NodeID: id, Kafka: "127.0.0.1:19096", HTTP: "127.0.0.1:19196"}
		copy(e.PubKey[:], k.Public().(ed25519.PublicKey))
		c := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Epoch: epoch, Validator: e.Address(), Broker: e}}
		for _, s := range signers {
			c.Sigs = append(c.Sigs, SignMembership(membershipChain, c.Change, [20]byte(addressOf(s)), s))
		}
		return c
	}
	code := func(what string, c ChangeMembership, want int16) {
		t.Helper()
		if got := apply(c).Txs[0].Results[0]; got.Code != want {
			t.Fatalf("%s: code %d (%s), want %d", what, got.Code, got.Message, want)
		}
	}
	// One validator's vote is recorded, not applied.
	code("one vote", add(0, 4, k4, keys[0]), 0)
	if n := len(f.Directory()); n != 4 || f.Membership().Epoch != 0 {
		t.Fatalf("after one vote: %d brokers, epoch %d", n, f.Membership().Epoch)
	}
	out := apply(add(0, 4, k4, keys[1], keys[2]))
	if out.Txs[0].Results[0].Code != 0 || len(out.ValidatorUpdates) != 0 {
		t.Fatalf("adding broker 4: %s, updates %+v", out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	d := f.Directory()
	if len(d) != 5 || d[4].NodeID != 4 || d[4].Validator != [20]byte(addressOf(k4)) || d[4].Kafka != "127.0.0.1:19096" || d[4].AddedAt != h {
		t.Fatalf("directory %+v", d)
	}
	if recs := f.ValidatorRecords(); len(recs) != 1 || recs[0].Reason != cluster.ReasonAdded || recs[0].Power != 0 {
		t.Fatalf("records %+v", recs)
	}
	if n := len(f.CommittedValidators().Validators()); n != 4 {
		t.Fatalf("%d validators after adding a replica", n)
	}
	code("a genesis node id", add(1, 2, k4, keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	code("the same key again", add(1, 5, k4, keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	code("a genesis key", add(1, 5, keys[3], keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	seed5 := sha256.Sum256([]byte("broker 5"))
	k5 := ed25519.NewKeyFromSeed(seed5[:])
	code("the added node id", add(1, 4, k5, keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	withPower := add(1, 5, k5)
	withPower.Change.Power = 10
	withPower.Sigs = []trust.CertSig{SignMembership(membershipChain, withPower.Change, [20]byte(addressOf(keys[0])), keys[0])}
	code("a new broker with power", withPower, kerr.InvalidRequest.Code)
	wrong := add(1, 5, k5)
	wrong.Change.Validator = [20]byte(addressOf(keys[3]))
	wrong.Sigs = []trust.CertSig{SignMembership(membershipChain, wrong.Change, [20]byte(addressOf(keys[0])), keys[0])}
	code("another validator's address", wrong, kerr.InvalidRequest.Code)
	bad := add(1, 5, k5)
	bad.Change.Broker.Kafka = "no-port"
	bad.Sigs = []trust.CertSig{SignMembership(membershipChain, bad.Change, [20]byte(addressOf(keys[0])), keys[0])}
	code("a Kafka address without a port", bad, kerr.InvalidRequest.Code)

	// Restarted, the directory is the same; the new key is promoted.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = open(dir, cluster.MaxAppVersion)
	defer f.Close()
	if d := f.Directory(); len(d) != 5 || d[4].Validator != [20]byte(addressOf(k4)) || !bytes.Equal(d[4].PubKey, k4.Public().(ed25519.PublicKey)) {
		t.Fatalf("directory after a restart %+v", d)
	}
	out = apply(memberChange(1, k4, 10, keys[0], keys[1], keys[2]))
	if out.Txs[0].Results[0].Code != 0 || len(out.ValidatorUpdates) != 1 || out.ValidatorUpdates[0].Power != 10 ||
		!bytes.Equal(out.ValidatorUpdates[0].PubKey, k4.Public().(ed25519.PublicKey)) {
		t.Fatalf("promoting broker 4: %s, updates %+v", out.Txs[0].Results[0].Message, out.ValidatorUpdates)
	}
	if n := len(f.CommittedValidators().Validators()); n != 5 {
		t.Fatalf("%d validators after promoting broker 4", n)
	}
	// A certificate the new validator helps sign, applied once it is
	// removed: its submitter certifies it again (not a plain refusal,
	// which clients do not retry).
	payload := tx(1000, topics.DeleteTopic{Name: "nothing"})
	src[sha256.Sum256(payload)] = payload
	withNew := trust.EncodeCertifiedTx(certifyFor(membershipChain, payload, h, keys[0], k4))
	removal := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Epoch: 2, Validator: [20]byte(addressOf(k4)), Remove: true}}
	for _, k := range keys { // 40 of 50
		removal.Sigs = append(removal.Sigs, SignMembership(membershipChain, removal.Change, [20]byte(addressOf(k)), k))
	}
	code("removing broker 4", removal, 0)
	if n := len(f.CommittedValidators().Validators()); n != 4 {
		t.Fatalf("%d validators after removing broker 4", n)
	}
	h++
	out = applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all})
	h++
	out = applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all, Txs: [][]byte{withNew}})
	if out.Txs[0].Code != core.CodeResubmit {
		t.Fatalf("a certificate signed by an added validator since removed: code %d (%s), want %d (submit again)", out.Txs[0].Code, out.Txs[0].Log, core.CodeResubmit)
	}

	old := open(t.TempDir(), cluster.MembershipVersion)
	defer old.Close()
	o := applyCommit(t, old, core.Block{Height: 1, TimeMs: 1000, Signers: all, Txs: [][]byte{tx(1, add(0, 4, k4, keys[0], keys[1], keys[2]))}})
	if c := o.Txs[0].Results[0].Code; c != kerr.UnsupportedVersion.Code || len(old.Directory()) != 4 {
		t.Fatalf("adding a broker under version 7: code %d, %d brokers", c, len(old.Directory()))
	}
}

// TestMembershipRotateKey (issue 19, stele cluster rotate-key): from app
// version 9 a change naming a broker's current key and carrying its entry
// with a new key moves the old key's power to the new one, retires the old
// key for good, and makes the directory name the new key for the same
// node id (a genesis broker's too), across a restart; a rotation naming a
// stale key, to a key the chain knows, or one the validators signing now
// could not carry is refused; under version 8 it is refused as the
// binaries before it refuse it.
func TestMembershipRotateKey(t *testing.T) {
	vs, keys := testValidators(t, 4)
	open := directoryOpener(t, vs, keys, mapBatches{})
	newKey := func(name string) ed25519.PrivateKey {
		seed := sha256.Sum256([]byte(name))
		return ed25519.NewKeyFromSeed(seed[:])
	}
	rotate := func(epoch uint64, id int32, old, next ed25519.PrivateKey, signers ...ed25519.PrivateKey) ChangeMembership {
		e := BrokerEntry{NodeID: id, Kafka: fmt.Sprintf("127.0.0.1:%d", 29092+id), HTTP: fmt.Sprintf("127.0.0.1:%d", 29192+id), Rack: "r1"}
		copy(e.PubKey[:], next.Public().(ed25519.PublicKey))
		c := ChangeMembership{ChainID: membershipChain, Change: MembershipChange{Epoch: epoch, Validator: [20]byte(addressOf(old)), Broker: e}}
		for _, s := range signers {
			c.Sigs = append(c.Sigs, SignMembership(membershipChain, c.Change, [20]byte(addressOf(s)), s))
		}
		return c
	}
	all := signersOf(keys...)
	dir := t.TempDir()
	f := open(dir, cluster.MaxAppVersion)
	h := int64(0)
	apply := func(c ChangeMembership) core.BlockOutcome {
		h++
		return applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all, Txs: [][]byte{tx(int(h), c)}})
	}
	code := func(what string, c ChangeMembership, want int16) {
		t.Helper()
		if got := apply(c).Txs[0].Results[0]; got.Code != want {
			t.Fatalf("%s: code %d (%s), want %d", what, got.Code, got.Message, want)
		}
	}
	k3 := newKey("broker 3, second key")
	code("one vote", rotate(0, 3, keys[3], k3, keys[0]), 0)
	if d := f.Directory(); d[3].Validator != [20]byte(addressOf(keys[3])) {
		t.Fatalf("one vote rotated the key: %+v", d[3])
	}
	out := apply(rotate(0, 3, keys[3], k3, keys[1], keys[2]))
	if r := out.Txs[0].Results[0]; r.Code != 0 {
		t.Fatalf("rotating broker 3's key: %s", r.Message)
	}
	if u := out.ValidatorUpdates; len(u) != 2 || !bytes.Equal(u[0].PubKey, keys[3].Public().(ed25519.PublicKey)) || u[0].Power != 0 ||
		!bytes.Equal(u[1].PubKey, k3.Public().(ed25519.PublicKey)) || u[1].Power != 10 {
		t.Fatalf("validator updates %+v, want the old key to 0 and the new one to 10", u)
	}
	rotatedAt := h
	check := func(f *FSM) {
		t.Helper()
		d := f.Directory()
		if len(d) != 4 || d[3].NodeID != 3 || d[3].Validator != [20]byte(addressOf(k3)) || !bytes.Equal(d[3].PubKey, k3.Public().(ed25519.PublicKey)) ||
			d[3].RotatedAt != rotatedAt || d[3].AddedAt != 0 || d[3].Kafka != "127.0.0.1:29095" || d[3].Rack != "r1" {
			t.Fatalf("directory after the rotation %+v", d)
		}
		recs := map[[20]byte]cluster.ValidatorRecord{}
		for _, r := range f.ValidatorRecords() {
			recs[r.Address] = r
		}
		if r := recs[[20]byte(addressOf(keys[3]))]; r.Reason != cluster.ReasonRotatedOut || r.Power != 0 || r.ChangedAt != rotatedAt {
			t.Fatalf("the old key's record %+v", r)
		}
		if r := recs[[20]byte(addressOf(k3))]; r.Reason != cluster.ReasonRotatedIn || r.Power != 10 {
			t.Fatalf("the new key's record %+v", r)
		}
		vals := f.CommittedValidators()
		if _, ok := vals.Lookup([20]byte(addressOf(keys[3]))); ok {
			t.Fatal("the old key is still a validator")
		}
		if v, ok := vals.Lookup([20]byte(addressOf(k3))); !ok || v.Power != 10 {
			t.Fatal("the new key is not a validator of power 10")
		}
	}
	check(f)
	k3b := newKey("broker 3, third key")
	code("a rotation naming the old key", rotate(1, 3, keys[3], k3b, keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	code("a rotation to a genesis key", rotate(1, 3, k3, keys[0], keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	code("a rotation to the old key", rotate(1, 3, k3, keys[3], keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	code("a rotation of no broker", rotate(1, 7, k3, k3b, keys[0], keys[1], keys[2]), kerr.InvalidRequest.Code)
	code("promoting the rotated-out key", memberChange(1, keys[3], 10, keys[0], keys[1], keys[2]), kerr.PolicyViolation.Code)
	// The new key has not signed yet: rotating another broker now would
	// leave 20 of 40 signing.
	code("a second rotation before the first key signs", rotate(1, 2, keys[2], k3b, keys[0], keys[1], keys[2]), kerr.PolicyViolation.Code)
	withPower := rotate(1, 2, keys[2], k3b)
	withPower.Change.Power = 10
	withPower.Sigs = []trust.CertSig{SignMembership(membershipChain, withPower.Change, [20]byte(addressOf(keys[0])), keys[0])}
	code("a rotation giving power", withPower, kerr.InvalidRequest.Code)

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = open(dir, cluster.MaxAppVersion)
	defer f.Close()
	check(f)
	// Once the new key signs, the next rotation goes through.
	all = signersOf(keys[0], keys[1], keys[2], k3)
	h++
	applyCommit(t, f, core.Block{Height: h, TimeMs: h * 1000, Signers: all})
	code("rotating broker 2 once broker 3's new key signs", rotate(1, 2, keys[2], k3b, keys[0], keys[1], k3), 0)
	if d := f.Directory(); d[2].Validator != [20]byte(addressOf(k3b)) || d[3].Validator != [20]byte(addressOf(k3)) {
		t.Fatalf("directory after two rotations %+v", d)
	}

	old := open(t.TempDir(), cluster.DirectoryVersion)
	defer old.Close()
	o := applyCommit(t, old, core.Block{Height: 1, TimeMs: 1000, Signers: all, Txs: [][]byte{tx(1, rotate(0, 3, keys[3], k3, keys[0], keys[1], keys[2]))}})
	if c := o.Txs[0].Results[0].Code; c != kerr.InvalidRequest.Code || old.Directory()[3].Validator != [20]byte(addressOf(keys[3])) || len(o.ValidatorUpdates) != 0 {
		t.Fatalf("rotating a key under version 8: code %d, directory %+v", c, old.Directory()[3])
	}
}
