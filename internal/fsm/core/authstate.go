package core

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/pokt-network/smt"

	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/pkg/proof"
)

// The authenticated state. Every replicated key of the metadata store (see
// persist.go) is also a leaf of a sparse Merkle trie (pokt-network/smt: the
// leaf's path is SHA-256 of the key, its value SHA-256 of 0x01 and the
// value, proof.TrieValue), whose
// root the app hash commits to (proof.AppHash). So a broker restoring a
// snapshot checks the state it received against the app hash the
// validators signed, and any key's value, or its absence, can be proven.
//
// Outside the trie, by design:
//
//	m/state, m/signers   the block metadata (height, block time, app hash,
//	                     the housekeeping clock) and the liveness record of
//	                     signers, which change with every block: in the trie
//	                     they would change the app hash of empty blocks, and
//	                     the chain could never idle
//	c/...                the certificates applied within their window, which
//	                     guard the data plane against replays: the state is
//	                     the same whether a batch came inline or certified
//	k/...                the key stream index, derived from the logs
//	j/...                the subject summaries and counts, derived from the
//	                     logs (subjects/)
//	v/..., b/...         the batch proof entries, which hold the roots
//	                     themselves (derived from what the app hash commits to)
//	z/...                the trie's own nodes
//
// The trie's nodes live in the same store under z/<digest> and are written
// in the block's batch, so the state and its trie are always durable
// together; the trie keeps only the latest version (a block's orphaned
// nodes are deleted in its batch).
const TrieNodePrefix = "z/"

// TrieRefreshBlocks is how often (in heights) the applier's trie drops the
// nodes it holds in memory and starts again from the committed root: the
// library keeps every node it resolved, which would otherwise grow with
// the whole state.
const TrieRefreshBlocks = 1000

// unauthenticated lists the key prefixes left out of the trie.
var unauthenticated = [][]byte{[]byte("m/state"), []byte("m/signers"), []byte("c/"), []byte("k/"), []byte("j/"), []byte("v/"), []byte("b/"), []byte(TrieNodePrefix)}

// Authenticated reports whether key is a leaf of the state trie.
func Authenticated(key []byte) bool {
	for _, p := range unauthenticated {
		if bytes.HasPrefix(key, p) {
			return false
		}
	}
	return true
}

// ErrStateRoot is returned when a state's contents do not hash to the root
// the app hash commits to (a snapshot altered by the peer that served it).
var ErrStateRoot = errors.New("stele/fsm: state does not match its root")

// trieNodes is the trie's node store: it reads nodes committed before from
// the store and writes a block's nodes into that block's batch. The writes
// of one commit are gathered and added in key order: node keys are
// digests, and the store inserts a sorted run into its memtable at a
// fraction of the cost of scattered keys.
type trieNodes struct {
	store   *storage.Store
	writing bool
	writes  map[string]nodeWrite // while the trie commits: the last write of each node
	key     []byte
}

// nodeWrite is a node's new encoding, or its deletion.
type nodeWrite struct {
	node    []byte
	deleted bool
}

func (n *trieNodes) nodeKey(digest []byte) []byte {
	n.key = append(append(n.key[:0], TrieNodePrefix...), digest...)
	return n.key
}

func (n *trieNodes) Get(digest []byte) ([]byte, error) {
	v, ok, err := n.store.Get(n.nodeKey(digest))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("stele/fsm: state trie node %x missing from the store", digest)
	}
	return v, nil
}

func (n *trieNodes) Set(digest, node []byte) error {
	if !n.writing {
		return errors.New("stele/fsm: state trie node written outside a commit")
	}
	n.writes[string(n.nodeKey(digest))] = nodeWrite{node: slices.Clone(node)}
	return nil
}

func (n *trieNodes) Delete(digest []byte) error {
	if !n.writing {
		return errors.New("stele/fsm: state trie node deleted outside a commit")
	}
	n.writes[string(n.nodeKey(digest))] = nodeWrite{deleted: true}
	return nil
}

func (n *trieNodes) Len() (int, error) {
	return 0, errors.New("stele/fsm: state trie nodes are not counted")
}
func (n *trieNodes) ClearAll() error {
	return errors.New("stele/fsm: state trie nodes cannot be cleared")
}

// stateTrie is the trie over a store, at a committed root (nil: empty).
type stateTrie struct {
	nodes *trieNodes
	trie  *smt.SMT
}

func openStateTrie(store *storage.Store, root []byte) *stateTrie {
	n := &trieNodes{store: store}
	t := &stateTrie{nodes: n}
	if len(root) == 0 || bytes.Equal(root, EmptyStateRoot()) {
		t.trie = smt.NewSparseMerkleTrie(n, sha256.New())
	} else {
		t.trie = smt.ImportSparseMerkleTrie(n, sha256.New(), bytes.Clone(root))
	}
	return t
}

// EmptyStateRoot is the root of a trie without leaves.
func EmptyStateRoot() []byte {
	return smt.NewSparseMerkleTrie(&trieNodes{}, sha256.New()).Root()
}

// update sets key to value in the working trie; a library panic (on a
// damaged node read back from the store) is returned as an error.
func (t *stateTrie) update(key, value []byte) (err error) {
	defer recoverTrie(&err)
	return t.trie.Update(key, value)
}

func (t *stateTrie) delete(key []byte) (err error) {
	defer recoverTrie(&err)
	if err := t.trie.Delete(key); err != nil && !errors.Is(err, smt.ErrKeyNotFound) {
		return err
	}
	return nil
}

// root is the working trie's root.
func (t *stateTrie) root() (r []byte, err error) {
	defer recoverTrie(&err)
	return t.trie.Root(), nil
}

// commit writes the working trie's new nodes into b and deletes the nodes
// it orphaned.
func (t *stateTrie) commit(b *storage.Batch) (err error) {
	defer recoverTrie(&err)
	n := t.nodes
	n.writing, n.writes = true, map[string]nodeWrite{}
	defer func() { n.writing, n.writes = false, nil }()
	if err := t.trie.Commit(); err != nil {
		return err
	}
	for _, k := range SortedKeys(n.writes) {
		if w := n.writes[k]; w.deleted {
			b.Delete([]byte(k))
		} else {
			b.Set([]byte(k), w.node)
		}
	}
	return nil
}

func recoverTrie(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("stele/fsm: state trie: %v", r)
	}
}

// StateBatch is a block's batch of store writes, mirrored into the state
// trie for the authenticated keys, in the same order.
type StateBatch struct {
	B     *storage.Batch
	store *storage.Store
	trie  *stateTrie
	// staged holds the authenticated keys set in this batch, for
	// DeletePrefix (the store's committed keys are scanned).
	staged map[string]struct{}
	err    error
	trace  func(op string, k, v []byte) // Options.TraceState
}

func (s *StateBatch) fail(err error) {
	if err != nil && s.err == nil {
		s.err = err
	}
}

func (s *StateBatch) Set(k, v []byte) {
	s.B.Set(k, v)
	if !Authenticated(k) {
		return
	}
	if s.trace != nil {
		s.trace("set", k, v)
	}
	s.fail(s.trie.update(k, proof.TrieValue(v)))
	s.staged[string(k)] = struct{}{}
}

func (s *StateBatch) Delete(k []byte) {
	s.B.Delete(k)
	if !Authenticated(k) {
		return
	}
	if s.trace != nil {
		s.trace("delete", k, nil)
	}
	s.fail(s.trie.delete(k))
	delete(s.staged, string(k))
}

// DeletePrefix deletes every key with the prefix, committed or staged.
func (s *StateBatch) DeletePrefix(prefix []byte) {
	s.B.DeletePrefix(prefix)
	if !Authenticated(prefix) {
		return
	}
	if s.trace != nil {
		s.trace("delete-prefix", prefix, nil)
	}
	s.fail(s.store.Scan(prefix, func(k, _ []byte) error { return s.trie.delete(k) }))
	for _, k := range SortedKeys(s.staged) {
		if bytes.HasPrefix([]byte(k), prefix) {
			s.fail(s.trie.delete([]byte(k)))
			delete(s.staged, k)
		}
	}
}

// RebuildStateRoot builds a trie afresh from every authenticated key of
// store, writes its nodes there (replacing any it held) and returns its
// root: what a restored snapshot's contents hash to, whatever trie nodes
// it came with.
func RebuildStateRoot(store *storage.Store) ([]byte, error) {
	b := store.NewBatch()
	b.DeletePrefix([]byte(TrieNodePrefix))
	if err := b.Commit(false); err != nil {
		return nil, err
	}
	t := openStateTrie(store, nil)
	err := store.Scan(nil, func(k, v []byte) error {
		if !Authenticated(k) {
			return nil
		}
		return t.update(k, proof.TrieValue(v))
	})
	if err != nil {
		return nil, err
	}
	b = store.NewBatch()
	if err := t.commit(b); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.Commit(true); err != nil {
		return nil, err
	}
	return t.root()
}
