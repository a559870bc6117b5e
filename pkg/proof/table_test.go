package proof

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cometbft/cometbft/crypto/tmhash"
	"github.com/pokt-network/smt"
	"github.com/pokt-network/smt/kvstore/simplemap"
)

// tableTopic is a topic entry as the store encodes it (DecodeTopic's
// layout): id, replication factor, partitions, configs, no assigned
// replicas.
func tableTopic(id [16]byte, partitions int32, policy string) []byte {
	b := append([]byte{storeValueVersion}, id[:]...)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(partitions))
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendUvarint(append(binary.AppendUvarint(b, uint64(len("cleanup.policy"))), "cleanup.policy"...), uint64(len(policy)))
	return binary.AppendUvarint(append(b, policy...), 0)
}

// tableFixture is a state with table topic "kv" (two partitions): key
// "a" at 0/5 (timestamp 10) and 1/2 (timestamp 20, the latest), "b"
// deleted at 0/7, and the honest table proof of key, signed by every
// validator of c.
func tableFixture(t *testing.T, c *chain, key string, value []byte) *TableProof {
	t.Helper()
	id := [16]byte{7}
	trie := smt.NewSparseMerkleTrie(simplemap.NewSimpleMap(), sha256.New())
	state := map[string][]byte{
		string(TopicKey("kv")):               tableTopic(id, 2, "compact"),
		string(TopicKey("plain")):            tableTopic([16]byte{8}, 1, "delete"),
		string(TableKey(id, 0, []byte("a"))): EncodeTableVersion(TableVersion{Offset: 5, Timestamp: 10, ValueHash: sha256.Sum256([]byte("old"))}),
		string(TableKey(id, 1, []byte("a"))): EncodeTableVersion(TableVersion{Offset: 2, Timestamp: 20, ValueHash: sha256.Sum256([]byte("new"))}),
		string(TableKey(id, 0, []byte("b"))): EncodeTableVersion(TableVersion{Offset: 7, Timestamp: 30, Deleted: true}),
		string(PartitionKey("kv", 0)):        {1, 2, 3},
	}
	for k, v := range state {
		if err := trie.Update([]byte(k), TrieValue(v)); err != nil {
			t.Fatal(err)
		}
	}
	p := &StateProof{Height: testHeight, Digest: tmhash.Sum([]byte("digest")), StateRoot: trie.Root(), LeavesRoot: tmhash.Sum(nil)}
	for _, k := range TableKeys("kv", id, 2, []byte(key)) {
		sp, err := trie.Prove(k)
		if err != nil {
			t.Fatal(err)
		}
		p.Entries = append(p.Entries, StateEntry{Key: k, Value: state[string(k)], SideNodes: sp.SideNodes, NonMembershipLeafData: sp.NonMembershipLeafData})
	}
	p.SignedHeader = c.sign(t, c.header(testHeight+1, AppHash(p.Digest, p.StateRoot, p.LeavesRoot)), all)
	return &TableProof{Topic: "kv", Key: []byte(key), Value: value, Proof: p}
}

// TestVerifyTable: a key's latest version across partitions, a deleted
// key and an absent one verify; every lie about them is refused.
func TestVerifyTable(t *testing.T) {
	c := newChain(t, testChain, 4)
	tr := c.trust()
	v, err := tr.VerifyTable(tableFixture(t, c, "a", []byte("new")))
	if err != nil || !v.Found || v.Latest.Partition != 1 || v.Latest.Offset != 2 || len(v.Versions) != 2 || !v.Has([]byte("new")) {
		t.Fatalf("a: %+v %v", v, err)
	}
	if v, err := tr.VerifyTable(tableFixture(t, c, "b", nil)); err != nil || !v.Found || !v.Latest.Deleted {
		t.Fatalf("b, deleted: %+v %v", v, err)
	}
	if v, err := tr.VerifyTable(tableFixture(t, c, "z", nil)); err != nil || v.Found {
		t.Fatalf("z, absent: %+v %v", v, err)
	}
	for _, lie := range []struct {
		what string
		key  string
		edit func(*TableProof)
	}{
		{"another value served", "a", func(p *TableProof) { p.Value = []byte("forged") }},
		{"an older version's value served", "a", func(p *TableProof) { p.Value = []byte("old") }},
		{"no value served for a present key", "a", func(p *TableProof) { p.Value = nil }},
		{"a value served for a deleted key", "b", func(p *TableProof) { p.Value = []byte("x") }},
		{"a value served for an absent key", "z", func(p *TableProof) { p.Value = []byte("x") }},
		{"the latest partition's leaf dropped", "a", func(p *TableProof) { p.Proof.Entries = p.Proof.Entries[:2] }},
		{"the latest leaf claimed absent", "a", func(p *TableProof) { p.Proof.Entries[2].Value = nil }},
		{"a tombstone claimed absent", "b", func(p *TableProof) { p.Proof.Entries[1].Value = nil }},
		{"a leaf's version altered", "a", func(p *TableProof) {
			p.Proof.Entries[2].Value = EncodeTableVersion(TableVersion{Offset: 2, Timestamp: 20, ValueHash: sha256.Sum256([]byte("forged"))})
			p.Value = []byte("forged")
		}},
		{"the topic entry dropped", "a", func(p *TableProof) { p.Proof.Entries = p.Proof.Entries[1:] }},
		{"another key's leaves", "a", func(p *TableProof) { p.Key = []byte("b") }},
		{"another topic", "a", func(p *TableProof) { p.Topic = "plain" }},
		{"leaves in another order", "a", func(p *TableProof) {
			p.Proof.Entries[1], p.Proof.Entries[2] = p.Proof.Entries[2], p.Proof.Entries[1]
		}},
		{"a side node altered", "a", func(p *TableProof) { p.Proof.Entries[2].SideNodes[0][0] ^= 1 }},
		{"header signed by 2 of 4", "a", func(p *TableProof) {
			p.Proof.SignedHeader = c.sign(t, c.header(testHeight+1, AppHash(p.Proof.Digest, p.Proof.StateRoot, p.Proof.LeavesRoot)), func(i int) bool { return i < 2 })
		}},
		{"no proof", "a", func(p *TableProof) { p.Proof = nil }},
	} {
		var value []byte
		if lie.key == "a" {
			value = []byte("new")
		}
		p := tableFixture(t, c, lie.key, value)
		lie.edit(p)
		if v, err := tr.VerifyTable(p); !errors.Is(err, ErrUnproven) || v != nil {
			t.Errorf("%s: VerifyTable gave %+v, %v; want ErrUnproven", lie.what, v, err)
		}
	}
}

// TestTableVersionEncoding: a version and a tombstone read back as
// written; trailing, short or unknown bytes are refused.
func TestTableVersionEncoding(t *testing.T) {
	for _, v := range []TableVersion{{Partition: 3, Offset: 9, Timestamp: -1, ValueHash: sha256.Sum256([]byte("v"))}, {Partition: 0, Offset: 0, Timestamp: 5, Deleted: true}} {
		b := EncodeTableVersion(v)
		got, err := DecodeTableVersion(v.Partition, b)
		if err != nil || got != v {
			t.Fatalf("%+v read back as %+v, %v", v, got, err)
		}
		for _, bad := range [][]byte{b[:len(b)-1], append(b, 0), append([]byte{2}, b[1:]...)} {
			if _, err := DecodeTableVersion(0, bad); !errors.Is(err, ErrStateValue) {
				t.Errorf("%x decoded: %v", bad, err)
			}
		}
	}
	if !IsTable(map[string]string{"cleanup.policy": "delete,compact"}) || IsTable(map[string]string{}) || !IsTable(map[string]string{"cleanup.policy": "snapshot"}) {
		t.Fatal("IsTable")
	}
}
