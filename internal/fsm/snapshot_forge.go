package fsm

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
	m := s.m
	m.Files = append([]snapFile(nil), m.Files...)
	for i, f := range m.Files {
		if !isStateFileName(f.Path) {
			continue
		}
		path := filepath.Join(s.root, filesDir, filepath.FromSlash(f.Path))
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rd := &reader{b: data}
		rd.uvarint()
		w := &writer{}
		for len(rd.b) > 0 && rd.e == nil {
			k, v, nm := rd.bytes(), rd.bytes(), rd.bytes()
			n := rd.count(32)
			w.bytes(k)
			w.bytes(alter(k, v))
			w.bytes(nm)
			w.count(n)
			w.raw(rd.take(32 * n))
		}
		if err := rd.done(); err != nil {
			return nil, fmt.Errorf("stele/fsm: forging %s: %w", f.Path, err)
		}
		out := append(binary.AppendUvarint(nil, uint64(len(w.b))), w.b...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return nil, err
		}
		m.Files[i].Size = int64(len(out))
	}
	forged := &Snapshot{root: s.root, m: m, plan: planChunks(m.Files)}
	forged.hashes = make([][32]byte, len(forged.plan))
	forged.m.Chunks = nil
	for i, c := range forged.plan {
		data, err := forged.readChunk(c)
		if err != nil {
			return nil, err
		}
		forged.hashes[i] = sha256.Sum256(data)
		forged.m.Chunks = append(forged.m.Chunks, forged.hashes[i][:])
	}
	forged.finish()
	if err := writeJSON(filepath.Join(s.root, manifestFile), forged.m); err != nil {
		return nil, err
	}
	return forged, nil
}
