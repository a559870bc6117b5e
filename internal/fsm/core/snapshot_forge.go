package core

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// ForgeSnapshot turns the built snapshot s, in its own directory, into the
// snapshot a Byzantine peer would serve: alter is called with every
// authenticated key and value of its state files and returns the value to
// put there instead (the value itself to leave it), each with its honest
// proof; the chunk hashes and the manifest are computed afresh, so every
// chunk matches the forged metadata and the metadata carries the true app
// hash. It returns the forged snapshot; s must not be used afterwards.
//
// It exists for tests of state sync against lying peers: the broker calls
// it only in the test-only stelebyzantine build (STELE_BYZANTINE's
// forge-snapshots); nothing else does.
func ForgeSnapshot(s *Snapshot, alter func(key, value []byte) []byte) (*Snapshot, error) {
	m := s.M
	m.Files = append([]SnapFile(nil), m.Files...)
	for i, f := range m.Files {
		if !IsStateFileName(f.Path) {
			continue
		}
		path := filepath.Join(s.Root, FilesDir, filepath.FromSlash(f.Path))
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rd := &Reader{B: data}
		rd.uvarint()
		w := &Writer{}
		for len(rd.B) > 0 && rd.E == nil {
			k, v, nm := rd.Bytes(), rd.Bytes(), rd.Bytes()
			n := rd.Count(32)
			w.Bytes(k)
			w.Bytes(alter(k, v))
			w.Bytes(nm)
			w.Count(n)
			w.Raw(rd.Take(32 * n))
		}
		if err := rd.Done(); err != nil {
			return nil, fmt.Errorf("stele/fsm: forging %s: %w", f.Path, err)
		}
		out := append(binary.AppendUvarint(nil, uint64(len(w.B))), w.B...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return nil, err
		}
		m.Files[i].Size = int64(len(out))
	}
	forged := &Snapshot{Root: s.Root, M: m, Plan: planChunks(m.Files)}
	forged.Hashes = make([][32]byte, len(forged.Plan))
	forged.M.Chunks = nil
	for i, c := range forged.Plan {
		data, err := forged.readChunk(c)
		if err != nil {
			return nil, err
		}
		forged.Hashes[i] = sha256.Sum256(data)
		forged.M.Chunks = append(forged.M.Chunks, forged.Hashes[i][:])
	}
	forged.finish()
	if err := writeJSON(filepath.Join(s.Root, manifestFile), forged.M); err != nil {
		return nil, err
	}
	return forged, nil
}
