package core

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The encodings of a snapshot that travel between brokers. Everything a
// peer sends is checked: the metadata against the snapshot hash, each chunk
// against its hash in the metadata, and the chunks' contents (paths,
// offsets, key order) as they are applied.
//
//	metadata := u8 version | i64 height | bytes appHash
//	            | bytes digest | bytes stateRoot | bytes leavesRoot
//	            | count n | n × 32-byte chunk hash
//	hash     := SHA-256("stele/snapshot/v2" | u32 n | the n chunk hashes
//	            | u32-length-prefixed digest, stateRoot, leavesRoot)
//
// digest, stateRoot and leavesRoot are what appHash is made of
// (proof.AppHash); NewRestore checks them against the trusted app hash, so
// the state root the state files are proven under is trusted before the
// first chunk arrives (snapshot_state.go).
//
//	chunk    := count pieces | piece...
//	piece    := str path | uvarint offset | bytes data
//
// A snapshot is a list of files, each sent as pieces in order (a file's
// first piece has offset 0, each later one starts where the last ended,
// and no file appears twice). "state/<n>.kv" hold the authenticated keys
// of the metadata store with their proofs (snapshot_state.go), "meta.kv"
// the store's other keys, and "<dir>/..." the files of the module that
// registered dir (snapshotFiles, registry.go): "logs/<topic>-<partition>/<name>"
// the topics module's partition directories (topic_snapshot.go).
//
//	meta.kv := (bytes key | bytes value)*, keys strictly ascending
const snapshotMetaVersion = 2

// SnapshotFormat is the snapshot format this package writes and restores.
// Format 2 proves every authenticated value in its chunk (state files).
const SnapshotFormat uint32 = 2

// Sentinel errors of snapshots.
var (
	// ErrSnapshotMalformed means snapshot metadata or a chunk that does not
	// decode, names a path outside the layout, or breaks the piece order.
	ErrSnapshotMalformed = errors.New("stele/fsm: malformed snapshot")
	// ErrSnapshotMismatch means a snapshot whose metadata disagrees with
	// what was offered (height, chunk count, hash) or with the trusted app
	// hash, or whose restored state does not end at its height and app hash.
	ErrSnapshotMismatch = errors.New("stele/fsm: snapshot does not match")
	// ErrSnapshotFormat means a snapshot format this version cannot restore.
	ErrSnapshotFormat = errors.New("stele/fsm: unsupported snapshot format")
	// ErrChunkHash means a chunk whose bytes do not hash to the value in the
	// snapshot's metadata: whoever sent it sent something else.
	ErrChunkHash = errors.New("stele/fsm: snapshot chunk does not match its hash")
	// ErrSnapshotDamaged means a local snapshot whose files no longer
	// produce the chunks it was built with.
	ErrSnapshotDamaged = errors.New("stele/fsm: local snapshot damaged")
)

// Limits on what a peer's snapshot may make a restoring broker hold.
const (
	maxSnapshotChunks = 1 << 22
	maxSnapshotKV     = 64 << 20 // one key or value in meta.kv
	maxSnapshotPath   = 512
)

// MetaKVPath is the file of a snapshot that holds the metadata store.
const MetaKVPath = "meta.kv"

// SnapshotMeta is the decoded metadata of a snapshot.
type SnapshotMeta struct {
	Height                        int64
	AppHash                       []byte
	digest, StateRoot, leavesRoot []byte
	Hashes                        [][32]byte
}

func (m SnapshotMeta) Encode() []byte {
	w := &Writer{}
	w.U8(snapshotMetaVersion)
	w.I64(m.Height)
	w.Bytes(m.AppHash)
	w.Bytes(m.digest)
	w.Bytes(m.StateRoot)
	w.Bytes(m.leavesRoot)
	w.Count(len(m.Hashes))
	for _, h := range m.Hashes {
		w.Raw(h[:])
	}
	return w.B
}

func DecodeSnapshotMeta(b []byte) (SnapshotMeta, error) {
	r := &Reader{B: b}
	var m SnapshotMeta
	if v := r.U8(); v != snapshotMetaVersion && r.E == nil {
		return m, fmt.Errorf("%w: metadata version %d", ErrSnapshotMalformed, v)
	}
	m.Height = r.I64()
	m.AppHash = append([]byte(nil), r.Bytes()...)
	m.digest = r.BytesCopy()
	m.StateRoot = r.BytesCopy()
	m.leavesRoot = r.BytesCopy()
	n := r.Count(32)
	if n > maxSnapshotChunks {
		r.Fail("%d chunks", n)
	}
	for i := 0; i < n && r.E == nil; i++ {
		m.Hashes = append(m.Hashes, [32]byte(r.Take(32)))
	}
	if err := r.Done(); err != nil {
		return SnapshotMeta{}, fmt.Errorf("%w: metadata: %w", ErrSnapshotMalformed, err)
	}
	if m.Height <= 0 || n == 0 {
		return SnapshotMeta{}, fmt.Errorf("%w: metadata: height %d, %d chunks", ErrSnapshotMalformed, m.Height, n)
	}
	return m, nil
}

// snapshotHash is the hash that identifies a snapshot: over its chunk
// hashes and the parts of its app hash.
func snapshotHash(m SnapshotMeta) []byte {
	h := sha256.New()
	h.Write([]byte("stele/snapshot/v2"))
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(m.Hashes))))
	for _, c := range m.Hashes {
		h.Write(c[:])
	}
	for _, b := range [][]byte{m.digest, m.StateRoot, m.leavesRoot} {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
		h.Write(b)
	}
	return h.Sum(nil)
}

// Piece is a run of one file's bytes within a chunk.
type Piece struct {
	Path   string
	Offset int64
	Data   []byte
}

func EncodeChunk(pieces []Piece) []byte {
	w := &Writer{}
	w.Count(len(pieces))
	for _, p := range pieces {
		w.Str(p.Path)
		w.Uvarint(uint64(p.Offset))
		w.Bytes(p.Data)
	}
	return w.B
}

// DecodeChunk decodes a chunk; the data of the pieces aliases b.
func (g *Registry) DecodeChunk(b []byte) ([]Piece, error) {
	r := &Reader{B: b}
	n := r.Count(3)
	if n == 0 && r.E == nil {
		r.Fail("chunk without pieces")
	}
	pieces := make([]Piece, 0, n)
	for i := 0; i < n && r.E == nil; i++ {
		p := Piece{Path: r.Str()}
		off := r.uvarint()
		p.Data = r.Bytes()
		if r.E == nil && off > 1<<62 {
			r.Fail("offset %d", off)
		}
		p.Offset = int64(off)
		if r.E == nil {
			if err := g.CheckSnapshotPath(p.Path); err != nil {
				return nil, err
			}
		}
		pieces = append(pieces, p)
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: chunk: %w", ErrSnapshotMalformed, err)
	}
	return pieces, nil
}

// CheckSnapshotPath accepts only the paths a snapshot may hold: meta.kv,
// state/<8 digits>.kv, and under a module's directory (snapshotFiles) what
// that module's checkPath accepts (logs/<topic>-<partition>/<segment file
// or partition.metadata>, topic_snapshot.go).
func (g *Registry) CheckSnapshotPath(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: path %.100q: %s", ErrSnapshotMalformed, p, why)
	}
	if p == MetaKVPath || IsStateFileName(p) {
		return nil
	}
	if len(p) > maxSnapshotPath {
		return bad("too long")
	}
	dir, rest, _ := strings.Cut(p, "/")
	for _, s := range g.SnapshotFileSteps {
		if s.Dir == dir {
			if why := s.CheckPath(rest); why != "" {
				return bad(why)
			}
			return nil
		}
	}
	return bad("not meta.kv, a state file or in a module's directory")
}

// EncodeKV appends one meta.kv record.
func EncodeKV(w *bufio.Writer, k, v []byte) error {
	var buf [binary.MaxVarintLen64]byte
	for _, b := range [][]byte{k, v} {
		if _, err := w.Write(buf[:binary.PutUvarint(buf[:], uint64(len(b)))]); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// DecodeKVs reads meta.kv records from r and calls fn for each, checking
// that keys ascend strictly and that no length exceeds maxSnapshotKV.
func DecodeKVs(r io.Reader, fn func(k, v []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<16)
	var prev []byte
	first := true
	read := func() ([]byte, error) {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return nil, io.EOF // no byte: the end of the records
		}
		if err != nil {
			return nil, fmt.Errorf("%w: meta.kv: %w", ErrSnapshotMalformed, err)
		}
		if n > maxSnapshotKV {
			return nil, fmt.Errorf("%w: meta.kv: a length of %d bytes", ErrSnapshotMalformed, n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, fmt.Errorf("%w: meta.kv: truncated record", ErrSnapshotMalformed)
		}
		return b, nil
	}
	for {
		k, err := read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: meta.kv: key without a value", ErrSnapshotMalformed)
			}
			return err
		}
		if !first && bytes.Compare(k, prev) <= 0 {
			return fmt.Errorf("%w: meta.kv: keys out of order", ErrSnapshotMalformed)
		}
		first, prev = false, k
		if err := fn(k, v); err != nil {
			return err
		}
	}
}
