package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"runtime"
	"testing"

	"github.com/pokt-network/smt"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/keys"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/schemas"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/fsm/tenants"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/pkg/proof"
)

// TestProveState: after the scenario, the committed state proves a topic,
// a partition's offsets, a committed offset, a producer key and the absence
// of a committed offset; each proof leads to the state root, the parts
// hash to the committed app hash, pkg/proof's key builders are the store's
// keys and its decoders read the store's values as the views show them.
func TestProveState(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	applyAll(t, f, scenario(t))

	if got, want := proof.TopicKey("orders"), core.TopicKey("orders"); !bytes.Equal(got, want) {
		t.Fatalf("proof.TopicKey %q, store %q", got, want)
	}
	if got, want := proof.PartitionKey("orders", 3), core.PartitionKey("orders", 3); !bytes.Equal(got, want) {
		t.Fatalf("proof.PartitionKey %q, store %q", got, want)
	}
	if got, want := proof.OffsetKey("audit", "orders", 0), groups.OffsetKey(groups.OffsetRef{Group: "audit", Topic: "orders", Partition: 0}); !bytes.Equal(got, want) {
		t.Fatalf("proof.OffsetKey %q, store %q", got, want)
	}
	if got, want := proof.ProducerKeyKey("alice"), trust.ProducerKeyKey("alice"); !bytes.Equal(got, want) {
		t.Fatalf("proof.ProducerKeyKey %q, store %q", got, want)
	}

	keys := [][]byte{proof.TopicKey("orders"), proof.PartitionKey("orders", 1), proof.OffsetKey("audit", "orders", 0),
		proof.ProducerKeyKey("alice"), proof.OffsetKey("audit", "orders", 3), proof.TopicKey("doomed")}
	p, err := f.ProveState(keys...)
	if err != nil {
		t.Fatal(err)
	}
	_, appHash := f.Info()
	if got := proof.AppHash(p.Digest, p.StateRoot, p.LeavesRoot); !bytes.Equal(got, appHash) {
		t.Fatalf("the proof's parts hash to %X, the committed app hash is %X", got, appHash)
	}
	spec := smt.NewTrieSpec(sha256.New(), false)
	for i, e := range p.Entries {
		ok, err := smt.VerifyProof(&smt.SparseMerkleProof{SideNodes: e.SideNodes, NonMembershipLeafData: e.NonMembershipLeafData}, p.StateRoot, keys[i], trieLeaf(e.Value), &spec)
		if err != nil || !ok {
			t.Fatalf("key %q: proof does not verify: %v", keys[i], err)
		}
		// The same proof must not pass for another value.
		if ok, _ := smt.VerifyProof(&smt.SparseMerkleProof{SideNodes: e.SideNodes, NonMembershipLeafData: e.NonMembershipLeafData}, p.StateRoot, keys[i], []byte("forged"), &spec); ok {
			t.Fatalf("key %q: the proof also proves a forged value", keys[i])
		}
	}
	v := f.View()
	topic, err := proof.DecodeTopic(p.Entries[0].Value)
	if err != nil || topic.Partitions != int32(len(v.Topic("orders").Partitions)) || topic.ID != v.Topic("orders").ID || topic.Configs["message.timestamp.type"] != "LogAppendTime" {
		t.Fatalf("proven topic %+v, %v; the view has %d partitions", topic, err, len(v.Topic("orders").Partitions))
	}
	part, err := proof.DecodePartition(p.Entries[1].Value)
	if vp := v.Partition("orders", 1); err != nil || part.HighWatermark != vp.HighWatermark() || part.LogStartOffset != vp.LogStartOffset() {
		t.Fatalf("proven partition %+v, %v; the view has %d-%d", part, err, vp.LogStartOffset(), vp.HighWatermark())
	}
	off, err := proof.DecodeCommittedOffset(p.Entries[2].Value)
	if err != nil || off.Offset != 3 || off.Metadata != "m" {
		t.Fatalf("proven committed offset %+v, %v; want 3 with metadata m", off, err)
	}
	if len(p.Entries[3].Value) != 32 {
		t.Fatalf("proven producer key of %d bytes", len(p.Entries[3].Value))
	}
	if p.Entries[4].Value != nil || p.Entries[5].Value != nil {
		t.Fatalf("absent keys proven with values %q %q", p.Entries[4].Value, p.Entries[5].Value)
	}
	if _, err := f.ProveState([]byte("k/anything")); !errors.Is(err, core.ErrNoProof) {
		t.Fatalf("a key outside the authenticated state: %v, want ErrNoProof", err)
	}
}

// FuzzDecodeStoreValues: the decoders of the store's values, which a
// restoring broker reads from a peer's snapshot (after checking it against
// the state root) and every broker reads at start, never panic, and what
// they allocate is bounded by the bytes they were given (reader.count): an
// input claiming a huge count does not get it. Covered: every value a
// module's load step reads at Open (m/state, m/producer-id, m/signers,
// m/log-defaults, m/broker-configs,
// t/, p/, g/, o/, s/, x/, a/, u/version, u/plan and u/vote/) and the keys
// it parses (o/, a/, c/), key index entries (k/), table versions (l/),
// and pkg/proof's readers of topics, partitions and committed offsets.
func FuzzDecodeStoreValues(f *testing.F) {
	dir := f.TempDir()
	g := open(f, dir)
	applyAll(f, g, scenario(f))
	g.Store.Scan(nil, func(k, v []byte) error {
		if len(v) > 0 && len(v) < 4096 {
			f.Add(bytes.Clone(v))
		}
		if len(k) < 4096 && (bytes.HasPrefix(k, []byte("o/")) || bytes.HasPrefix(k, []byte("a/")) || bytes.HasPrefix(k, []byte("c/"))) {
			f.Add(bytes.Clone(k[2:])) // as decodeStoreValue's keys take it
		}
		return nil
	})
	g.Close()
	f.Add(cluster.EncodePlan(cluster.UpgradePlan{Height: 40, Version: 2, Name: "v2"}))
	f.Add(topics.EncodeLogDefaults(map[string]string{"log.retention.ms": "1000", "log.cleanup.policy": "compact,delete"}))
	f.Add(cluster.EncodeBrokerConfigs(map[string]map[string]string{"": {cluster.MaxConnectionsConfig: "9", cluster.MaxConnectionCreationRateConfig: "0"}, "1": {cluster.MaxConnectionsPerIPConfig: "0", cluster.MaxConnectionsPerIPOverridesConfig: "::1:4"}}))
	f.Add(keys.EntryValue(keys.KeyEntry{Pid: 7, Snapshot: true}))
	f.Add(topics.EncodeAppendClock(1_700_000_000_123))
	f.Add(tenants.EncodeTenant(&tenants.Tenant{Name: "acme", CreatedHeight: 9, Quotas: map[string]int64{tenants.QuotaTopics: 10, tenants.QuotaGroups: 0}}))
	f.Add(append([]byte("t\x00\x00\x00\x00\x01"), make([]byte, 16)...)) // an a/ key's rest
	for _, v := range hugeCounts() {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := allocated(func() { decodeStoreValue(b) })
		if limit := 1<<20 + 256*uint64(len(b)); n > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes (limit %d)", len(b), n, limit)
		}
	})
}

// decodeStoreValue runs every decoder of a stored value on b, and every
// parser of a stored key on b after the key's prefix.
func decodeStoreValue(b []byte) {
	core.DecodeState(b)
	producers.DecodeProducerID(b)
	trust.DecodeSigners(b)
	topics.DecodeLogDefaults(b)
	topics.DecodeAppendClock(b)
	cluster.DecodeBrokerConfigs(b)
	security.DecodeUserCredentials(b)
	tenants.DecodeTenant("acme", b)
	security.DecodeACLs(append([]byte("e/\x02\x03"), b[:min(3, len(b))]...), b)
	security.DecodeQuotas(append([]byte("q/"), b[:min(4, len(b))]...), b)
	topics.DecodeTopic("t", b)
	topics.DecodePartition(topics.NewPartition("t", 0), b)
	groups.DecodeGroup("g", b)
	groups.DecodeOffset(b)
	groups.ParseOffsetKey(append([]byte("o/"), b...))
	topics.DecodeProducer(b)
	producers.DecodeTxn("t", b)
	topics.DecodeAborted(append([]byte("a/"), b...), b[len(b)-min(8, len(b)):])
	cluster.DecodeAppVersion(b)
	cluster.DecodePlan(b)
	trust.ParseCertKey(append([]byte("c/"), b...))
	keys.ParseEntryValue(b)
	proof.DecodeTopic(b)
	proof.DecodePartition(b)
	proof.DecodeCommittedOffset(b)
	proof.DecodeTableVersion(0, b)
	schemas.DecodeRegistryMeta(b)
	schemas.DecodeStoredSchema(1, b)
	schemas.DecodeSubject("s", b)
	proof.DecodeSchema(b)
}

// hugeCounts are values whose counts or lengths claim far more than
// follows: each format byte, then a count of 2^20 (maxElems) or 2^40, or a
// partition count of 2^31-1, each followed by a few bytes.
func hugeCounts() [][]byte {
	var out [][]byte
	for _, n := range []uint64{core.MaxElems, 1 << 40} {
		w := &core.Writer{}
		w.U8(core.PersistVersion)
		for range 12 {
			w.Uvarint(n)
		}
		out = append(out, w.B)
	}
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Raw(make([]byte, 16))
	w.I16(1)
	w.I32(1<<31 - 1)
	w.Uvarint(1 << 40)
	return append(out, w.B)
}

// allocated is how many bytes fn allocates on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestTrieRefresh: past trieRefreshBlocks the applier's trie starts afresh
// from the committed root; blocks after it still update the same trie
// (its root is the one a trie built from the store's contents has).
func TestTrieRefresh(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	blocks := []block{{time: t0, txs: [][]byte{tx(1, topics.CreateTopic{Name: "t", Partitions: 2, ReplicationFactor: -1})}}}
	for h := 1; h <= core.TrieRefreshBlocks+5; h++ {
		blocks = append(blocks, block{time: t0 + int64(h), txs: [][]byte{tx(1+h, groups.OffsetCommit{Group: "g", Generation: -1, Topic: "t", Partition: int32(h % 2), Offset: int64(h), LeaderEpoch: -1})}})
	}
	applyAll(t, f, blocks)
	root, err := core.RebuildStateRoot(f.Store)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(root, f.StateRoot) {
		t.Fatalf("after a refresh the trie's root %X is not the store's %X", f.StateRoot, root)
	}
	if p, err := f.ProveState(proof.OffsetKey("g", "t", 1)); err != nil || p.Entries[0].Value == nil {
		t.Fatalf("proving after a refresh: %v", err)
	}
}

// trieLeaf is what the trie holds for a proven entry's value.
func trieLeaf(v []byte) []byte {
	if v == nil {
		return nil
	}
	return proof.TrieValue(v)
}

// TestEveryKeyProves: after every block of the scenario, every key of the
// authenticated state proves with the value the store holds (present
// empty values included).
func TestEveryKeyProves(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	blocks := scenario(t)
	for i := range blocks {
		applyRange(t, f, blocks, i+1, i+1)
		var bad []string
		_ = f.Store.Scan(nil, func(k, v []byte) error {
			if !core.Authenticated(k) {
				return nil
			}
			p, err := f.ProveState(bytes.Clone(k))
			if err != nil {
				bad = append(bad, string(k)+":"+err.Error())
				return nil
			}
			if !bytes.Equal(p.Entries[0].Value, v) {
				bad = append(bad, string(k)+": value differs")
			}
			return nil
		})
		if len(bad) > 0 {
			t.Fatalf("block %d: %q", i, bad)
		}
	}
}
