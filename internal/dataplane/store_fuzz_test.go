package dataplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzStoreOpen writes arbitrary bytes as the store's only segment (and,
// split, as a sealed segment followed by the last one): OpenStore must not
// fail, panic or hang; every batch it indexes must read back as a payload
// whose SHA-256 is its digest; it must take a Put; and reopening must find
// the same batches.
//
//	go test -run '^$' -fuzz FuzzStoreOpen -fuzztime 30s ./internal/dataplane/
//
// (TMPDIR=/dev/shm runs it several times faster: each input is fsynced.)
func FuzzStoreOpen(f *testing.F) {
	valid := append(append(storeRecord([]byte("first batch"), 1), storeRecord(bytes.Repeat([]byte{7}, 300), 2)...),
		storeRecord([]byte("x"), -5)...)
	f.Add(valid, uint16(0))
	f.Add(valid, uint16(len(storeRecord([]byte("first batch"), 1))))
	f.Add(valid[:len(valid)-3], uint16(0))
	f.Add(valid[:70], uint16(0))
	flipped := bytes.Clone(valid)
	flipped[60] ^= 1
	f.Add(flipped, uint16(100))
	huge := bytes.Clone(valid[:storeOverhead])
	binary.BigEndian.PutUint32(huge[4:], MaxStoredBatchBytes)
	f.Add(huge, uint16(0))
	f.Add([]byte{}, uint16(0))
	f.Add(bytes.Repeat([]byte("SBT1"), 40), uint16(17))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		dir := t.TempDir()
		files := map[string][]byte{"00000000000000000000.batch": data}
		if s := int(split); s > 0 && s < len(data) {
			files = map[string][]byte{"00000000000000000000.batch": data[:s], "00000000000000000003.batch": data[s:]}
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s, err := OpenStore(dir, StoreOptions{SegmentBytes: 1 << 10})
		if err != nil {
			t.Fatalf("OpenStore: %v", err)
		}
		defer s.Close()
		s.mu.RLock()
		var indexed [][32]byte
		for d := range s.mu.index {
			indexed = append(indexed, d)
		}
		s.mu.RUnlock()
		for _, d := range indexed {
			p, err := s.Get(d)
			if err != nil {
				t.Fatalf("Get of an indexed batch: %v", err)
			}
			if sha256.Sum256(p) != d {
				t.Fatal("Get returned a payload that does not match its digest")
			}
		}
		probe := []byte("a batch put after recovery")
		d, err := s.Put(probe, 9)
		if err != nil {
			t.Fatalf("Put after recovery: %v", err)
		}
		mustGet(t, s, d, probe)
		want := s.Stats()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTestStore(t, dir, StoreOptions{SegmentBytes: 1 << 10})
		if st := s.Stats(); st != want {
			t.Fatalf("reopened: %+v, before: %+v", st, want)
		}
		for _, d := range append(indexed, d) {
			if !s.Has(d) {
				t.Fatal("a batch served before reopening is gone")
			}
		}
	})
}
