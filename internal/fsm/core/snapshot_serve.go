package core

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Snapshot is a built snapshot, ready to serve. Its methods may be called
// from any goroutine.
type Snapshot struct {
	Root   string
	M      manifest
	Plan   [][]span
	Hashes [][32]byte
	hash   []byte
	meta   []byte
}

// OpenSnapshot opens a snapshot BuildSnapshot completed in dir. A directory
// without a manifest (a capture never built, or a build a crash stopped)
// is an error wrapping fs.ErrNotExist.
func OpenSnapshot(dir string) (*Snapshot, error) {
	var m manifest
	if err := readJSON(filepath.Join(dir, manifestFile), &m); err != nil {
		return nil, err
	}
	if m.Format != SnapshotFormat {
		return nil, fmt.Errorf("%w: %s has format %d", ErrSnapshotFormat, dir, m.Format)
	}
	s := &Snapshot{Root: dir, M: m, Plan: planChunks(m.Files)}
	if len(s.Plan) != len(m.Chunks) {
		return nil, fmt.Errorf("%w: %s: %d chunks planned, %d hashes", ErrSnapshotDamaged, dir, len(s.Plan), len(m.Chunks))
	}
	for _, h := range m.Chunks {
		if len(h) != sha256.Size {
			return nil, fmt.Errorf("%w: %s: bad chunk hash", ErrSnapshotDamaged, dir)
		}
		s.Hashes = append(s.Hashes, [32]byte(h))
	}
	s.finish()
	return s, nil
}

// finish derives the snapshot hash and metadata from the chunk hashes.
func (s *Snapshot) finish() {
	m := SnapshotMeta{Height: s.M.Height, AppHash: s.M.AppHash, digest: s.M.Digest, StateRoot: s.M.StateRoot, leavesRoot: s.M.LeavesRoot, Hashes: s.Hashes}
	s.hash = snapshotHash(m)
	s.meta = m.Encode()
}

// Dir is the snapshot's directory.
func (s *Snapshot) Dir() string { return s.Root }

// Height is the height whose state the snapshot holds.
func (s *Snapshot) Height() int64 { return s.M.Height }

// Format is the snapshot's format (SnapshotFormat).
func (s *Snapshot) Format() uint32 { return s.M.Format }

// AppHash is the app hash at the snapshot's height.
func (s *Snapshot) AppHash() []byte { return s.M.AppHash }

// Chunks is the number of chunks.
func (s *Snapshot) Chunks() uint32 { return uint32(len(s.Hashes)) }

// Hash identifies the snapshot: a hash over its chunk hashes.
func (s *Snapshot) Hash() []byte { return s.hash }

// Metadata is what a restoring broker needs besides the chunks: the
// height, the app hash and its parts, and every chunk's hash.
func (s *Snapshot) Metadata() []byte { return s.meta }

// Size is the snapshot's data size: the sum of its files' sizes.
func (s *Snapshot) Size() int64 {
	var n int64
	for _, f := range s.M.Files {
		n += f.Size
	}
	return n
}

// Chunk reads chunk i from the snapshot's files and checks it against its
// hash; a mismatch (files changed or lost since the build) is
// ErrSnapshotDamaged, and the snapshot should be deleted.
func (s *Snapshot) Chunk(i uint32) ([]byte, error) {
	if int(i) >= len(s.Plan) {
		return nil, fmt.Errorf("stele/fsm: snapshot at height %d has %d chunks, not %d", s.M.Height, len(s.Plan), i+1)
	}
	data, err := s.readChunk(s.Plan[i])
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(data) != s.Hashes[i] {
		return nil, fmt.Errorf("%w: %s: chunk %d no longer matches its hash", ErrSnapshotDamaged, s.Root, i)
	}
	return data, nil
}

// readChunk reads and encodes the pieces of one chunk.
func (s *Snapshot) readChunk(c []span) ([]byte, error) {
	pieces := make([]Piece, len(c))
	for i, sp := range c {
		name := s.M.Files[sp.File].Path
		data := make([]byte, sp.length)
		if err := readFileAt(filepath.Join(s.Root, FilesDir, filepath.FromSlash(name)), data, sp.offset); err != nil {
			return nil, err
		}
		pieces[i] = Piece{Path: name, Offset: sp.offset, Data: data}
	}
	return EncodeChunk(pieces), nil
}

// lender returns a function that finds a chunk of the snapshot being built
// in dir whose hash s already has: a single span of a large file that s
// holds with the same offset and length, linked to the same file (inode).
// The linked files' bytes below their recorded sizes never change (see
// storage.Log.Checkpoint); Chunk checks every hash again when serving.
func (s *Snapshot) lender(dir string) func(files []SnapFile, c []span) ([32]byte, bool) {
	none := func([]SnapFile, []span) ([32]byte, bool) { return [32]byte{}, false }
	if s == nil {
		return none
	}
	type key struct {
		path           string
		offset, length int64
	}
	known := map[key][32]byte{}
	for i, c := range s.Plan {
		if len(c) == 1 && s.M.Files[c[0].File].Size > PackBytes {
			known[key{s.M.Files[c[0].File].Path, c[0].offset, c[0].length}] = s.Hashes[i]
		}
	}
	same := map[string]bool{}
	return func(files []SnapFile, c []span) ([32]byte, bool) {
		if len(c) != 1 {
			return [32]byte{}, false
		}
		name := files[c[0].File].Path
		h, ok := known[key{name, c[0].offset, c[0].length}]
		if !ok {
			return [32]byte{}, false
		}
		isSame, checked := same[name]
		if !checked {
			a, err1 := os.Stat(filepath.Join(s.Root, FilesDir, filepath.FromSlash(name)))
			b, err2 := os.Stat(filepath.Join(dir, FilesDir, filepath.FromSlash(name)))
			isSame = err1 == nil && err2 == nil && os.SameFile(a, b)
			same[name] = isSame
		}
		return h, isSame
	}
}

// planChunks cuts the files, in order, into chunks (see packBytes). The
// plan depends only on the files' paths and sizes.
func planChunks(files []SnapFile) [][]span {
	var plan [][]span
	var cur []span
	var curBytes int64
	flush := func() {
		if len(cur) > 0 {
			plan = append(plan, cur)
		}
		cur, curBytes = nil, 0
	}
	for i, f := range files {
		if f.Size > PackBytes {
			flush()
			for off := int64(0); off < f.Size; off += SnapshotChunkBytes {
				plan = append(plan, []span{{File: i, offset: off, length: min(SnapshotChunkBytes, f.Size-off)}})
			}
			continue
		}
		if curBytes+f.Size > SnapshotChunkBytes || len(cur) == maxChunkPieces {
			flush()
		}
		cur = append(cur, span{File: i, length: f.Size})
		curBytes += f.Size
	}
	flush()
	return plan
}

// readFileAt fills b from the file at path, starting at off.
func readFileAt(path string, b []byte, off int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotDamaged, err)
	}
	defer f.Close()
	if n, err := f.ReadAt(b, off); n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: reading %s: %w", ErrSnapshotDamaged, path, err)
	}
	return nil
}
