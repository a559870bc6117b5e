package core

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/pkg/proof"
)

// ErrChunkOrder is returned by Restore.Apply for a chunk other than the
// next one: chunks are applied in index order.
var ErrChunkOrder = errors.New("stele/fsm: snapshot chunk out of order")

// ErrNotEmpty is returned by RestoreSnapshot on a state machine that has
// applied blocks: a snapshot is restored only into an empty data directory.
var ErrNotEmpty = errors.New("stele/fsm: state is not empty; a snapshot restores only into an empty data directory")

// SnapshotOffer is a peer's snapshot as offered for restore.
type SnapshotOffer struct {
	Height   int64
	Format   uint32
	Chunks   uint32
	Hash     []byte
	Metadata []byte
	// AppHash is the trusted app hash at Height (for CometBFT, verified by
	// the light client); the snapshot must carry the same.
	AppHash []byte
}

// Restore receives a snapshot's chunks into a staging directory. Apply
// checks each chunk against its hash in the metadata before writing it, so
// a chunk from a peer that lies about an honest snapshot is refused
// (ErrChunkHash) and can be fetched again from another; and it checks every
// authenticated value in the chunk against the trusted state root
// (snapshot_state.go), so a snapshot whose own metadata vouches for altered
// state is refused at the chunk that holds the alteration (ErrStateRoot,
// within ErrSnapshotMismatch). FSM.RestoreSnapshot then checks the whole
// (nothing left out) and puts the staged state in place. A Restore is used
// by one goroutine.
//
// What the checks do not cover: the partition logs' bytes, and the keys
// outside the trie (authstate.go), are checked against the chunk hashes of
// the snapshot's metadata, which the peers that advertise it vouch for;
// the logs' extent (start and end offsets) is authenticated state, and
// clients check records themselves with their proofs (docs/trust.md).
type Restore struct {
	reg  *Registry
	Dir  string
	meta SnapshotMeta
	next uint32 // the chunk Apply expects
	seen map[string]bool
	cur  struct {
		path string
		f    *os.File // nil for a state file, which is checked in memory
		size int64
	}
	State stateRestore // snapshot_state.go
}

// NewRestore checks an offered snapshot (format, metadata against the
// hash, height, chunk count and trusted app hash) and prepares the staging
// directory dir, removing whatever was there. dir must be on the data
// directory's file system (RestoreSnapshot renames from it).
func NewRestoreWith(reg *Registry, dir string, o SnapshotOffer) (*Restore, error) {
	if o.Format != SnapshotFormat {
		return nil, fmt.Errorf("%w: format %d, this version restores %d", ErrSnapshotFormat, o.Format, SnapshotFormat)
	}
	m, err := DecodeSnapshotMeta(o.Metadata)
	if err != nil {
		return nil, err
	}
	switch {
	case m.Height != o.Height:
		return nil, fmt.Errorf("%w: offered at height %d, metadata says %d", ErrSnapshotMismatch, o.Height, m.Height)
	case len(m.Hashes) != int(o.Chunks):
		return nil, fmt.Errorf("%w: offered with %d chunks, metadata lists %d", ErrSnapshotMismatch, o.Chunks, len(m.Hashes))
	case !bytes.Equal(snapshotHash(m), o.Hash):
		return nil, fmt.Errorf("%w: the hash does not cover the metadata", ErrSnapshotMismatch)
	case !bytes.Equal(m.AppHash, o.AppHash):
		return nil, fmt.Errorf("%w: snapshot app hash %X, trusted app hash %X at height %d", ErrSnapshotMismatch, m.AppHash, o.AppHash, o.Height)
	}
	if len(o.AppHash) == 0 { // no block ever changed the state
		if len(m.StateRoot) != 0 && !bytes.Equal(m.StateRoot, EmptyStateRoot()) {
			return nil, fmt.Errorf("%w: %w: the trusted app hash is empty but the snapshot's state root is not", ErrSnapshotMismatch, ErrStateRoot)
		}
		m.StateRoot = EmptyStateRoot()
	} else if got := proof.AppHash(m.digest, m.StateRoot, m.leavesRoot); !bytes.Equal(got, o.AppHash) {
		return nil, fmt.Errorf("%w: %w: the snapshot's app hash parts hash to %X, the trusted app hash is %X", ErrSnapshotMismatch, ErrStateRoot, got, o.AppHash)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("stele/fsm: restore: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stele/fsm: restore: %w", err)
	}
	return StartRestore(reg, dir, m), nil
}

// StartRestore is a restore into dir of the snapshot m describes.
func StartRestore(reg *Registry, dir string, m SnapshotMeta) *Restore {
	return &Restore{reg: reg, Dir: dir, meta: m, seen: map[string]bool{}, State: stateRestore{want: -1}}
}

// Height is the height of the snapshot being restored.
func (r *Restore) Height() int64 { return r.meta.Height }

// Next is the index of the chunk Apply expects next.
func (r *Restore) Next() uint32 { return r.next }

// Complete reports whether every chunk has been applied.
func (r *Restore) Complete() bool { return int(r.next) == len(r.meta.Hashes) }

// Apply checks chunk index against its hash and writes it to the staging
// directory. Errors: ErrChunkOrder (not the next chunk), ErrChunkHash (the
// sender sent other bytes: fetch it again elsewhere), ErrSnapshotMalformed
// (the bytes match the snapshot's own hash, so the snapshot itself is bad),
// or an I/O error.
func (r *Restore) Apply(index uint32, chunk []byte) error {
	if index != r.next {
		return fmt.Errorf("%w: got chunk %d, want %d of %d", ErrChunkOrder, index, r.next, len(r.meta.Hashes))
	}
	if r.Complete() {
		return fmt.Errorf("%w: all %d chunks already applied", ErrChunkOrder, len(r.meta.Hashes))
	}
	if sha256.Sum256(chunk) != r.meta.Hashes[index] {
		return fmt.Errorf("%w: chunk %d", ErrChunkHash, index)
	}
	pieces, err := r.reg.DecodeChunk(chunk)
	if err != nil {
		return err
	}
	for _, p := range pieces {
		if err := r.write(p); err != nil {
			return err
		}
	}
	r.next++
	return nil
}

// write appends one piece to its file, which must be the file being
// written (continuing at its end) or a new one (starting at offset 0).
func (r *Restore) write(p Piece) error {
	if r.cur.path != "" && p.Path != r.cur.path && IsStateFileName(r.cur.path) {
		return fmt.Errorf("%w: %s ends before its %d bytes", ErrSnapshotMalformed, r.cur.path, r.State.want)
	}
	if IsStateFileName(p.Path) {
		return r.writeState(p)
	}
	if p.Path != r.cur.path || r.cur.f == nil {
		if r.seen[p.Path] {
			return fmt.Errorf("%w: %s appears twice", ErrSnapshotMalformed, p.Path)
		}
		if p.Offset != 0 {
			return fmt.Errorf("%w: %s starts at offset %d", ErrSnapshotMalformed, p.Path, p.Offset)
		}
		if err := r.CloseFile(); err != nil {
			return err
		}
		path := filepath.Join(r.Dir, filepath.FromSlash(p.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
		r.seen[p.Path] = true
		r.cur.path, r.cur.f, r.cur.size = p.Path, f, 0
	} else if p.Offset != r.cur.size {
		return fmt.Errorf("%w: %s continues at offset %d after %d bytes", ErrSnapshotMalformed, p.Path, p.Offset, r.cur.size)
	}
	if _, err := r.cur.f.Write(p.Data); err != nil {
		return fmt.Errorf("stele/fsm: restore: %w", err)
	}
	r.cur.size += int64(len(p.Data))
	return nil
}

func (r *Restore) CloseFile() error {
	if r.cur.f == nil {
		return nil
	}
	err := r.cur.f.Close()
	r.cur.f = nil
	if err != nil {
		return fmt.Errorf("stele/fsm: restore: %w", err)
	}
	return nil
}

// Close abandons the restore and removes the staging directory.
func (r *Restore) Close() error {
	_ = r.CloseFile()
	_ = r.State.Close()
	if err := os.RemoveAll(r.Dir); err != nil {
		return fmt.Errorf("stele/fsm: restore: %w", err)
	}
	return nil
}

// RestoreSnapshot puts a completely applied Restore in place of f's empty
// state: it builds the metadata store from meta.kv, builds the state trie
// from its contents and requires that it hashes to the snapshot's (trusted)
// app hash (verifyStagedState: ErrStateRoot), opens the staged state on its
// own to check that it is whole and ends at the snapshot's height and app
// hash (ErrSnapshotMismatch or ErrSnapshotMalformed otherwise; f is then
// unchanged), moves it into f's data directory and reloads f from it, as
// Open would. Afterwards Info reports the snapshot's height and app hash.
//
// f must be empty (ErrNotEmpty: height 0, nothing applied) and is used as
// the applier would use it: no ApplyBlock may run meanwhile. Readers see
// the empty state until the restored one is published; the metadata store
// is closed and reopened in between.
func (f *Machine) RestoreSnapshot(r *Restore) error {
	if !r.Complete() {
		return fmt.Errorf("%w: %d of %d chunks applied", ErrChunkOrder, r.next, len(r.meta.Hashes))
	}
	if f.Height != 0 || f.applied { // no block applied: no module holds state
		return fmt.Errorf("%w (at height %d)", ErrNotEmpty, f.Height)
	}
	if r.cur.path != "" && IsStateFileName(r.cur.path) {
		return fmt.Errorf("%w: %s ends before its %d bytes", ErrSnapshotMalformed, r.cur.path, r.State.want)
	}
	if err := r.CloseFile(); err != nil {
		return err
	}
	if err := r.State.Close(); err != nil {
		return err
	}
	if err := r.StageStore(); err != nil {
		return err
	}
	if err := verifyStagedState(filepath.Join(r.Dir, "meta"), r.meta.AppHash); err != nil {
		return err
	}
	for _, s := range f.reg.SnapshotFileSteps { // a module's directory may be empty
		if err := os.MkdirAll(filepath.Join(r.Dir, s.Dir), 0o755); err != nil {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
		if err := storage.SyncTree(filepath.Join(r.Dir, s.Dir)); err != nil {
			return err
		}
	}
	g, err := f.reopen(r.Dir)
	if err != nil {
		return fmt.Errorf("%w: the restored state does not open: %w", ErrSnapshotMalformed, err)
	}
	h, hash := g.Info()
	if err := g.Close(); err != nil {
		return err
	}
	if h != r.meta.Height || !bytes.Equal(hash, r.meta.AppHash) {
		return fmt.Errorf("%w: the restored state is at height %d hash %X, the snapshot at %d %X", ErrSnapshotMismatch, h, hash, r.meta.Height, r.meta.AppHash)
	}
	return f.swapIn(r.Dir)
}

// StageStore builds the staged metadata store (dir/meta) from meta.kv,
// which may hold no authenticated key (those come only proven, in the
// state files), and the checked state records (state.kv).
func (r *Restore) StageStore() error {
	store, err := storage.OpenStore(filepath.Join(r.Dir, "meta"))
	if err != nil {
		return err
	}
	b, size := store.NewBatch(), 0
	load := func(name string, authenticatedOnly bool) error {
		path := filepath.Join(r.Dir, name)
		in, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) && authenticatedOnly {
			return nil // a state without authenticated keys
		}
		if err != nil {
			return fmt.Errorf("%w: no %s: %w", ErrSnapshotMalformed, name, err)
		}
		defer in.Close()
		err = DecodeKVs(in, func(k, v []byte) error {
			if !authenticatedOnly && Authenticated(k) {
				return fmt.Errorf("%w: meta.kv holds key %q of the authenticated state, which comes only with its proof", ErrSnapshotMalformed, k)
			}
			b.Set(k, v)
			if size += len(k) + len(v); size >= 4<<20 {
				if err := b.Commit(false); err != nil {
					return err
				}
				b, size = store.NewBatch(), 0
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
		return nil
	}
	err = load(MetaKVPath, false)
	if err == nil {
		err = load(StagedStateKV, true)
	}
	if err == nil {
		err = b.Commit(true) // syncs the log holding every earlier batch too
	} else {
		b.Close()
	}
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	return err
}

// swapIn replaces f's (empty) metadata store and the modules' directories
// (snapshotFiles: the logs) with the staged ones
// in staged and reloads f. A crash in between leaves either the empty
// state or the restored one in place, or a data directory without a
// metadata store, which Open starts empty (deleting the logs as strays).
func (f *Machine) swapIn(staged string) error {
	if err := f.Store.Close(); err != nil {
		return err
	}
	old := filepath.Join(staged, "replaced")
	if err := os.MkdirAll(old, 0o755); err != nil {
		return fmt.Errorf("stele/fsm: restore: %w", err)
	}
	// The store leaves first and comes back last: until it is in place,
	// Open finds no state and starts empty.
	renames := [][2]string{{filepath.Join(f.opts.Dir, "meta"), filepath.Join(old, "meta")}}
	for _, s := range f.reg.SnapshotFileSteps {
		renames = append(renames, [2]string{filepath.Join(f.opts.Dir, s.Dir), filepath.Join(old, s.Dir)})
	}
	for _, s := range f.reg.SnapshotFileSteps {
		renames = append(renames, [2]string{filepath.Join(staged, s.Dir), filepath.Join(f.opts.Dir, s.Dir)})
	}
	renames = append(renames, [2]string{filepath.Join(staged, "meta"), filepath.Join(f.opts.Dir, "meta")})
	for _, step := range renames {
		if err := os.Rename(step[0], step[1]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
	}
	if err := storage.SyncDir(f.opts.Dir); err != nil {
		return err
	}
	store, err := storage.OpenStoreWith(filepath.Join(f.opts.Dir, "meta"), storage.StoreOptions{FS: f.opts.StoreFS})
	if err != nil {
		return err
	}
	f.Store = store
	// Every module's load sets its state afresh (groups and transactions
	// are then published whole).
	if err := f.load(); err != nil {
		return err
	}
	f.publish(true)
	if err := os.RemoveAll(staged); err != nil {
		f.opts.Logger.Warn("removing the snapshot staging directory", "dir", staged, "err", err)
	}
	return nil
}

// verifyStagedState checks a restored metadata store against the trusted
// app hash: it builds the state trie afresh from the store's authenticated
// keys (whatever trie nodes came with it) and requires that its root, with
// the block digest and leaves root the store's m/state gives, hash to
// appHash (proof.AppHash). A snapshot whose state a peer altered (one
// committed offset, one producer's sequence) fails with ErrStateRoot, and
// nothing of it is used.
func verifyStagedState(dir string, appHash []byte) error {
	store, err := storage.OpenStore(dir)
	if err != nil {
		return err
	}
	defer store.Close()
	v, ok, err := store.Get(keyState)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: the snapshot's state has no %s", ErrSnapshotMalformed, keyState)
	}
	st, _, _, err := DecodeState(v)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotMalformed, err)
	}
	root, err := RebuildStateRoot(store)
	if err != nil {
		return err
	}
	if len(appHash) == 0 { // no block ever changed the state
		if !bytes.Equal(root, EmptyStateRoot()) {
			return fmt.Errorf("%w: %w: the trusted app hash is empty but the state is not", ErrSnapshotMismatch, ErrStateRoot)
		}
		return nil
	}
	if got := proof.AppHash(st.blockDigest, root, st.leavesRoot); !bytes.Equal(got, appHash) {
		return fmt.Errorf("%w: %w: the snapshot's state hashes to app hash %X, the trusted app hash is %X", ErrSnapshotMismatch, ErrStateRoot, got, appHash)
	}
	if !bytes.Equal(root, st.stateRoot) {
		return fmt.Errorf("%w: %w: the snapshot claims state root %X, its contents hash to %X", ErrSnapshotMismatch, ErrStateRoot, st.stateRoot, root)
	}
	return nil
}
