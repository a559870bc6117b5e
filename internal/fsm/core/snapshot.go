package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/pkg/proof"
)

// Snapshots for state sync.
//
// A snapshot at height H holds the whole committed state at H: every key of
// the metadata store and every file of every partition directory, so a
// broker with an empty data directory that restores it is in the state it
// would have reached by applying blocks 1..H. Taking one has two steps:
//
//   - CaptureSnapshot, on the applier right after Commit, records the state
//     without touching log files: a Pebble checkpoint, and a pin of every
//     partition log (its segment files held open, with their committed
//     sizes; see storage.LogPin).
//   - BuildSnapshot, on any goroutine, hard-links the pinned files into the
//     snapshot directory, writes the store's authenticated keys with their
//     proofs into state files and its other keys into meta.kv (all but the
//     state trie's nodes, which a restoring broker builds), cuts the
//     files into chunks, hashes every chunk and writes the manifest. Chunks
//     are not stored: Snapshot.Chunk reads one from the linked files when a
//     peer asks for it, and checks it against its hash.
//
// The snapshot's bytes depend only on the committed state, so every honest
// broker builds the same snapshot at a height, with the same hash, and a
// restoring broker can fetch its chunks from all of them.
//
// The state is the metadata store (Dir/meta), which the core ships whole,
// and the directories of files modules keep beside it, which each module
// registers with its capture and its check of a peer's paths
// (snapshotFiles, registry.go): the topics module's partition directories
// (Dir/logs, topic_snapshot.go). A new kind of state kept outside the store
// registers its own.

// SnapshotChunkBytes is the most file data one chunk carries. CometBFT
// carries chunks in messages of at most 16e6 bytes; 8 MiB of data plus the
// pieces' framing (bounded by maxChunkPieces) stays well below.
const SnapshotChunkBytes = 8 << 20

const (
	// PackBytes: files up to this size are packed several to a chunk;
	// larger files get chunks of their own, cut at multiples of
	// SnapshotChunkBytes from the file's start, so a file that did not
	// change gives the same chunks as in the previous snapshot and
	// BuildSnapshot takes their hashes from there instead of reading it.
	PackBytes      = 1 << 20
	maxChunkPieces = 4096
)

// The layout of a snapshot directory.
const (
	manifestFile = "manifest" // written last by BuildSnapshot: the snapshot is complete
	FilesDir     = "files"    // meta.kv and logs/..., as named in the snapshot
	pebbleDir    = "pebble"   // the store checkpoint, until BuildSnapshot serialises it
)

// manifest describes a snapshot directory (JSON; it never leaves the broker).
type manifest struct {
	Format  uint32 `json:"format"`
	Height  int64  `json:"height"`
	AppHash []byte `json:"app_hash"`
	// What AppHash is made of (proof.AppHash).
	Digest     []byte     `json:"digest"`
	StateRoot  []byte     `json:"state_root"`
	LeavesRoot []byte     `json:"leaves_root"`
	Files      []SnapFile `json:"files"`
	Chunks     [][]byte   `json:"chunk_hashes,omitempty"`
}

type SnapFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// span is a run of one file (an index into the manifest's files) in a chunk.
type span struct {
	File           int
	offset, length int64
}

// SnapshotCapture is the committed state CaptureSnapshot recorded, to be
// built into a snapshot by BuildSnapshot (or let go by Release).
type SnapshotCapture struct {
	dir   string
	m     manifest
	parts []CapturedFiles // the modules' files (snapshotFiles), in rank order
}

// CaptureSnapshot records the committed state for a snapshot in dir, which
// it creates and which must not exist: a checkpoint of the metadata store,
// and the modules' files as their capture steps record them (the topics
// module pins every partition log, storage.Log.Pin). It must be called by
// the applier, after a Commit and before the next ApplyBlock; it does no
// work per byte or per file of the logs, so it holds the applier up for
// the time of the store checkpoint (milliseconds), and for the rest of any
// compaction still being written (WaitCompactions), so that every broker
// captures the compacted files. dir must be on the data
// directory's file system (BuildSnapshot hard-links segment files).
func (f *Machine) CaptureSnapshot(dir string) (_ *SnapshotCapture, err error) {
	if f.applied {
		return nil, fmt.Errorf("%w: snapshot while block %d is applied but not committed", ErrHeight, f.Height)
	}
	if f.Height == 0 {
		return nil, fmt.Errorf("%w: no block committed yet, nothing to snapshot", ErrHeight)
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("%w: %s", storage.ErrCheckpointExists, dir)
	}
	if len(f.AppHash) > 0 && !bytes.Equal(proof.AppHash(f.blockDigest, f.StateRoot, f.leavesRoot), f.AppHash) {
		return nil, fmt.Errorf("stele/fsm: snapshot at height %d: the app hash's parts do not give the app hash", f.Height)
	}
	c := &SnapshotCapture{dir: dir, m: manifest{Format: SnapshotFormat, Height: f.Height, AppHash: bytes.Clone(f.AppHash),
		Digest: bytes.Clone(f.blockDigest), StateRoot: bytes.Clone(f.StateRoot), LeavesRoot: bytes.Clone(f.leavesRoot)}}
	defer func() {
		if err != nil {
			c.Release()
			_ = os.RemoveAll(dir)
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	// The modules' files first: the topics module waits for the
	// compactions in flight before it pins the logs.
	for _, s := range f.reg.SnapshotFileSteps {
		parts, err := s.Capture(f)
		c.parts = append(c.parts, parts...) // released on error too
		if err != nil {
			return nil, err
		}
	}
	if err := f.Store.Checkpoint(filepath.Join(dir, pebbleDir)); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir is the directory the snapshot is being made in.
func (c *SnapshotCapture) Dir() string { return c.dir }

// Height is the height captured.
func (c *SnapshotCapture) Height() int64 { return c.m.Height }

// Release lets the pinned log files go; BuildSnapshot calls it. It may be
// called more than once.
func (c *SnapshotCapture) Release() {
	for _, p := range c.parts {
		p.Release()
	}
}

// Materialise puts the modules' captured files under dir/files and lists
// every file of the snapshot but the store's.
func (c *SnapshotCapture) Materialise(ctx context.Context) error {
	root := filepath.Join(c.dir, FilesDir)
	for _, p := range c.parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		files, err := p.Materialise(root)
		if err != nil {
			return err
		}
		c.m.Files = append(c.m.Files, files...)
	}
	sort.Slice(c.m.Files, func(i, j int) bool { return c.m.Files[i].Path < c.m.Files[j].Path })
	return nil
}

// BuildSnapshot completes a captured snapshot in its directory and returns
// it: the partition files are linked (or, if changed since, copied from the
// pins), the store's keys written into meta.kv, the files cut into chunks
// and every chunk hashed, and the manifest written last. prev, the previous
// snapshot (nil if none), lends the hashes of chunks whose file it links to
// the same unchanged bytes. It may run on any goroutine, concurrently with
// the applier; ctx stops it between steps. It releases c. On error the
// directory is left as it is, for the caller to remove.
func BuildSnapshot(ctx context.Context, c *SnapshotCapture, prev *Snapshot) (*Snapshot, error) {
	defer c.Release()
	dir := c.dir
	if err := c.Materialise(ctx); err != nil {
		return nil, err
	}
	c.Release()
	// With no partition, nothing above made the files directory.
	if err := os.MkdirAll(filepath.Join(dir, FilesDir), 0o755); err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	root := c.m.StateRoot
	if len(root) == 0 {
		root = EmptyStateRoot()
	}
	storeFiles, err := writeSnapshotStore(filepath.Join(dir, pebbleDir), filepath.Join(dir, FilesDir), root)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(filepath.Join(dir, pebbleDir)); err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	m := c.m
	m.Files = append(storeFiles, m.Files...)
	if err := storage.SyncTree(filepath.Join(dir, FilesDir)); err != nil {
		return nil, err
	}
	s := &Snapshot{Root: dir, M: m, Plan: planChunks(m.Files)}
	reuse := prev.lender(dir)
	s.Hashes = make([][32]byte, len(s.Plan))
	for i, c := range s.Plan {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if h, ok := reuse(s.M.Files, c); ok {
			s.Hashes[i] = h
			continue
		}
		data, err := s.readChunk(c)
		if err != nil {
			return nil, err
		}
		s.Hashes[i] = sha256.Sum256(data)
	}
	for _, h := range s.Hashes {
		s.M.Chunks = append(s.M.Chunks, append([]byte(nil), h[:]...))
	}
	s.finish()
	if err := writeJSON(filepath.Join(dir, manifestFile), s.M); err != nil {
		return nil, err
	}
	return s, storage.SyncDir(dir)
}

// writeJSON writes v to path durably: a temporary file, fsynced, renamed.
func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	_, err = io.Copy(f, bytes.NewReader(data))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	return nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSnapshotDamaged, path, err)
	}
	return nil
}
