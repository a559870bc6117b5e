package merkle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Store is one candidate: a key-value store over Pebble that commits one
// block at a time.
type Store interface {
	// Apply writes one block's updates, computes the new state root and
	// commits both in Pebble, synced if the store was opened with sync. It
	// returns the root (nil for the plain Pebble baseline).
	Apply(kvs []KV) ([]byte, error)
	// Prove returns a proof for key against the last root Apply returned:
	// of its value if it is present, of its absence if not.
	Prove(key []byte) (Proof, error)
	// Get returns the committed value of key, nil if it has none.
	Get(key []byte) ([]byte, error)
	// AfterPreload is called once the initial state is in: iavl deletes
	// the preload's versions, so that pruning in the benchmark deletes only
	// versions of its own blocks.
	AfterPreload() error
	// DB is the Pebble database underneath, for its metrics.
	DB() *pebble.DB
	Close() error
}

// Proof is a membership or absence proof as the library encodes it.
type Proof interface {
	// Size is the length of the library's own encoding of the proof.
	Size() int
	// Verify checks the proof against root: that key holds value, or, with
	// a nil value, that key is absent.
	Verify(root, key, value []byte) error
}

// errNoProofs is returned by Prove of a store that keeps no tree.
var errNoProofs = errors.New("merkle: this store has no proofs")

// errBadProof is returned by Verify when a proof does not prove what it was
// asked to.
var errBadProof = errors.New("merkle: proof does not verify")

// Options are what every candidate is opened with.
type Options struct {
	Dir  string
	Sync bool // fsync every block's commit, as Stele's FSM.persist does
	// IAVLCacheNodes is iavl's node cache size, in nodes (the Cosmos SDK's
	// default iavl-cache-size is 781250).
	IAVLCacheNodes int
	// KeepVersions is how many recent versions iavl keeps (older ones are
	// pruned every PruneEvery blocks); the SMT keeps only the latest.
	KeepVersions, PruneEvery int64
}

// Kinds are the candidates' names, as the benchmarks spell them.
var Kinds = []string{"pebble", "iavl", "iavl-nofast", "smt"}

// Open opens the candidate named kind.
func Open(kind string, o Options) (Store, error) {
	switch kind {
	case "pebble":
		return openPlain(o)
	case "iavl":
		return openIAVL(o, false)
	case "iavl-nofast":
		return openIAVL(o, true)
	case "smt":
		return openSMT(o)
	}
	return nil, fmt.Errorf("merkle: no store %q", kind)
}

// openPebble opens a Pebble database with the options of Stele's metadata
// store (internal/storage.OpenStore at the time of writing).
func openPebble(dir string) (*pebble.DB, error) {
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref()
	return pebble.Open(dir, &pebble.Options{
		Cache:                       cache,
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
		MaxOpenFiles:                256,
		L0CompactionThreshold:       8,
		L0StopWritesThreshold:       32,
		LBaseMaxBytes:               256 << 20,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      quietLogger{},
	})
}

func writeOpts(sync bool) *pebble.WriteOptions {
	if sync {
		return pebble.Sync
	}
	return pebble.NoSync
}

// Written is what Pebble has written so far: bytes to its WAL (the batches'
// own bytes), and bytes of tables flushed and compacted (the LSM's write
// amplification).
func Written(db *pebble.DB) (wal, lsm uint64) {
	m := db.Metrics()
	for _, l := range m.Levels {
		lsm += l.TableBytesFlushed + l.TableBytesCompacted + l.BlobBytesFlushed + l.BlobBytesCompacted
	}
	return m.WAL.BytesIn, lsm
}

// Settle flushes the memtable and waits (at most a minute) for Pebble's
// compactions to catch up, so that a benchmark does not start inside the
// preload's compaction debt.
func Settle(db *pebble.DB) error {
	if err := db.Flush(); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m := db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Compact.EstimatedDebt == 0 {
			return nil
		}
	}
	return nil
}

// DirSize is the bytes of the files under dir.
func DirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	return n, err
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: fatal: "+format+"\n", args...)
	os.Exit(1)
}

// plain is the baseline: the block's keys and values in one Pebble batch,
// as Stele writes its state today.
type plain struct {
	db   *pebble.DB
	sync bool
}

func openPlain(o Options) (*plain, error) {
	db, err := openPebble(o.Dir)
	if err != nil {
		return nil, err
	}
	return &plain{db: db, sync: o.Sync}, nil
}

func (p *plain) Apply(kvs []KV) ([]byte, error) {
	b := p.db.NewBatch()
	for _, kv := range kvs {
		_ = b.Set(kv.K, kv.V, nil)
	}
	err := b.Commit(writeOpts(p.sync))
	_ = b.Close()
	return nil, err
}

func (p *plain) Prove([]byte) (Proof, error)    { return nil, errNoProofs }
func (p *plain) Get(key []byte) ([]byte, error) { return pebbleGet(p.db, key) }

// pebbleGet returns a copy of the value under key, nil if there is none.
func pebbleGet(db *pebble.DB, key []byte) ([]byte, error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	return out, closer.Close()
}
func (p *plain) DB() *pebble.DB      { return p.db }
func (p *plain) AfterPreload() error { return nil }
func (p *plain) Close() error        { return p.db.Close() }
