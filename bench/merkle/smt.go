package merkle

import (
	"bytes"
	"crypto/sha256"
	"errors"

	"github.com/cockroachdb/pebble/v2"
	"github.com/pokt-network/smt"
	"github.com/pokt-network/smt/kvstore"
)

// smtStore is pokt-network/smt's sparse Merkle trie over Pebble. The trie's
// leaves hold the SHA-256 of each value, so the values themselves are
// written beside it under "v/"+key (Stele's plain rows, which it needs to
// read its state back); the trie's nodes go under "n/"+digest. One Apply is
// one Pebble batch: the rows, the new nodes, the deletions of the nodes the
// block orphaned (the trie keeps no older versions), and the root.
type smtStore struct {
	db    *pebble.DB
	nodes *smtNodes
	trie  *smt.SMT
	sync  bool
}

var smtRootKey = []byte("m/root")

func openSMT(o Options) (*smtStore, error) {
	db, err := openPebble(o.Dir)
	if err != nil {
		return nil, err
	}
	nodes := &smtNodes{db: db}
	s := &smtStore{db: db, nodes: nodes, sync: o.Sync}
	root, closer, err := db.Get(smtRootKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		s.trie = smt.NewSparseMerkleTrie(nodes, sha256.New())
	case err != nil:
		_ = db.Close()
		return nil, err
	default:
		s.trie = smt.ImportSparseMerkleTrie(nodes, sha256.New(), bytes.Clone(root))
		_ = closer.Close()
	}
	return s, nil
}

func (s *smtStore) Apply(kvs []KV) ([]byte, error) {
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	s.nodes.batch = b
	defer func() { s.nodes.batch = nil }()
	var row []byte
	for _, kv := range kvs {
		row = append(append(row[:0], "v/"...), kv.K...)
		_ = b.Set(row, kv.V, nil)
		if err := s.trie.Update(kv.K, kv.V); err != nil {
			return nil, err
		}
	}
	if err := s.trie.Commit(); err != nil {
		return nil, err
	}
	root := s.trie.Root()
	_ = b.Set(smtRootKey, root, nil)
	if err := b.Commit(writeOpts(s.sync)); err != nil {
		return nil, err
	}
	return root, nil
}

func (s *smtStore) Prove(key []byte) (Proof, error) {
	p, err := s.trie.Prove(key)
	if err != nil {
		return nil, err
	}
	c, err := smt.CompactProof(p, s.trie.Spec())
	if err != nil {
		return nil, err
	}
	return smtProof{c: c, spec: s.trie.Spec()}, nil
}

func (s *smtStore) Get(key []byte) ([]byte, error) {
	return pebbleGet(s.db, append([]byte("v/"), key...))
}
func (s *smtStore) DB() *pebble.DB      { return s.db }
func (s *smtStore) AfterPreload() error { return nil }
func (s *smtStore) Close() error        { return s.db.Close() }

// smtProof is the library's compact proof (placeholder siblings as a bit
// mask), gob-encoded by its Marshal.
type smtProof struct {
	c    *smt.SparseCompactMerkleProof
	spec *smt.TrieSpec
}

func (p smtProof) Size() int {
	enc, err := p.c.Marshal()
	if err != nil {
		return -1
	}
	return len(enc)
}

func (p smtProof) Verify(root, key, value []byte) error {
	ok, err := smt.VerifyCompactProof(p.c, root, key, value, p.spec)
	if err != nil {
		return err
	}
	if !ok {
		return errBadProof
	}
	return nil
}

// smtNodes is the trie's MapStore: reads from the database (the trie reads
// only nodes committed before), writes into the block's batch.
type smtNodes struct {
	db    *pebble.DB
	batch *pebble.Batch
	key   []byte
}

var _ kvstore.MapStore = (*smtNodes)(nil)

var errNoBatch = errors.New("merkle: smt node written outside Apply")

func (n *smtNodes) nodeKey(digest []byte) []byte {
	n.key = append(append(n.key[:0], "n/"...), digest...)
	return n.key
}

func (n *smtNodes) Get(digest []byte) ([]byte, error) {
	v, closer, err := n.db.Get(n.nodeKey(digest))
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	return out, closer.Close()
}

func (n *smtNodes) Set(digest, node []byte) error {
	if n.batch == nil {
		return errNoBatch
	}
	return n.batch.Set(n.nodeKey(digest), node, nil)
}

func (n *smtNodes) Delete(digest []byte) error {
	if n.batch == nil {
		return errNoBatch
	}
	return n.batch.Delete(n.nodeKey(digest), nil)
}

func (n *smtNodes) Len() (int, error) { return 0, errors.New("merkle: smt node count not kept") }
func (n *smtNodes) ClearAll() error   { return errors.New("merkle: smt nodes cannot be cleared") }
