package core

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/pokt-network/smt"

	"github.com/stele-io/stele/internal/storage"
	"github.com/stele-io/stele/pkg/proof"
)

// The authenticated state in a snapshot, and how a restoring broker checks
// it chunk by chunk.
//
// Every authenticated key of the metadata store (authstate.go) travels in
// the snapshot's state files, each key with its value and the trie's proof
// of that value under the snapshot's state root; everything else (the
// block metadata, certificates, the key and batch indexes, proof entries)
// travels in meta.kv. The snapshot's metadata carries the three parts of
// the app hash (block digest, state root, leaves root), which NewRestore
// checks against the light-client-verified app hash, so once a snapshot is
// accepted its state root is trusted, and Restore.Apply checks every
// state file as the chunk that completes it arrives: a value a peer
// altered fails its proof there (ErrStateRoot), and the snapshot is
// refused with the peer that sent it. A state file is at most
// stateFileBytes of records unless one record is larger, so it fits in one
// chunk (planChunks never cuts a file below packBytes) and the chunk that
// fails is the chunk that lied.
//
// What a chunk cannot show is absence: a peer that leaves a key out sends
// chunks whose every value proves. That is caught once the last chunk is
// in, when the restored store's trie is rebuilt and its root compared
// (verifyStagedState), and the whole snapshot is refused.
//
//	state/<8 digits>.kv := uvarint n | n bytes: record*
//	record              := bytes key | bytes value | proof
//	proof               := bytes non-membership leaf data | count m
//	                       | m × 32-byte side node
//
// Records ascend strictly by key across the files, in file order; the
// proof is the library's (smt.SparseMerkleProof), as ProveState serves it.
const stateDir = "state"

// stateFileBytes is the size a state file's records are cut at.
const stateFileBytes = PackBytes - 64<<10

// maxStateFile bounds the length a state file may claim: the records
// around the largest key and value meta.kv allows.
const maxStateFile = 2*maxSnapshotKV + stateFileBytes

// StateFileName is the snapshot path of the i-th state file.
func StateFileName(i int) string { return fmt.Sprintf("%s/%08d.kv", stateDir, i) }

// IsStateFileName reports whether p is a state file's path.
func IsStateFileName(p string) bool {
	if len(p) != len(stateDir)+1+8+3 || p[:len(stateDir)+1] != stateDir+"/" || p[len(p)-3:] != ".kv" {
		return false
	}
	_, err := strconv.ParseUint(p[len(stateDir)+1:len(p)-3], 10, 32)
	return err == nil
}

// writeSnapshotStore writes the store checkpoint in ckpt into the snapshot
// files directory: meta.kv with the keys outside the trie (but its nodes),
// and the state files with every authenticated key and its proof under
// stateRoot. It returns the files written, meta.kv first.
func writeSnapshotStore(ckpt, files string, stateRoot []byte) ([]SnapFile, error) {
	store, err := storage.OpenStoreReadOnly(ckpt)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	out, err := os.Create(filepath.Join(files, MetaKVPath))
	if err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	defer out.Close()
	meta := bufio.NewWriterSize(out, 1<<16)
	if err := os.MkdirAll(filepath.Join(files, stateDir), 0o755); err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	sw := &stateWriter{dir: files, store: store, root: stateRoot}
	err = store.Scan(nil, func(k, v []byte) error {
		switch {
		case bytes.HasPrefix(k, []byte(TrieNodePrefix)):
			return nil // the restoring broker builds its state trie itself
		case Authenticated(k):
			return sw.add(k, v)
		default:
			return EncodeKV(meta, k, v)
		}
	})
	if err == nil {
		err = sw.flush()
	}
	if err == nil {
		err = meta.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: writing the state: %w", err)
	}
	fi, err := out.Stat()
	if err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	return append([]SnapFile{{Path: MetaKVPath, Size: fi.Size()}}, sw.written...), nil
}

// stateWriter gathers proven records into state files.
type stateWriter struct {
	dir     string
	store   *storage.Store
	root    []byte
	trie    *smt.SMT // a trie of its own per file, so its node cache stays small
	w       Writer
	written []SnapFile
}

func (s *stateWriter) add(k, v []byte) error {
	if s.trie == nil {
		s.trie = smt.ImportSparseMerkleTrie(&trieNodes{store: s.store}, sha256.New(), bytes.Clone(s.root))
	}
	p, err := proveKey(s.trie, k)
	if err != nil {
		return fmt.Errorf("proving %q: %w", k, err)
	}
	w := &s.w
	w.Bytes(k)
	w.Bytes(v)
	w.Bytes(p.NonMembershipLeafData)
	w.Count(len(p.SideNodes))
	for _, n := range p.SideNodes {
		if len(n) != sha256.Size {
			return fmt.Errorf("proving %q: a side node of %d bytes", k, len(n))
		}
		w.Raw(n)
	}
	if len(w.B) >= stateFileBytes {
		return s.flush()
	}
	return nil
}

// flush writes the gathered records as the next state file.
func (s *stateWriter) flush() error {
	if len(s.w.B) == 0 {
		return nil
	}
	name := StateFileName(len(s.written))
	data := append(binary.AppendUvarint(nil, uint64(len(s.w.B))), s.w.B...)
	if err := os.WriteFile(filepath.Join(s.dir, filepath.FromSlash(name)), data, 0o644); err != nil {
		return err
	}
	s.written = append(s.written, SnapFile{Path: name, Size: int64(len(data))})
	s.w.B, s.trie = s.w.B[:0], nil
	return nil
}

// stateRestore is a Restore's side of the state files: the file being
// received, the last key checked, and the file the checked records go to
// (state.kv in the staging directory, in meta.kv's encoding).
type stateRestore struct {
	buf     []byte
	want    int // the file's length, once its header is in; -1 before
	lastKey []byte
	out     *os.File
	w       *bufio.Writer
	spec    *smt.TrieSpec
}

// StagedStateKV is the staging file the checked state records go to.
const StagedStateKV = "state.kv"

// writeState takes one piece of a state file; when the file is complete it
// checks every record against root and stages them.
func (r *Restore) writeState(p Piece) error {
	s := &r.State
	if p.Path != r.cur.path {
		if r.seen[p.Path] {
			return fmt.Errorf("%w: %s appears twice", ErrSnapshotMalformed, p.Path)
		}
		if p.Offset != 0 {
			return fmt.Errorf("%w: %s starts at offset %d", ErrSnapshotMalformed, p.Path, p.Offset)
		}
		if err := r.CloseFile(); err != nil {
			return err
		}
		r.seen[p.Path] = true
		r.cur.path, r.cur.size = p.Path, 0
		s.buf, s.want = s.buf[:0], -1
	} else if p.Offset != r.cur.size {
		return fmt.Errorf("%w: %s continues at offset %d after %d bytes", ErrSnapshotMalformed, p.Path, p.Offset, r.cur.size)
	}
	s.buf = append(s.buf, p.Data...)
	r.cur.size += int64(len(p.Data))
	if s.want == -1 {
		rd := &Reader{B: s.buf}
		n := rd.uvarint()
		if rd.E != nil {
			if len(s.buf) < 10 {
				return nil // the header continues in the next piece
			}
			return fmt.Errorf("%w: %s: bad length", ErrSnapshotMalformed, p.Path)
		}
		if n == 0 || n > maxStateFile {
			return fmt.Errorf("%w: %s claims %d bytes", ErrSnapshotMalformed, p.Path, n)
		}
		s.want = int(n) + (len(s.buf) - len(rd.B))
	}
	switch {
	case len(s.buf) < s.want:
		return nil
	case len(s.buf) > s.want:
		return fmt.Errorf("%w: %s is longer than its %d bytes", ErrSnapshotMalformed, p.Path, s.want)
	}
	rd := &Reader{B: s.buf}
	rd.uvarint()
	err := r.checkState(p.Path, rd)
	s.buf, s.want = s.buf[:0], -1
	r.cur.path = "" // complete: a later piece of it is a second appearance
	return err
}

// checkState checks and stages the records of one complete state file.
func (r *Restore) checkState(path string, rd *Reader) error {
	s := &r.State
	if s.out == nil {
		f, err := os.OpenFile(filepath.Join(r.Dir, StagedStateKV), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
		s.out, s.w = f, bufio.NewWriterSize(f, 1<<16)
		s.spec = smt.NewSparseMerkleTrie(&trieNodes{}, sha256.New()).Spec()
	}
	// The layout first (a file that breaks it is malformed, whatever its
	// proofs), then every proof.
	type record struct {
		k, v []byte
		p    smt.SparseMerkleProof
	}
	var recs []record
	last := s.lastKey
	for len(rd.B) > 0 && rd.E == nil {
		rec := record{k: rd.Bytes(), v: rd.Bytes()}
		if nm := rd.Bytes(); len(nm) > 0 { // the library takes empty for a leaf
			rec.p.NonMembershipLeafData = nm
		}
		n := rd.Count(32)
		if n > 256 {
			rd.Fail("%d side nodes", n)
		}
		for i := 0; i < n && rd.E == nil; i++ {
			rec.p.SideNodes = append(rec.p.SideNodes, rd.Take(32))
		}
		if rd.E != nil {
			break
		}
		switch {
		case !Authenticated(rec.k):
			return fmt.Errorf("%w: %s holds key %q, which is outside the authenticated state", ErrSnapshotMalformed, path, rec.k)
		case last != nil && bytes.Compare(rec.k, last) <= 0:
			return fmt.Errorf("%w: %s: keys out of order", ErrSnapshotMalformed, path)
		case len(rec.k) > maxSnapshotKV || len(rec.v) > maxSnapshotKV:
			return fmt.Errorf("%w: %s: a record of %d bytes", ErrSnapshotMalformed, path, len(rec.k)+len(rec.v))
		}
		last = rec.k
		recs = append(recs, rec)
	}
	if err := rd.Done(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSnapshotMalformed, path, err)
	}
	for i := range recs {
		rec := &recs[i]
		if ok, _ := smt.VerifyProof(&rec.p, r.meta.StateRoot, rec.k, proof.TrieValue(rec.v), s.spec); !ok {
			return fmt.Errorf("%w: %w: %s: the value of %q is not the one under the trusted app hash", ErrSnapshotMismatch, ErrStateRoot, path, rec.k)
		}
	}
	for _, rec := range recs {
		if err := EncodeKV(s.w, rec.k, rec.v); err != nil {
			return fmt.Errorf("stele/fsm: restore: %w", err)
		}
	}
	if len(recs) > 0 {
		s.lastKey = bytes.Clone(recs[len(recs)-1].k)
	}
	return nil
}

// Close finishes the staged state records.
func (s *stateRestore) Close() error {
	if s.out == nil {
		return nil
	}
	err := s.w.Flush()
	if cerr := s.out.Close(); err == nil {
		err = cerr
	}
	s.out = nil
	if err != nil {
		return fmt.Errorf("stele/fsm: restore: %w", err)
	}
	return nil
}
