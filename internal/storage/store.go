package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is the Pebble key-value store that holds a broker's metadata, group
// and producer state and the per-key index (DESIGN.md §3). It is a thin
// wrapper: keys and values are opaque bytes, iteration is in ascending
// bytewise key order, and writes go through a Batch so that one block's
// changes land atomically.
//
// A Store is safe for concurrent use; Batches are not.
type Store struct {
	db *pebble.DB
}

// Batch collects writes to commit atomically with Commit.
type Batch struct {
	s   *Store
	b   *pebble.Batch
	err error // the first error of DeletePrefix, returned by Commit
}

// storeCacheBytes is the block cache of one Store. Stores hold small
// metadata; tests open many of them on a 2-core machine.
const storeCacheBytes = 8 << 20

// OpenStore opens the Pebble database in dir, creating it if needed.
// Pebble's informational logging is discarded and its errors go to
// slog.Default().
func OpenStore(dir string) (*Store, error) {
	return OpenStoreWith(dir, StoreOptions{})
}

// StoreOptions configures OpenStoreWith.
type StoreOptions struct {
	// FS is the file system the store lives on; nil is the operating
	// system's. Tests pass a fault-injecting one (pebble's errorfs).
	FS vfs.FS
}

// OpenStoreWith is OpenStore with options.
//
// Open replays Pebble's write-ahead log and flushes it, but runs no
// compaction: after a burst of writes the store's L0 backlog is compacted
// once Open has returned, in the background (openGate), rather than before
// it.
func OpenStoreWith(dir string, o StoreOptions) (*Store, error) {
	cache := pebble.NewCache(storeCacheBytes)
	defer cache.Unref() // the DB holds its own reference
	gate := newOpenGate()
	opts := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
		MaxOpenFiles:                256,
		L0CompactionThreshold:       8,
		L0StopWritesThreshold:       32,
		LBaseMaxBytes:               256 << 20,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      quietLogger{},
		FS:                          o.FS,
	}
	opts.Experimental.CompactionScheduler = gate
	db, err := pebble.Open(dir, opts)
	if err != nil {
		gate.Unregister() // Open may have registered it; stop its granter
		return nil, fmt.Errorf("stele/storage: opening store %s: %w", dir, err)
	}
	gate.release()
	return &Store{db: db}, nil
}

// Get returns a copy of the value stored under key, and whether there is one.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("stele/storage: store get: %w", err)
	}
	out := append([]byte{}, v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("stele/storage: store get: %w", err)
	}
	return out, true, nil
}

// Scan calls fn for every key starting with prefix, in ascending key order,
// and stops at the first error fn returns (which Scan returns). k and v are
// only valid during the call.
func (s *Store) Scan(prefix []byte, fn func(k, v []byte) error) error {
	return s.walk(prefix, prefixEnd(prefix), false, func(k, v []byte) ([]byte, error) { return nil, fn(k, v) })
}

// ScanReverse is Scan in descending key order.
func (s *Store) ScanReverse(prefix []byte, fn func(k, v []byte) error) error {
	return s.walk(prefix, prefixEnd(prefix), true, func(k, v []byte) ([]byte, error) { return nil, fn(k, v) })
}

// Seek calls fn for keys in [lower, upper) in ascending order, starting at
// lower; fn returns the key to go on from (at or after it; nil: the next
// key), or an error to stop with, which Seek returns. It lets a caller
// skip runs of keys it has no use for (all entries but the first of a
// group).
func (s *Store) Seek(lower, upper []byte, fn func(k, v []byte) ([]byte, error)) error {
	return s.walk(lower, upper, false, fn)
}

// walk iterates [lower, upper) forwards or backwards, seeking to the key
// fn returns when it returns one.
func (s *Store) walk(lower, upper []byte, reverse bool, fn func(k, v []byte) ([]byte, error)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("stele/storage: store scan: %w", err)
	}
	ok := it.First()
	if reverse {
		ok = it.Last()
	}
	for ok {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("stele/storage: store scan: %w", err)
		}
		next, err := fn(it.Key(), v)
		if err != nil {
			_ = it.Close()
			return err
		}
		switch {
		case next != nil:
			ok = it.SeekGE(next)
		case reverse:
			ok = it.Prev()
		default:
			ok = it.Next()
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("stele/storage: store scan: %w", err)
	}
	return nil
}

// PrefixEnd returns the first key after every key starting with prefix
// (nil: there is none).
func PrefixEnd(prefix []byte) []byte { return prefixEnd(prefix) }

// Flush writes the store's memtables to its files.
func (s *Store) Flush() error {
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("stele/storage: store flush: %w", err)
	}
	return nil
}

// NewBatch starts a batch of writes.
func (s *Store) NewBatch() *Batch { return &Batch{s: s, b: s.db.NewBatch()} }

// Close flushes nothing (committed batches are already in Pebble's WAL) and
// closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("stele/storage: closing store: %w", err)
	}
	return nil
}

// Set stores v under k. The batch copies both.
func (b *Batch) Set(k, v []byte) { _ = b.b.Set(k, v, nil) }

// Delete removes k.
func (b *Batch) Delete(k []byte) { _ = b.b.Delete(k, nil) }

// DeletePrefix removes every key that starts with prefix: one range
// deletion, cheap however many keys it covers. A prefix with no upper bound
// (empty, or only 0xff bytes) is rare; its keys are then listed and deleted
// one by one, and an error doing so is returned by Commit.
func (b *Batch) DeletePrefix(prefix []byte) {
	if end := prefixEnd(prefix); end != nil {
		_ = b.b.DeleteRange(prefix, end, nil)
		return
	}
	err := b.s.Scan(prefix, func(k, _ []byte) error { return b.b.Delete(k, nil) })
	if err != nil && b.err == nil {
		b.err = err
	}
}

// DeleteRange removes every key in [start, end): one range deletion.
func (b *Batch) DeleteRange(start, end []byte) { _ = b.b.DeleteRange(start, end, nil) }

// Len is the number of operations in the batch.
func (b *Batch) Len() int { return int(b.b.Count()) }

// Commit applies the batch atomically. With sync, it returns only after the
// write is durable (Pebble's WAL is fsynced). The batch cannot be reused.
func (b *Batch) Commit(sync bool) error {
	if b.err != nil {
		b.Close()
		return b.err
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	err := b.b.Commit(opts)
	if cerr := b.b.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("stele/storage: store commit: %w", err)
	}
	return nil
}

// Close discards an uncommitted batch.
func (b *Batch) Close() { _ = b.b.Close() }

// prefixEnd returns the smallest key greater than every key starting with
// prefix, or nil when there is none (prefix empty or all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte{}, prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// quietLogger drops Pebble's informational messages and passes its errors to
// slog. Fatalf keeps Pebble's contract: the process stops, because Pebble
// only calls it on an internal invariant violation it cannot continue from.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) {
	slog.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (quietLogger) Fatalf(format string, args ...any) {
	slog.Error("pebble: fatal: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}
