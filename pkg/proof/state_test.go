package proof

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/cometbft/cometbft/crypto/tmhash"
	"github.com/pokt-network/smt"
	"github.com/pokt-network/smt/kvstore/simplemap"
)

// stateFixture is a trie of a few state keys and an honest proof of two
// present keys and one absent, signed by every validator of c.
func stateFixture(t *testing.T, c *chain) *StateProof {
	t.Helper()
	trie := smt.NewSparseMerkleTrie(simplemap.NewSimpleMap(), sha256.New())
	state := map[string]string{
		string(TopicKey("orders")):          "topic",
		string(OffsetKey("g", "orders", 0)): "offset 0",
		string(OffsetKey("g", "orders", 1)): "offset 1",
		string(PartitionKey("orders", 0)):   "partition 0",
		string(ProducerKeyKey("alice")):     "key",
	}
	for k, v := range state {
		if err := trie.Update([]byte(k), TrieValue([]byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	p := &StateProof{Height: testHeight, Digest: tmhash.Sum([]byte("digest")), StateRoot: trie.Root(), LeavesRoot: tmhash.Sum(nil)}
	for _, k := range [][]byte{OffsetKey("g", "orders", 0), TopicKey("orders"), OffsetKey("g", "orders", 2)} {
		sp, err := trie.Prove(k)
		if err != nil {
			t.Fatal(err)
		}
		e := StateEntry{Key: k, SideNodes: sp.SideNodes, NonMembershipLeafData: sp.NonMembershipLeafData}
		if v, ok := state[string(k)]; ok {
			e.Value = []byte(v)
		}
		p.Entries = append(p.Entries, e)
	}
	p.SignedHeader = c.sign(t, c.header(testHeight+1, AppHash(p.Digest, p.StateRoot, p.LeavesRoot)), all)
	return p
}

func cloneState(p *StateProof) *StateProof {
	c := *p
	c.Digest, c.StateRoot, c.LeavesRoot = bytes.Clone(p.Digest), bytes.Clone(p.StateRoot), bytes.Clone(p.LeavesRoot)
	c.Entries = nil
	for _, e := range p.Entries {
		n := StateEntry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value), NonMembershipLeafData: bytes.Clone(e.NonMembershipLeafData)}
		for _, s := range e.SideNodes {
			n.SideNodes = append(n.SideNodes, bytes.Clone(s))
		}
		c.Entries = append(c.Entries, n)
	}
	return &c
}

// TestVerifyState: an honest state proof verifies (two values and one
// absence); every lie a broker could tell is refused.
func TestVerifyState(t *testing.T) {
	c := newChain(t, testChain, 4)
	tr := c.trust()
	good := stateFixture(t, c)
	v, err := tr.VerifyState(good)
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Values[string(OffsetKey("g", "orders", 0))]) != "offset 0" || v.Values[string(OffsetKey("g", "orders", 2))] != nil || v.Height != testHeight {
		t.Fatalf("verified %+v", v)
	}
	for _, lie := range []struct {
		what string
		edit func(*StateProof)
	}{
		{"a value altered", func(p *StateProof) { p.Entries[0].Value = []byte("offset 9") }},
		{"a present key claimed absent", func(p *StateProof) { p.Entries[1].Value = nil }},
		{"an absent key given a value", func(p *StateProof) { p.Entries[2].Value = []byte("offset 2") }},
		{"a key swapped", func(p *StateProof) { p.Entries[0].Key = OffsetKey("g", "orders", 1) }},
		{"a side node altered", func(p *StateProof) { p.Entries[0].SideNodes[0][0] ^= 1 }},
		{"a side node dropped", func(p *StateProof) { p.Entries[0].SideNodes = p.Entries[0].SideNodes[1:] }},
		{"a short side node", func(p *StateProof) { p.Entries[0].SideNodes[0] = p.Entries[0].SideNodes[0][:31] }},
		{"the state root altered", func(p *StateProof) { p.StateRoot[0] ^= 1 }},
		{"the digest altered", func(p *StateProof) { p.Digest[0] ^= 1 }},
		{"another height", func(p *StateProof) { p.Height++ }},
		{"no entries", func(p *StateProof) { p.Entries = nil }},
		{"an empty value", func(p *StateProof) { p.Entries[0].Value = []byte{} }},
		{"header signed by 2 of 4", func(p *StateProof) {
			p.SignedHeader = c.sign(t, c.header(testHeight+1, AppHash(p.Digest, p.StateRoot, p.LeavesRoot)), func(i int) bool { return i < 2 })
		}},
	} {
		p := cloneState(good)
		lie.edit(p)
		if v, err := tr.VerifyState(p); !errors.Is(err, ErrUnproven) || v != nil {
			t.Errorf("%s: VerifyState gave %+v, %v; want ErrUnproven", lie.what, v, err)
		}
	}
}

// FuzzDecodeStateValues: the decoders of state values a broker sends never
// panic and never read past what they were given.
func FuzzDecodeStateValues(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(append([]byte{1}, make([]byte, 16+2+4+1)...))
	f.Add(EncodeTableVersion(TableVersion{Offset: 3, Timestamp: 4, ValueHash: [32]byte{1}}))
	f.Add(EncodeTableVersion(TableVersion{Offset: 3, Deleted: true}))
	f.Add([]byte("\x01\x04AVRO\x05\"int\"\x01\x01x\x01s\x00\x00\x00\x01\x05\"int\""))
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeTopic(b)
		DecodePartition(b)
		DecodeCommittedOffset(b)
		DecodeTableVersion(0, b)
		DecodeSchema(b)
	})
}
