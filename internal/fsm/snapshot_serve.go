package fsm

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
	root   string
	m      manifest
	plan   [][]span
	hashes [][32]byte
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
	s := &Snapshot{root: dir, m: m, plan: planChunks(m.Files)}
	if len(s.plan) != len(m.Chunks) {
		return nil, fmt.Errorf("%w: %s: %d chunks planned, %d hashes", ErrSnapshotDamaged, dir, len(s.plan), len(m.Chunks))
	}
	for _, h := range m.Chunks {
		if len(h) != sha256.Size {
			return nil, fmt.Errorf("%w: %s: bad chunk hash", ErrSnapshotDamaged, dir)
		}
		s.hashes = append(s.hashes, [32]byte(h))
	}
	s.finish()
	return s, nil
}

// finish derives the snapshot hash and metadata from the chunk hashes.
func (s *Snapshot) finish() {
	m := snapshotMeta{height: s.m.Height, appHash: s.m.AppHash, digest: s.m.Digest, stateRoot: s.m.StateRoot, leavesRoot: s.m.LeavesRoot, hashes: s.hashes}
	s.hash = snapshotHash(m)
	s.meta = m.encode()
}

// Dir is the snapshot's directory.
func (s *Snapshot) Dir() string { return s.root }

// Height is the height whose state the snapshot holds.
func (s *Snapshot) Height() int64 { return s.m.Height }

// Format is the snapshot's format (SnapshotFormat).
func (s *Snapshot) Format() uint32 { return s.m.Format }

// AppHash is the app hash at the snapshot's height.
func (s *Snapshot) AppHash() []byte { return s.m.AppHash }

// Chunks is the number of chunks.
func (s *Snapshot) Chunks() uint32 { return uint32(len(s.hashes)) }

// Hash identifies the snapshot: a hash over its chunk hashes.
func (s *Snapshot) Hash() []byte { return s.hash }

// Metadata is what a restoring broker needs besides the chunks: the
// height, the app hash and its parts, and every chunk's hash.
func (s *Snapshot) Metadata() []byte { return s.meta }

// Size is the snapshot's data size: the sum of its files' sizes.
func (s *Snapshot) Size() int64 {
	var n int64
	for _, f := range s.m.Files {
		n += f.Size
	}
	return n
}

// Chunk reads chunk i from the snapshot's files and checks it against its
// hash; a mismatch (files changed or lost since the build) is
// ErrSnapshotDamaged, and the snapshot should be deleted.
func (s *Snapshot) Chunk(i uint32) ([]byte, error) {
	if int(i) >= len(s.plan) {
		return nil, fmt.Errorf("stele/fsm: snapshot at height %d has %d chunks, not %d", s.m.Height, len(s.plan), i+1)
	}
	data, err := s.readChunk(s.plan[i])
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(data) != s.hashes[i] {
		return nil, fmt.Errorf("%w: %s: chunk %d no longer matches its hash", ErrSnapshotDamaged, s.root, i)
	}
	return data, nil
}

// readChunk reads and encodes the pieces of one chunk.
func (s *Snapshot) readChunk(c []span) ([]byte, error) {
	pieces := make([]piece, len(c))
	for i, sp := range c {
		name := s.m.Files[sp.file].Path
		data := make([]byte, sp.length)
		if err := readFileAt(filepath.Join(s.root, filesDir, filepath.FromSlash(name)), data, sp.offset); err != nil {
			return nil, err
		}
		pieces[i] = piece{path: name, offset: sp.offset, data: data}
	}
	return encodeChunk(pieces), nil
}

// lender returns a function that finds a chunk of the snapshot being built
// in dir whose hash s already has: a single span of a large file that s
// holds with the same offset and length, linked to the same file (inode).
// The linked files' bytes below their recorded sizes never change (see
// storage.Log.Checkpoint); Chunk checks every hash again when serving.
func (s *Snapshot) lender(dir string) func(files []snapFile, c []span) ([32]byte, bool) {
	none := func([]snapFile, []span) ([32]byte, bool) { return [32]byte{}, false }
	if s == nil {
		return none
	}
	type key struct {
		path           string
		offset, length int64
	}
	known := map[key][32]byte{}
	for i, c := range s.plan {
		if len(c) == 1 && s.m.Files[c[0].file].Size > packBytes {
			known[key{s.m.Files[c[0].file].Path, c[0].offset, c[0].length}] = s.hashes[i]
		}
	}
	same := map[string]bool{}
	return func(files []snapFile, c []span) ([32]byte, bool) {
		if len(c) != 1 {
			return [32]byte{}, false
		}
		name := files[c[0].file].Path
		h, ok := known[key{name, c[0].offset, c[0].length}]
		if !ok {
			return [32]byte{}, false
		}
		isSame, checked := same[name]
		if !checked {
			a, err1 := os.Stat(filepath.Join(s.root, filesDir, filepath.FromSlash(name)))
			b, err2 := os.Stat(filepath.Join(dir, filesDir, filepath.FromSlash(name)))
			isSame = err1 == nil && err2 == nil && os.SameFile(a, b)
			same[name] = isSame
		}
		return h, isSame
	}
}

// planChunks cuts the files, in order, into chunks (see packBytes). The
// plan depends only on the files' paths and sizes.
func planChunks(files []snapFile) [][]span {
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
		if f.Size > packBytes {
			flush()
			for off := int64(0); off < f.Size; off += SnapshotChunkBytes {
				plan = append(plan, []span{{file: i, offset: off, length: min(SnapshotChunkBytes, f.Size-off)}})
			}
			continue
		}
		if curBytes+f.Size > SnapshotChunkBytes || len(cur) == maxChunkPieces {
			flush()
		}
		cur = append(cur, span{file: i, length: f.Size})
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
