package fsm

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"testing"

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
	if len(recs) != 1 || !bytes.Equal(recs[0].Address[:], offender) || recs[0].Removed != core.DuplicateVote || recs[0].RemovedAt != 2 || recs[0].EvidenceHeight != 1 || recs[0].Power != 0 {
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
	if recs := g.ValidatorRecords(); len(recs) != 1 || recs[0].Removed != core.DuplicateVote {
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
