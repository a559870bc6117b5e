package merkle

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cosmos/iavl"
	"github.com/pokt-network/smt"
)

var treeKinds = []string{"iavl", "iavl-nofast", "smt"}

func testOptions(t *testing.T) Options {
	return Options{Dir: t.TempDir(), Sync: false, IAVLCacheNodes: 10000, KeepVersions: 5, PruneEvery: 2}
}

func open(t *testing.T, kind string, o Options) Store {
	t.Helper()
	s, err := Open(kind, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// applyAll applies blocks and remembers every key's latest value.
func applyAll(t *testing.T, s Store, blocks [][]KV, state map[string][]byte) []byte {
	t.Helper()
	var root []byte
	for _, blk := range blocks {
		var err error
		if root, err = s.Apply(blk); err != nil {
			t.Fatal(err)
		}
		for _, kv := range blk {
			state[string(kv.K)] = kv.V
		}
	}
	return root
}

// TestProofs: a membership proof verifies with the key's value and with no
// other; an absence proof verifies for a missing key and not for a present
// one; every store reads back what was written, also after reopening (and
// iavl after pruning old versions).
func TestProofs(t *testing.T) {
	for _, kind := range treeKinds {
		t.Run(kind, func(t *testing.T) {
			o := testOptions(t)
			s := open(t, kind, o)
			w := NewWorkload(1)
			state := map[string][]byte{}
			applyAll(t, s, w.Preload(3000, 1000), state)
			var blocks [][]KV
			for range 30 {
				blocks = append(blocks, w.Block(50))
			}
			root := applyAll(t, s, blocks, state)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, kind, o)
			defer s.Close()
			for j := range 200 {
				_, k := w.ExistingKey()
				check(t, s, root, k, state[string(k)])
				check(t, s, root, absentKey(uint64(j)), nil)
			}
		})
	}
}

func check(t *testing.T, s Store, root, key, want []byte) {
	t.Helper()
	got, err := s.Get(key)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %x, %v; want %x", key, got, err, want)
	}
	p, err := s.Prove(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(root, key, want); err != nil {
		t.Fatalf("proof of %q for %x: %v", key, want, err)
	}
	if want == nil {
		if err := p.Verify(root, key, []byte("a value")); err == nil {
			t.Fatalf("absence proof of %q also proves a value", key)
		}
		return
	}
	wrong := bytes.Clone(want)
	wrong[len(wrong)-1] ^= 1
	if err := p.Verify(root, key, wrong); err == nil {
		t.Fatalf("proof of %q also proves another value", key)
	}
	if err := p.Verify(root, key, nil); err == nil {
		t.Fatalf("membership proof of %q also proves its absence", key)
	}
	if err := p.Verify(bytes.Repeat([]byte{7}, len(root)), key, want); err == nil {
		t.Fatalf("proof of %q verifies against another root", key)
	}
}

// TestRootDependsOnOrder records which trees are canonical: the same final
// key-value set reached by a different history (one block in key order, or
// ten blocks in another order) gives the same root for the sparse Merkle
// trie, and a different one for iavl, whose AVL shape depends on the order
// of insertion. A canonical root lets a restoring broker rebuild the tree
// from plain rows and check it; iavl needs its node-by-node export.
func TestRootDependsOnOrder(t *testing.T) {
	w := NewWorkload(2)
	one := w.Preload(2000, 2000)[0]
	shuffled := append([]KV(nil), one...)
	rand.New(rand.NewPCG(3, 3)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	var ten [][]KV
	for i := 0; i < len(shuffled); i += 200 {
		ten = append(ten, shuffled[i:i+200])
	}
	for _, kind := range treeKinds {
		a := open(t, kind, testOptions(t))
		b := open(t, kind, testOptions(t))
		ra := applyAll(t, a, [][]KV{one}, map[string][]byte{})
		rb := applyAll(t, b, ten, map[string][]byte{})
		_ = a.Close()
		_ = b.Close()
		same := bytes.Equal(ra, rb)
		t.Logf("%s: same root for the same state reached in another order: %v", kind, same)
		if want := kind == "smt"; same != want {
			t.Errorf("%s: same root = %v, want %v", kind, same, want)
		}
	}
}

// TestIAVLExportImport: iavl's snapshot (the node-by-node export the Cosmos
// SDK's state sync streams) restores the same root into an empty tree.
func TestIAVLExportImport(t *testing.T) {
	o := testOptions(t)
	s := open(t, "iavl", o).(*iavlStore)
	defer s.Close()
	w := NewWorkload(4)
	applyAll(t, s, w.Preload(2000, 500), map[string][]byte{})
	root := applyAll(t, s, [][]KV{w.Block(100), w.Block(100)}, map[string][]byte{})
	imm, err := s.tree.GetImmutable(s.ver)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := imm.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	dst := open(t, "iavl", testOptions(t)).(*iavlStore)
	defer dst.Close()
	imp, err := dst.tree.Import(s.ver)
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close()
	nodes := 0
	for {
		n, err := exp.Next()
		if errors.Is(err, iavl.ErrorExportDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := imp.Add(n); err != nil {
			t.Fatal(err)
		}
		nodes++
	}
	if err := imp.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.tree.LoadVersion(s.ver); err != nil {
		t.Fatal(err)
	}
	if got := dst.tree.Hash(); !bytes.Equal(got, root) {
		t.Fatalf("imported root %x, want %x", got, root)
	}
	t.Logf("iavl: %d nodes exported and imported, root %x", nodes, root[:8])
}

// TestSMTRebuildFromRows: the sparse Merkle trie has no export of its own;
// a snapshot of the plain rows, inserted into an empty trie, gives the same
// root, so a restoring broker can check a snapshot made of rows.
func TestSMTRebuildFromRows(t *testing.T) {
	s := open(t, "smt", testOptions(t)).(*smtStore)
	defer s.Close()
	w := NewWorkload(5)
	applyAll(t, s, w.Preload(2000, 500), map[string][]byte{})
	root := applyAll(t, s, [][]KV{w.Block(100), w.Block(100)}, map[string][]byte{})
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("v/"), UpperBound: []byte("v0")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	trie := smt.NewSparseMerkleTrie(mapStore{}, sha256.New())
	rows := 0
	for it.First(); it.Valid(); it.Next() {
		if err := trie.Update(bytes.Clone(it.Key()[2:]), bytes.Clone(it.Value())); err != nil {
			t.Fatal(err)
		}
		rows++
	}
	if got := trie.Root(); !bytes.Equal(got, root) {
		t.Fatalf("rebuilt root %x, want %x", got, root)
	}
	t.Logf("smt: %d rows re-inserted, root %x", rows, root[:8])
}

// mapStore is an in-memory MapStore for TestSMTRebuildFromRows.
type mapStore map[string][]byte

func (m mapStore) Get(k []byte) ([]byte, error) {
	if v, ok := m[string(k)]; ok {
		return v, nil
	}
	return nil, errors.New("not found")
}
func (m mapStore) Set(k, v []byte) error { m[string(k)] = v; return nil }
func (m mapStore) Delete(k []byte) error { delete(m, string(k)); return nil }
func (m mapStore) Len() (int, error)     { return len(m), nil }
func (m mapStore) ClearAll() error       { clear(m); return nil }

// TestWorkload: blocks have distinct, sorted keys, and key shapes and value
// sizes are those of Stele's state.
func TestWorkload(t *testing.T) {
	w := NewWorkload(6)
	w.Preload(1000, 1000)
	blk := w.Block(500)
	for i := 1; i < len(blk); i++ {
		if bytes.Compare(blk[i-1].K, blk[i].K) >= 0 {
			t.Fatalf("block keys not sorted and distinct at %d", i)
		}
	}
	if w.Keys() <= 1000 || w.Keys() > 1000+200 {
		t.Fatalf("%d keys after a block of 500 with %d%% inserts", w.Keys(), insertPercent)
	}
	seen := map[string]bool{}
	for i := range uint64(100000) {
		k := string(stateKey(i))
		if seen[k] {
			t.Fatalf("key %d repeats %q", i, k)
		}
		seen[k] = true
	}
	for i, want := range map[uint64]string{0: "p/", 1: "o/", 5: "s/"} {
		if k := stateKey(i); string(k[:2]) != want {
			t.Errorf("key %d is %q", i, k)
		}
	}
}
