package merkle

import (
	"bytes"
	"errors"
	"fmt"

	corestore "cosmossdk.io/core/store"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cosmos/iavl"
	idb "github.com/cosmos/iavl/db"
	ics23 "github.com/cosmos/ics23/go"
)

// iavlStore is cosmos/iavl v1 over Pebble. Each Apply is one version; the
// node batch is committed by SaveVersion (synced with SyncOption, as the
// Cosmos SDK's commit does), and versions older than KeepVersions are
// deleted every PruneEvery blocks, synchronously, on the apply path.
type iavlStore struct {
	db   *pebble.DB
	tree *iavl.MutableTree
	o    Options
	imm  *iavl.ImmutableTree // the last saved version, for proofs
	ver  int64               // the last saved version
}

func openIAVL(o Options, noFast bool) (*iavlStore, error) {
	db, err := openPebble(o.Dir)
	if err != nil {
		return nil, err
	}
	tree := iavl.NewMutableTree(pebbleIAVL{db}, o.IAVLCacheNodes, noFast, iavl.NewNopLogger(),
		iavl.SyncOption(o.Sync), iavl.AsyncPruningOption(false))
	v, err := tree.Load()
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &iavlStore{db: db, tree: tree, o: o, ver: v}, nil
}

func (s *iavlStore) Apply(kvs []KV) ([]byte, error) {
	s.imm = nil
	for _, kv := range kvs {
		if _, err := s.tree.Set(kv.K, kv.V); err != nil {
			return nil, err
		}
	}
	root, v, err := s.tree.SaveVersion()
	if err != nil {
		return nil, err
	}
	s.ver = v
	if s.o.KeepVersions > 0 && v > s.o.KeepVersions && v%s.o.PruneEvery == 0 {
		if err := s.tree.DeleteVersionsTo(v - s.o.KeepVersions); err != nil {
			return nil, fmt.Errorf("merkle: iavl pruning to %d: %w", v-s.o.KeepVersions, err)
		}
	}
	return root, nil
}

func (s *iavlStore) AfterPreload() error {
	if s.ver <= 1 {
		return nil
	}
	return s.tree.DeleteVersionsTo(s.ver - 1)
}

func (s *iavlStore) Prove(key []byte) (Proof, error) {
	if s.imm == nil {
		imm, err := s.tree.GetImmutable(s.ver)
		if err != nil {
			return nil, err
		}
		s.imm = imm
	}
	p, err := s.imm.GetProof(key)
	if err != nil {
		return nil, err
	}
	return iavlProof{p}, nil
}

func (s *iavlStore) Get(key []byte) ([]byte, error) { return s.tree.Get(key) }
func (s *iavlStore) DB() *pebble.DB                 { return s.db }

func (s *iavlStore) Close() error {
	err := s.tree.Close()
	return errors.Join(err, s.db.Close())
}

// iavlProof is an ICS-23 commitment proof, as IBC light clients check them.
type iavlProof struct{ p *ics23.CommitmentProof }

func (p iavlProof) Size() int { return p.p.Size() }

func (p iavlProof) Verify(root, key, value []byte) error {
	var ok bool
	if value == nil {
		ok = ics23.VerifyNonMembership(ics23.IavlSpec, root, p.p, key)
	} else {
		ok = ics23.VerifyMembership(ics23.IavlSpec, root, p.p, key, value)
	}
	if !ok {
		return errBadProof
	}
	return nil
}

// pebbleIAVL is iavl's db.DB over a Pebble v2 database: the adapter Stele
// would need (iavl ships goleveldb and an in-memory DB only).
type pebbleIAVL struct{ db *pebble.DB }

var _ idb.DB = pebbleIAVL{}

func (d pebbleIAVL) Get(key []byte) ([]byte, error) { return pebbleGet(d.db, key) }

func (d pebbleIAVL) Has(key []byte) (bool, error) {
	v, err := d.Get(key)
	return v != nil, err
}

func (d pebbleIAVL) Iterator(start, end []byte) (corestore.Iterator, error) {
	return d.iter(start, end, false)
}

func (d pebbleIAVL) ReverseIterator(start, end []byte) (corestore.Iterator, error) {
	return d.iter(start, end, true)
}

func (d pebbleIAVL) iter(start, end []byte, reverse bool) (corestore.Iterator, error) {
	if (start != nil && len(start) == 0) || (end != nil && len(end) == 0) {
		return nil, errors.New("merkle: empty iterator bound")
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return nil, err
	}
	if reverse {
		it.Last()
	} else {
		it.First()
	}
	return &pebbleIter{it: it, start: start, end: end, reverse: reverse}, nil
}

// Close leaves the database open: the store closes it.
func (d pebbleIAVL) Close() error { return nil }

func (d pebbleIAVL) NewBatch() corestore.Batch { return &pebbleBatch{db: d.db, b: d.db.NewBatch()} }

func (d pebbleIAVL) NewBatchWithSize(n int) corestore.Batch {
	return &pebbleBatch{db: d.db, b: d.db.NewBatchWithSize(n)}
}

type pebbleIter struct {
	it         *pebble.Iterator
	start, end []byte
	reverse    bool
}

func (i *pebbleIter) Domain() ([]byte, []byte) { return i.start, i.end }
func (i *pebbleIter) Valid() bool              { return i.it.Valid() }
func (i *pebbleIter) Key() []byte              { return bytes.Clone(i.it.Key()) }
func (i *pebbleIter) Error() error             { return i.it.Error() }
func (i *pebbleIter) Close() error             { return i.it.Close() }

func (i *pebbleIter) Value() []byte {
	v, err := i.it.ValueAndErr()
	if err != nil {
		return nil
	}
	return bytes.Clone(v)
}

func (i *pebbleIter) Next() {
	if i.reverse {
		i.it.Prev()
	} else {
		i.it.Next()
	}
}

type pebbleBatch struct {
	db *pebble.DB
	b  *pebble.Batch
}

var errBatchDone = errors.New("merkle: batch written or closed")

func (b *pebbleBatch) Set(k, v []byte) error {
	if b.b == nil {
		return errBatchDone
	}
	return b.b.Set(k, v, nil)
}

func (b *pebbleBatch) Delete(k []byte) error {
	if b.b == nil {
		return errBatchDone
	}
	return b.b.Delete(k, nil)
}

func (b *pebbleBatch) Write() error     { return b.commit(pebble.NoSync) }
func (b *pebbleBatch) WriteSync() error { return b.commit(pebble.Sync) }

func (b *pebbleBatch) commit(o *pebble.WriteOptions) error {
	if b.b == nil {
		return errBatchDone
	}
	err := b.b.Commit(o)
	return errors.Join(err, b.Close())
}

func (b *pebbleBatch) Close() error {
	if b.b == nil {
		return nil
	}
	err := b.b.Close()
	b.b = nil
	return err
}

func (b *pebbleBatch) GetByteSize() (int, error) {
	if b.b == nil {
		return 0, errBatchDone
	}
	return len(b.b.Repr()), nil
}
