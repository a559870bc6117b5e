package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
)

// FuzzSnapshotStateFile mutates a real snapshot's state file (a small
// scenario's: topics, a table with its leaves, groups, offsets, an
// upgrade vote) and applies it, in a chunk matching its hash, to a
// Restore trusting the honest state root, as a Byzantine peer would serve
// it. Restore may refuse it, but must not panic, must not stage a record
// whose key or value the honest state does not hold, and must write
// nothing outside its staging directory.
func FuzzSnapshotStateFile(f *testing.F) {
	vs, keys := testValidators(f, 4)
	dir := f.TempDir()
	g := openVoting(f, dir, vs)
	blocks := scenario(f)[:12]
	blocks[2].txs = append(blocks[2].txs, tx(9000, upgradeVote(cluster.UpgradePlan{Height: 40, Version: 2, Name: "v2"}, keys[0])))
	applyRange(f, g, blocks, 1, len(blocks))
	s := takeSnapshot(f, g, filepath.Join(dir, "snap"), nil)
	g.Close()
	m, err := core.DecodeSnapshotMeta(s.Metadata())
	if err != nil {
		f.Fatal(err)
	}
	honest, err := os.ReadFile(filepath.Join(s.Root, core.FilesDir, filepath.FromSlash(core.StateFileName(0))))
	if err != nil {
		f.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Root, core.FilesDir, filepath.FromSlash(core.StateFileName(1)))); err == nil {
		f.Fatal("the scenario's state takes more than one file")
	}
	want := map[string]string{}
	if err := stagedState(f, honest, m, func(k, v []byte) { want[string(k)] = string(v) }); err != nil {
		f.Fatalf("the honest state file: %v", err)
	}
	for _, k := range []string{"u/vote/", "l/", "t/", "p/", "g/", "o/"} {
		if !hasPrefixKey(want, k) {
			f.Fatalf("the scenario's state has no %s key", k)
		}
	}
	f.Add(honest)
	f.Add(honest[:len(honest)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		err := stagedState(t, data, m, func(k, v []byte) {
			if w, ok := want[string(k)]; !ok || w != string(v) {
				t.Fatalf("staged %q = %x; the honest state holds %x (present %v)", k, v, w, ok)
			}
		})
		if err != nil && !errors.Is(err, core.ErrSnapshotMalformed) && !errors.Is(err, core.ErrSnapshotMismatch) {
			t.Fatalf("a mutated state file: %v, want ErrSnapshotMalformed or ErrSnapshotMismatch", err)
		}
	})
}

// stagedState applies a chunk of one state file, data, to a Restore of m
// in a fresh directory, and calls fn with every record it staged; it fails
// t if anything was written outside the staging directory.
func stagedState(t testing.TB, data []byte, m core.SnapshotMeta, fn func(k, v []byte)) error {
	t.Helper()
	root := t.TempDir()
	chunk := core.EncodeChunk([]core.Piece{{Path: core.StateFileName(0), Data: data}})
	m.Hashes = [][32]byte{sha256.Sum256(chunk)}
	r := core.StartRestore(assembled.Registry, filepath.Join(root, "staging"), m)
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	applyErr := r.Apply(0, chunk)
	if err := r.State.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "staging" {
			t.Fatalf("a state file wrote %s outside the staging directory", e.Name())
		}
	}
	staged, err := os.ReadFile(filepath.Join(r.Dir, core.StagedStateKV))
	if errors.Is(err, os.ErrNotExist) {
		return applyErr
	} else if err != nil {
		t.Fatal(err)
	}
	if err := core.DecodeKVs(bytes.NewReader(staged), func(k, v []byte) error { fn(k, v); return nil }); err != nil {
		t.Fatalf("the staged state does not decode: %v", err)
	}
	return applyErr
}

func hasPrefixKey(m map[string]string, prefix string) bool {
	for k := range m {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
