package proof

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/crypto/merkle"
	"github.com/cometbft/cometbft/crypto/tmhash"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmtversion "github.com/cometbft/cometbft/proto/tendermint/version"
	"github.com/cometbft/cometbft/types"
	"github.com/cometbft/cometbft/version"

	"github.com/stele-io/stele/internal/record"
)

const (
	testChain  = "stele-test"
	testHeight = int64(7) // the batch's block; the header of 8 carries its app hash
	testBase   = int64(42)
	testLeaf   = 2 // the batch's leaf among testLeaves
	testLeaves = 5
)

var (
	testTopicID = [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	testTime    = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

// chain is a validator set with its private keys, in the set's order.
type chain struct {
	id   string
	vals *types.ValidatorSet
	pvs  []types.PrivValidator
}

func newChain(t testing.TB, id string, n int) *chain {
	t.Helper()
	set, pvs := types.RandValidatorSet(n, 10)
	c := &chain{id: id, vals: set}
	for _, v := range set.Validators {
		for _, pv := range pvs {
			pk, err := pv.GetPubKey()
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(pk.Address(), v.Address) {
				c.pvs = append(c.pvs, pv)
			}
		}
	}
	if len(c.pvs) != n {
		t.Fatalf("matched %d of %d private validators to the set", len(c.pvs), n)
	}
	return c
}

func (c *chain) trust() *Trust { return &Trust{ChainID: c.id, Validators: c.vals} }

// header is a valid header of height carrying appHash, naming c's
// validators.
func (c *chain) header(height int64, appHash []byte) *types.Header {
	h := &types.Header{
		Version:            cmtversion.Consensus{Block: version.BlockProtocol},
		ChainID:            c.id,
		Height:             height,
		Time:               testTime,
		LastBlockID:        types.BlockID{Hash: tmhash.Sum([]byte("previous block")), PartSetHeader: types.PartSetHeader{Total: 1, Hash: tmhash.Sum([]byte("previous parts"))}},
		LastCommitHash:     tmhash.Sum([]byte("last commit")),
		DataHash:           tmhash.Sum([]byte("data")),
		ValidatorsHash:     c.vals.Hash(),
		NextValidatorsHash: c.vals.Hash(),
		ConsensusHash:      tmhash.Sum([]byte("params")),
		AppHash:            appHash,
		LastResultsHash:    tmhash.Sum([]byte("results")),
		EvidenceHash:       tmhash.Sum(nil),
		ProposerAddress:    c.vals.Validators[0].Address,
	}
	return h
}

// sign makes the commit of h by the validators of c whose index signs
// says, and returns the signed header as Verify reads it.
func (c *chain) sign(t testing.TB, h *types.Header, signs func(i int) bool) []byte {
	t.Helper()
	bid := types.BlockID{Hash: h.Hash(), PartSetHeader: types.PartSetHeader{Total: 1, Hash: tmhash.Sum([]byte("parts"))}}
	commit := &types.Commit{Height: h.Height, BlockID: bid, Signatures: make([]types.CommitSig, len(c.pvs))}
	for i, pv := range c.pvs {
		if !signs(i) {
			commit.Signatures[i] = types.NewCommitSigAbsent()
			continue
		}
		v := &types.Vote{Type: cmtproto.PrecommitType, Height: h.Height, BlockID: bid, Timestamp: h.Time.Add(time.Second),
			ValidatorAddress: c.vals.Validators[i].Address, ValidatorIndex: int32(i)}
		pb := v.ToProto()
		if err := pv.SignVote(c.id, pb); err != nil {
			t.Fatal(err)
		}
		commit.Signatures[i] = types.CommitSig{BlockIDFlag: types.BlockIDFlagCommit, ValidatorAddress: v.ValidatorAddress,
			Timestamp: v.Timestamp, Signature: pb.Signature}
	}
	return encodeSignedHeader(t, &types.SignedHeader{Header: h, Commit: commit})
}

func all(int) bool { return true }

func decodeSignedHeader(t testing.TB, b []byte) *types.SignedHeader {
	t.Helper()
	var pb cmtproto.SignedHeader
	if err := pb.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	sh, err := types.SignedHeaderFromProto(&pb)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

func encodeSignedHeader(t testing.TB, sh *types.SignedHeader) []byte {
	t.Helper()
	b, err := sh.ToProto().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testBatch is a RecordBatch v2 of three records at base offset base, as a
// broker stores it.
func testBatch(t testing.TB, base int64) []byte {
	t.Helper()
	recs := []record.Record{
		{OffsetDelta: 0, Key: []byte("k-0"), Value: []byte("first")},
		{OffsetDelta: 1, TimestampDelta: 3, Key: []byte("k-1"), Value: []byte("second"),
			Headers: []record.RecordHeader{{Key: "h", Value: []byte("v")}}},
		{OffsetDelta: 2, TimestampDelta: 5, Value: []byte("third")},
	}
	b, err := record.Build(record.Header{FirstTimestamp: testTime.UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	record.SetBaseOffset(b, base)
	return b
}

// honest is an honest proof of testBatch at testBase of topic "orders"
// partition 3, its leaf one of testLeaves in its block, signed by every
// validator of c.
func honest(t testing.TB, c *chain) *Batch {
	t.Helper()
	batch := testBatch(t, testBase)
	leaves := make([][]byte, testLeaves)
	for i := range leaves {
		leaves[i] = BatchLeaf("other", [16]byte{byte(i)}, int32(i), int64(100*i), []byte(fmt.Sprintf("batch %d", i)))
	}
	leaves[testLeaf] = BatchLeaf("orders", testTopicID, 3, testBase, batch)
	root, paths := merkle.ProofsFromByteSlices(leaves)
	digest := tmhash.Sum([]byte("the block's transactions and results"))
	state := tmhash.Sum([]byte("the state root"))
	return &Batch{
		Topic: "orders", TopicID: hex.EncodeToString(testTopicID[:]), Partition: 3,
		BaseOffset: testBase, LastOffset: testBase + 2, Batch: batch,
		Height: testHeight, Digest: digest, StateRoot: state, Root: root, Path: paths[testLeaf],
		SignedHeader: c.sign(t, c.header(testHeight+1, AppHash(digest, state, root)), all),
	}
}

// clone copies b deeply enough that altering a field of the copy leaves b
// as it was.
func clone(b *Batch) *Batch {
	c := *b
	c.Batch = bytes.Clone(b.Batch)
	c.Digest = bytes.Clone(b.Digest)
	c.StateRoot = bytes.Clone(b.StateRoot)
	c.Root = bytes.Clone(b.Root)
	c.SignedHeader = bytes.Clone(b.SignedHeader)
	p := *b.Path
	p.LeafHash = bytes.Clone(p.LeafHash)
	p.Aunts = make([][]byte, len(b.Path.Aunts))
	for i, a := range b.Path.Aunts {
		p.Aunts[i] = bytes.Clone(a)
	}
	c.Path = &p
	return &c
}

func wantUnproven(t *testing.T, what string, tr *Trust, b *Batch) {
	t.Helper()
	v, err := tr.Verify(b)
	if !errors.Is(err, ErrUnproven) || v != nil {
		t.Fatalf("%s: Verify gave %+v, %v; want ErrUnproven", what, v, err)
	}
	if !strings.HasPrefix(what, "batch byte") {
		t.Logf("%s: %v", what, err)
	}
}

// TestVerifyHonest: an honest proof is accepted and Verified describes the
// batch and the header that proves it.
func TestVerifyHonest(t *testing.T) {
	c := newChain(t, testChain, 4)
	b := honest(t, c)
	v, err := c.trust().Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	sh := decodeSignedHeader(t, b.SignedHeader)
	want := Verified{Topic: "orders", TopicID: testTopicID, Partition: 3, BaseOffset: testBase, LastOffset: testBase + 2,
		Batch: b.Batch, Height: testHeight, HeaderHash: sh.Hash(), Time: testTime.UnixMilli(), Validators: 4}
	if fmt.Sprint(*v) != fmt.Sprint(want) {
		t.Fatalf("verified %+v\nwant %+v", *v, want)
	}
	// Three of four validators are more than two thirds of the power.
	b.SignedHeader = c.sign(t, c.header(testHeight+1, AppHash(b.Digest, b.StateRoot, b.Root)), func(i int) bool { return i != 1 })
	if _, err := c.trust().Verify(b); err != nil {
		t.Fatalf("signed by 3 of 4 validators: %v", err)
	}
}

// TestVerifyRejectsTampering: each lie a broker could tell about the batch,
// where it sits, or the block that appended it is refused with ErrUnproven.
func TestVerifyRejectsTampering(t *testing.T) {
	c := newChain(t, testChain, 4)
	tr := c.trust()
	good := honest(t, c)
	appHash := AppHash(good.Digest, good.StateRoot, good.Root)

	// Every single byte of the batch, CRC-covered or not (the base offset
	// and the partition leader epoch are outside the CRC).
	for i := range good.Batch {
		b := clone(good)
		b.Batch[i] ^= 0x01
		wantUnproven(t, fmt.Sprintf("batch byte %d altered", i), tr, b)
	}
	resign := func(b []byte) []byte { // what a liar able to recompute the CRC sends
		b = bytes.Clone(b)
		record.SetLogAppendTime(b, testTime.UnixMilli()+1)
		return b
	}
	cases := []struct {
		what  string
		alter func(b *Batch)
	}{
		{"batch with a wrong CRC", func(b *Batch) { b.Batch[17] ^= 0xff }},
		{"batch altered with its CRC recomputed", func(b *Batch) { b.Batch = resign(b.Batch) }},
		{"partition leader epoch altered (outside the CRC)", func(b *Batch) { record.SetPartitionLeaderEpoch(b.Batch, 9) }},
		{"batch truncated", func(b *Batch) { b.Batch = b.Batch[:len(b.Batch)-1] }},
		{"batch with a byte appended", func(b *Batch) { b.Batch = append(b.Batch, 0) }},
		{"two batches", func(b *Batch) { b.Batch = append(b.Batch, testBatch(t, testBase+3)...) }},
		{"no batch", func(b *Batch) { b.Batch = nil }},
		{"another base offset claimed", func(b *Batch) { b.BaseOffset++; b.LastOffset++ }},
		{"another last offset claimed", func(b *Batch) { b.LastOffset++ }},
		{"the batch moved to another base offset, claimed", func(b *Batch) {
			record.SetBaseOffset(b.Batch, testBase+1)
			b.BaseOffset, b.LastOffset = testBase+1, testBase+3
		}},
		{"another topic", func(b *Batch) { b.Topic = "orderz" }},
		{"another partition", func(b *Batch) { b.Partition = 4 }},
		{"another topic id", func(b *Batch) { b.TopicID = "00" + b.TopicID[2:] }},
		{"a topic id that is not hex", func(b *Batch) { b.TopicID = "zz" + b.TopicID[2:] }},
		{"a short topic id", func(b *Batch) { b.TopicID = b.TopicID[:30] }},
		{"digest altered", func(b *Batch) { b.Digest[0] ^= 1 }},
		{"state root altered", func(b *Batch) { b.StateRoot[0] ^= 1 }},
		{"root altered", func(b *Batch) { b.Root[31] ^= 1 }},
		{"path aunt altered", func(b *Batch) { b.Path.Aunts[0][5] ^= 1 }},
		{"path aunt dropped", func(b *Batch) { b.Path.Aunts = b.Path.Aunts[1:] }},
		{"path leaf hash altered", func(b *Batch) { b.Path.LeafHash[0] ^= 1 }},
		{"path index moved", func(b *Batch) { b.Path.Index++ }},
		// (Total is not itself authenticated: 6 instead of 5 leaves gives
		// leaf 2 the same aunts, and the leaf is under the root all the
		// same. A total that changes the path's shape must fail.)
		{"path total changed", func(b *Batch) { b.Path.Total = 3 }},
		{"path total below the index", func(b *Batch) { b.Path.Total = 2 }},
		{"negative path index", func(b *Batch) { b.Path.Index = -1 }},
		{"no path", func(b *Batch) { b.Path = nil }},
		{"another height claimed", func(b *Batch) { b.Height++ }},
		{"header of the batch's own height", func(b *Batch) {
			b.SignedHeader = c.sign(t, c.header(testHeight, appHash), all)
		}},
		{"header two heights on", func(b *Batch) {
			b.SignedHeader = c.sign(t, c.header(testHeight+2, appHash), all)
		}},
		{"header signed by 2 of 4 validators", func(b *Batch) {
			b.SignedHeader = c.sign(t, c.header(testHeight+1, appHash), func(i int) bool { return i < 2 })
		}},
		{"header signed by nobody", func(b *Batch) {
			b.SignedHeader = c.sign(t, c.header(testHeight+1, appHash), func(int) bool { return false })
		}},
		{"header with another app hash, signed", func(b *Batch) {
			b.SignedHeader = c.sign(t, c.header(testHeight+1, AppHash(b.Digest, b.StateRoot, tmhash.Sum(nil))), all)
		}},
		{"header of another chain", func(b *Batch) {
			o := newChain(t, "other-chain", 4)
			o.vals, o.pvs = c.vals, c.pvs // the same validators, another chain id
			b.SignedHeader = o.sign(t, o.header(testHeight+1, appHash), all)
		}},
		{"votes signed for another chain", func(b *Batch) {
			o := &chain{id: "other-chain", vals: c.vals, pvs: c.pvs}
			b.SignedHeader = o.sign(t, c.header(testHeight+1, appHash), all)
		}},
		{"the commit of another header of the same height", func(b *Batch) {
			h := decodeSignedHeader(t, c.sign(t, c.header(testHeight+1, appHash), all))
			other := decodeSignedHeader(t, c.sign(t, c.header(testHeight+1, AppHash(b.Root, b.StateRoot, b.Digest)), all))
			h.Commit = other.Commit
			b.SignedHeader = encodeSignedHeader(t, h)
		}},
		{"header naming and signed by another validator set", func(b *Batch) {
			o := newChain(t, testChain, 4)
			b.SignedHeader = o.sign(t, o.header(testHeight+1, appHash), all)
		}},
		{"header naming the trusted set, signed by another", func(b *Batch) {
			o := newChain(t, testChain, 4)
			h := c.header(testHeight+1, appHash)
			o.vals = c.vals // addresses of the trusted set, keys of another
			b.SignedHeader = o.sign(t, h, all)
		}},
		{"no signed header", func(b *Batch) { b.SignedHeader = nil }},
		{"signed header cut short", func(b *Batch) { b.SignedHeader = b.SignedHeader[:len(b.SignedHeader)/2] }},
	}
	for _, tc := range cases {
		b := clone(good)
		tc.alter(b)
		wantUnproven(t, tc.what, tr, b)
	}
	wantUnproven(t, "no proof", tr, nil)

	// Any byte of the signed header altered after signing. Bytes that only
	// change the protobuf encoding, not the header or commit it decodes to,
	// may pass; none may make another batch verify, which is checked by
	// FuzzVerify. Here: the app hash, as signed, altered in place.
	b := clone(good)
	i := bytes.Index(b.SignedHeader, appHash)
	if i < 0 {
		t.Fatal("the app hash is not in the signed header's bytes")
	}
	b.SignedHeader[i+3] ^= 1
	wantUnproven(t, "app hash altered in the signed header", tr, b)

	// The trust matters: the honest proof does not verify for another set
	// or another chain.
	wantUnproven(t, "trusting another validator set", newChain(t, testChain, 4).trust(), clone(good))
	wantUnproven(t, "trusting another chain", &Trust{ChainID: "other-chain", Validators: c.vals}, clone(good))
	if _, err := tr.Verify(good); err != nil {
		t.Fatalf("the honest proof after the cases ran: %v", err)
	}
}

// TestTrustGenesis: the trust read from a genesis document (and its file)
// verifies the proofs of that chain; a genesis without validators' keys
// is refused.
func TestTrustGenesis(t *testing.T) {
	c := newChain(t, testChain, 4)
	doc := &types.GenesisDoc{ChainID: testChain, GenesisTime: testTime, InitialHeight: 1}
	for i, v := range c.vals.Validators {
		doc.Validators = append(doc.Validators, types.GenesisValidator{Address: v.Address, PubKey: v.PubKey, Power: v.VotingPower, Name: fmt.Sprintf("node%d", i)})
	}
	path := filepath.Join(t.TempDir(), "genesis.json")
	if err := doc.SaveAs(path); err != nil {
		t.Fatal(err)
	}
	tr, err := TrustGenesis(doc)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := TrustGenesisFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := honest(t, c)
	for name, tr := range map[string]*Trust{"genesis": tr, "genesis file": fromFile} {
		if tr.ChainID != testChain || !bytes.Equal(tr.Validators.Hash(), c.vals.Hash()) {
			t.Fatalf("%s: trusts chain %q validators %X, want %q %X", name, tr.ChainID, tr.Validators.Hash(), testChain, c.vals.Hash())
		}
		if _, err := tr.Verify(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := TrustGenesis(&types.GenesisDoc{GenesisTime: testTime}); err == nil {
		t.Fatal("a genesis without a chain id was trusted")
	}
	bad := *doc
	bad.Validators = append([]types.GenesisValidator(nil), doc.Validators...)
	bad.Validators[0].Power = 0
	if _, err := TrustGenesis(&bad); err == nil {
		t.Fatal("a genesis with a validator of power 0 was trusted")
	}
	if _, err := TrustGenesisFile(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a missing genesis file was trusted")
	}
}

// TestBatchLeafAndAppHashDomains: the leaf and app hash encodings are
// unambiguous where it matters (a topic name cannot borrow bytes from the
// topic id; partition and offset have fixed widths), and pinned, so that a
// client built against one version checks the proofs of another.
func TestBatchLeafAndAppHashDomains(t *testing.T) {
	batch := []byte("batch")
	id := [16]byte{'x'}
	if bytes.Equal(BatchLeaf("ab", id, 0, 0, batch), BatchLeaf("abx", [16]byte{}, 0, 0, batch)) {
		t.Fatal("a topic name and its id's bytes are ambiguous")
	}
	if bytes.Equal(BatchLeaf("t", id, 1, 0, batch), BatchLeaf("t", id, 0, 1, batch)) {
		t.Fatal("partition and base offset are ambiguous")
	}
	// sha256("stele/batch/v1" | 0006 "orders" | id | 00000003 | 000000000000002a | "batch")
	// and sha256("stele/apphash/v4" | "digest" | "state" | "root"), computed with
	// sha256sum from the documented layouts.
	const (
		pinnedLeaf    = "16bac39763be6b449e140673595c21e50877e73f6c8e358878860c7b1a79d270"
		pinnedAppHash = "bc88b77b83cdea9513f4ce4e0021e04bb0678383399dccbdd22a2b176df2cc44"
	)
	if got := hex.EncodeToString(BatchLeaf("orders", testTopicID, 3, testBase, batch)); got != pinnedLeaf {
		t.Fatalf("BatchLeaf changed: %s, pinned %s (a change breaks every client: bump the domain instead)", got, pinnedLeaf)
	}
	if got := hex.EncodeToString(AppHash([]byte("digest"), []byte("state"), []byte("root"))); got != pinnedAppHash {
		t.Fatalf("AppHash changed: %s, pinned %s (a change breaks every client: bump the domain instead)", got, pinnedAppHash)
	}
}

// FuzzVerify: the signed header, the batch and the Merkle path's position
// come from a broker that may lie. Verify never panics on them, and never
// accepts a batch other than the one the validators' app hash commits to.
func FuzzVerify(f *testing.F) {
	c := newChain(f, testChain, 4)
	tr := c.trust()
	good := honest(f, c)
	appHash := AppHash(good.Digest, good.StateRoot, good.Root)
	f.Add(good.SignedHeader, good.Batch, good.Path.Index, good.Path.Total)
	f.Add(c.sign(f, c.header(testHeight+1, appHash), func(i int) bool { return i < 2 }), good.Batch, good.Path.Index, good.Path.Total)
	f.Add(c.sign(f, c.header(testHeight, appHash), all), testBatch(f, testBase+1), good.Path.Index+1, good.Path.Total)
	f.Add(good.SignedHeader[:len(good.SignedHeader)/3], good.Batch[:61], int64(0), int64(1))
	f.Add([]byte{}, []byte{}, int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, signedHeader, batch []byte, index, total int64) {
		b := clone(good)
		b.SignedHeader, b.Batch, b.Path.Index, b.Path.Total = signedHeader, batch, index, total
		v, err := tr.Verify(b)
		if err != nil {
			if !errors.Is(err, ErrUnproven) || v != nil {
				t.Fatalf("Verify: %+v, %v; want nil and ErrUnproven", v, err)
			}
			return
		}
		if !bytes.Equal(v.Batch, good.Batch) || v.BaseOffset != testBase || v.Height != testHeight || v.TopicID != testTopicID {
			t.Fatalf("Verify accepted %+v, which is not the honest batch", v)
		}
	})
}

// without returns the chain c after the validator at index i was removed
// (voted out for misbehavior): its set and private validators, less i.
func (c *chain) without(t testing.TB, i int) *chain {
	t.Helper()
	var vals []*types.Validator
	var pvs []types.PrivValidator
	for j, v := range c.vals.Validators {
		if j != i {
			vals = append(vals, types.NewValidator(v.PubKey, v.VotingPower))
			pvs = append(pvs, c.pvs[j])
		}
	}
	d := &chain{id: c.id, vals: types.NewValidatorSet(vals)}
	for _, v := range d.vals.Validators { // NewValidatorSet orders them
		for _, pv := range pvs {
			if pk, _ := pv.GetPubKey(); bytes.Equal(pk.Address(), v.Address) {
				d.pvs = append(d.pvs, pv)
			}
		}
	}
	return d
}

func encodeValidators(t testing.TB, vs *types.ValidatorSet) []byte {
	t.Helper()
	pb, err := vs.ToProto()
	if err != nil {
		t.Fatal(err)
	}
	b, err := pb.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVerifyHeaderAcrossASetChange (issue 19, light clients across
// changes): a header of the set left after a validator was removed is
// accepted with that set when the trusted validators who signed it hold
// more than a third of the trusted power; without the set, with a set the
// header does not name, with too few of the new set's signatures, or from
// a set the trusted validators do not vouch for, it is refused.
func TestVerifyHeaderAcrossASetChange(t *testing.T) {
	c := newChain(t, "stele-test", 4)
	tr := c.trust()
	d := c.without(t, 2)
	all := func(int) bool { return true }
	sh := d.sign(t, d.header(50, []byte("app hash after the change")), all)
	if _, err := tr.VerifyHeaderWith(sh, encodeValidators(t, d.vals)); err != nil {
		t.Fatalf("a header of the set left, with that set: %v", err)
	}
	if _, err := tr.VerifyHeader(sh); !errors.Is(err, ErrUnproven) {
		t.Fatalf("a header of another set without it: %v", err)
	}
	if _, err := tr.VerifyHeaderWith(sh, encodeValidators(t, c.vals)); !errors.Is(err, ErrUnproven) {
		t.Fatalf("with a set the header does not name: %v", err)
	}
	if _, err := tr.VerifyHeaderWith(sh, []byte{0xff, 0x01}); !errors.Is(err, ErrUnproven) {
		t.Fatalf("with a set that does not decode: %v", err)
	}
	twoOfThree := d.sign(t, d.header(51, []byte("x")), func(i int) bool { return i < 2 })
	if _, err := tr.VerifyHeaderWith(twoOfThree, encodeValidators(t, d.vals)); !errors.Is(err, ErrUnproven) {
		t.Fatalf("signed by two thirds of the new set, not more: %v", err)
	}
	// A set of strangers, however well signed among themselves.
	other := newChain(t, "stele-test", 3)
	forged := other.sign(t, other.header(52, []byte("forged")), all)
	if _, err := tr.VerifyHeaderWith(forged, encodeValidators(t, other.vals)); !errors.Is(err, ErrUnproven) {
		t.Fatalf("a header of a set the trusted validators do not vouch for: %v", err)
	}
	// The trusted set itself still verifies without a set given.
	if _, err := tr.VerifyHeaderWith(c.sign(t, c.header(53, []byte("y")), all), nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzVerifyHeaderWith: a header and the validator set it is said to name
// come from a broker that may lie. VerifyHeaderWith never panics on them,
// and accepts only a header whose set hashes to what the header names and
// that validators of the trusted set vouch for.
func FuzzVerifyHeaderWith(f *testing.F) {
	c := newChain(f, "stele-test", 4)
	tr := c.trust()
	d := c.without(f, 1)
	all := func(int) bool { return true }
	sh, vals := d.sign(f, d.header(60, []byte("after")), all), encodeValidators(f, d.vals)
	f.Add(sh, vals)
	f.Add(sh, encodeValidators(f, c.vals))
	f.Add(c.sign(f, c.header(61, []byte("trusted")), all), []byte(nil))
	f.Add(sh[:len(sh)/2], vals[:len(vals)/2])
	f.Add([]byte{}, []byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, header, set []byte) {
		got, err := tr.VerifyHeaderWith(header, set)
		if err != nil {
			if !errors.Is(err, ErrUnproven) || got != nil {
				t.Fatalf("VerifyHeaderWith: %v, %v; want nil and ErrUnproven", got, err)
			}
			return
		}
		if !bytes.Equal(got.ValidatorsHash, tr.Validators.Hash()) && !bytes.Equal(got.ValidatorsHash, d.vals.Hash()) {
			t.Fatalf("accepted a header naming the set %X, neither the trusted one nor the one it changed to", []byte(got.ValidatorsHash))
		}
	})
}
