package fsm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// applyRange applies blocks[from-1:to] as heights from..to and returns the
// app hash after each.
func applyRange(t testing.TB, f *FSM, blocks []block, from, to int) [][]byte {
	t.Helper()
	var hashes [][]byte
	for h := from; h <= to; h++ {
		b := blocks[h-1]
		out, err := f.ApplyBlock(core.Block{Height: int64(h), TimeMs: b.time, Txs: b.txs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, out.AppHash)
	}
	settle(t, f)
	return hashes
}

// storeContents returns every key and value of f's metadata store.
func storeContents(t testing.TB, f *FSM) map[string]string {
	t.Helper()
	kv := map[string]string{}
	// The state trie's nodes are left out: a restored broker builds its
	// trie afresh, and an extension node keeps the path of the leaf that
	// made it in bits its digest does not cover, so the encodings of a
	// trie grown block by block and of one built at once can differ while
	// their nodes, digests and root are the same.
	if err := f.Store.Scan(nil, func(k, v []byte) error {
		if !bytes.HasPrefix(k, []byte(core.TrieNodePrefix)) {
			kv[string(k)] = string(v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return kv
}

// sameLogFiles fails unless the data directories a and b hold the same log
// files with the same bytes.
func sameLogFiles(t testing.TB, a, b string) {
	t.Helper()
	fa, fb := logFiles(t, a), logFiles(t, b)
	var na, nb []string
	for n := range fa {
		na = append(na, n)
	}
	for n := range fb {
		nb = append(nb, n)
	}
	sort.Strings(na)
	sort.Strings(nb)
	if fmt.Sprint(na) != fmt.Sprint(nb) {
		t.Fatalf("log files differ:\n%v\n%v", na, nb)
	}
	for _, n := range na {
		if !bytes.Equal(fa[n], fb[n]) {
			t.Fatalf("%s differs (%d vs %d bytes)", n, len(fa[n]), len(fb[n]))
		}
	}
}

// takeSnapshot captures f's committed state and builds it.
func takeSnapshot(t testing.TB, f *FSM, dir string, prev *core.Snapshot) *core.Snapshot {
	t.Helper()
	c, err := f.CaptureSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := core.BuildSnapshot(context.Background(), c, prev)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func offerOf(s *core.Snapshot) core.SnapshotOffer {
	return core.SnapshotOffer{Height: s.Height(), Format: s.Format(), Chunks: s.Chunks(), Hash: s.Hash(), Metadata: s.Metadata(), AppHash: s.AppHash()}
}

// restoreInto restores s, chunk by chunk as a peer would send it, into f.
func restoreInto(t testing.TB, f *FSM, s *core.Snapshot) {
	t.Helper()
	if err := tryRestore(t, f, s); err != nil {
		t.Fatal(err)
	}
}

// tryRestore applies every chunk of s, each of which must match its hash,
// and returns what RestoreSnapshot says of the whole.
func tryRestore(t testing.TB, f *FSM, s *core.Snapshot) error {
	t.Helper()
	r, err := NewRestore(filepath.Join(t.TempDir(), "staging"), offerOf(s))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if i, err := applyChunks(t, r, s); err != nil {
		t.Fatalf("chunk %d: %v", i, err)
	}
	return f.RestoreSnapshot(r)
}

// applyChunks applies s's chunks to r until one is refused, and returns
// its index and the error (nil after the last).
func applyChunks(t testing.TB, r *core.Restore, s *core.Snapshot) (uint32, error) {
	t.Helper()
	for i := uint32(0); i < s.Chunks(); i++ {
		c, err := s.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Apply(i, c); err != nil {
			return i, err
		}
	}
	return s.Chunks(), nil
}

// TestSnapshotRestoresStateAtHeight: a snapshot captured at height H, and
// built only after later blocks have appended to, compacted and deleted the
// very files it pinned, restores into an empty data directory the state a
// broker that applied blocks 1..H has: byte-identical logs, the same
// metadata store, height and app hash. The restored broker then applies the
// later blocks to the same state as the one that never stopped.
func TestSnapshotRestoresStateAtHeight(t *testing.T) {
	blocks := scenario(t)
	const h = 22 // "doomed" exists with data; it is deleted at 23
	srcDir, refDir, dstDir := t.TempDir(), t.TempDir(), t.TempDir()
	src, ref, dst := open(t, srcDir), open(t, refDir), open(t, dstDir)
	defer src.Close()
	defer ref.Close()
	defer func() { dst.Close() }() // dst is reopened below

	want := applyRange(t, ref, blocks, 1, h)
	applyRange(t, src, blocks, 1, h)
	snapDir := filepath.Join(srcDir, "snapshots", "h22")
	capture, err := src.CaptureSnapshot(snapDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.CaptureSnapshot(snapDir); err == nil {
		t.Errorf("a second capture into the same directory succeeded")
	}
	later := applyRange(t, src, blocks, h+1, len(blocks))
	if _, err := os.Stat(filepath.Join(srcDir, "logs", "doomed-1")); !os.IsNotExist(err) {
		t.Fatalf("test setup: the deleted topic's files are still there (%v)", err)
	}
	s, err := core.BuildSnapshot(context.Background(), capture, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Height() != h || !bytes.Equal(s.AppHash(), want[h-1]) {
		t.Fatalf("snapshot at height %d hash %X, want %d %X", s.Height(), s.AppHash(), h, want[h-1])
	}

	restoreInto(t, dst, s)
	if gotH, gotHash := dst.Info(); gotH != h || !bytes.Equal(gotHash, want[h-1]) {
		t.Fatalf("restored state at height %d hash %X, want %d %X", gotH, gotHash, h, want[h-1])
	}
	sameLogFiles(t, refDir, dstDir)
	if a, b := storeContents(t, ref), storeContents(t, dst); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("metadata stores differ:\n%v\n%v", a, b)
	}
	if p := dst.View().Partition("doomed", 1); p == nil || p.HighWatermark() != 2 {
		t.Fatalf("restored view lacks doomed-1 with its 2 records")
	}
	if got, want := dst.Groups().Groups(), ref.Groups().Groups(); len(got) != 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("restored groups %+v, want the 2 groups %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dstDir, "snapshots")); !os.IsNotExist(err) {
		t.Errorf("restore left files beside the data: %v", err)
	}

	// The restored broker goes on like the others, and reopens as well.
	got := applyRange(t, dst, blocks, h+1, len(blocks))
	for i := range got {
		if !bytes.Equal(got[i], later[i]) {
			t.Fatalf("height %d after restore: hash differs", h+1+i)
		}
	}
	sameLogFiles(t, srcDir, dstDir)
	dst.Close()
	dst = open(t, dstDir)
	if gotH, _ := dst.Info(); gotH != int64(len(blocks)) {
		t.Fatalf("reopened restored state at height %d", gotH)
	}
}

// TestSnapshotsAgreeAcrossBrokers: brokers that applied the same blocks
// build the same snapshot (hash and metadata), so a restoring broker can
// fetch its chunks from any of them; a snapshot reopened from disk is the
// one built.
func TestSnapshotsAgreeAcrossBrokers(t *testing.T) {
	blocks := scenario(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := open(t, dirA), open(t, dirB)
	defer a.Close()
	defer b.Close()
	applyRange(t, a, blocks, 1, len(blocks))
	applyRange(t, b, blocks, 1, len(blocks))
	sa := takeSnapshot(t, a, filepath.Join(dirA, "snap"), nil)
	sb := takeSnapshot(t, b, filepath.Join(dirB, "snap"), nil)
	if !bytes.Equal(sa.Hash(), sb.Hash()) || !bytes.Equal(sa.Metadata(), sb.Metadata()) {
		t.Fatalf("two brokers built different snapshots at the same height")
	}
	re, err := core.OpenSnapshot(sa.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(re.Hash(), sa.Hash()) || re.Chunks() != sa.Chunks() || re.Size() != sa.Size() {
		t.Fatalf("reopened snapshot differs from the one built")
	}
	if _, err := core.OpenSnapshot(t.TempDir()); err == nil {
		t.Errorf("a directory without a manifest opened as a snapshot")
	}
}

// TestSnapshotChunkChecks: a chunk whose bytes differ from its hash is
// refused without writing anything (and the right one is then accepted);
// chunks out of order, metadata that does not match the offer, an app hash
// other than the trusted one and an unknown format are refused; a restore
// into a state that is not empty is refused.
func TestSnapshotChunkChecks(t *testing.T) {
	blocks := scenario(t)
	srcDir := t.TempDir()
	src := open(t, srcDir)
	defer src.Close()
	applyRange(t, src, blocks, 1, 10)
	s := takeSnapshot(t, src, filepath.Join(srcDir, "snap"), nil)
	o := offerOf(s)

	for name, bad := range map[string]func(*core.SnapshotOffer){
		"format":   func(o *core.SnapshotOffer) { o.Format = 99 },
		"height":   func(o *core.SnapshotOffer) { o.Height++ },
		"chunks":   func(o *core.SnapshotOffer) { o.Chunks++ },
		"hash":     func(o *core.SnapshotOffer) { o.Hash = append([]byte{1}, o.Hash[1:]...) },
		"app hash": func(o *core.SnapshotOffer) { o.AppHash = make([]byte, 32) },
		"metadata": func(o *core.SnapshotOffer) { o.Metadata = o.Metadata[:len(o.Metadata)-1] },
	} {
		bo := o
		bad(&bo)
		if _, err := NewRestore(filepath.Join(t.TempDir(), "staging"), bo); err == nil {
			t.Errorf("offer with a wrong %s accepted", name)
		}
	}

	staging := filepath.Join(t.TempDir(), "staging")
	r, err := NewRestore(staging, o)
	if err != nil {
		t.Fatal(err)
	}
	c0, err := s.Chunk(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(1, c0); !errors.Is(err, core.ErrChunkOrder) {
		t.Errorf("chunk 1 before chunk 0: %v, want ErrChunkOrder", err)
	}
	forged := append([]byte(nil), c0...)
	forged[len(forged)-1] ^= 1
	if err := r.Apply(0, forged); !errors.Is(err, core.ErrChunkHash) {
		t.Fatalf("forged chunk: %v, want ErrChunkHash", err)
	}
	if r.Next() != 0 {
		t.Fatalf("a refused chunk advanced the restore")
	}
	if entries, _ := os.ReadDir(staging); len(entries) != 0 {
		t.Fatalf("a refused chunk wrote %d entries", len(entries))
	}
	for i := uint32(0); i < s.Chunks(); i++ {
		c, err := s.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Apply(i, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.RestoreSnapshot(r); !errors.Is(err, core.ErrNotEmpty) {
		t.Errorf("restore into a state at height 10: %v, want ErrNotEmpty", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("Close left the staging directory")
	}
}

// TestSnapshotMalformedChunks: chunks that match their hashes (the snapshot
// itself is bad) but break the layout are refused as ErrSnapshotMalformed.
func TestSnapshotMalformedChunks(t *testing.T) {
	for name, pieces := range map[string][]core.Piece{
		"escape":        {{Path: "logs/t-0/../../x", Data: []byte("x")}},
		"absolute":      {{Path: "/etc/passwd", Data: []byte("x")}},
		"unknown file":  {{Path: "logs/t-0/evil.sh", Data: []byte("x")}},
		"bad partition": {{Path: "logs/t-01/00000000000000000000.log"}},
		"gap":           {{Path: "meta.kv", Data: []byte{1}}, {Path: "meta.kv", Offset: 2, Data: []byte{1}}},
		"late start":    {{Path: "meta.kv", Offset: 5, Data: []byte{1}}},
		"twice":         {{Path: "meta.kv"}, {Path: "logs/t-0/partition.metadata"}, {Path: "meta.kv"}},
		"state name":    {{Path: "state/1.kv", Data: stateFile(t, "t/x", "v")}},
		"state short":   {{Path: "state/00000000.kv", Data: stateFile(t, "t/x", "v")[:5]}, {Path: "meta.kv"}},
		"state long":    {{Path: "state/00000000.kv", Data: append(stateFile(t, "t/x", "v"), 0)}},
		"state outside": {{Path: "state/00000000.kv", Data: stateFile(t, "k/x", "v")}},
		"state order":   {{Path: "state/00000000.kv", Data: stateFile(t, "t/y", "v", "t/x", "v")}},
		"state garbage": {{Path: "state/00000000.kv", Data: []byte{3, 1, 2, 3}}},
		"state empty":   {{Path: "state/00000000.kv", Data: []byte{0}}},
	} {
		chunk := core.EncodeChunk(pieces)
		r := core.StartRestore(assembled.Registry, t.TempDir(), core.SnapshotMeta{Height: 1, StateRoot: core.EmptyStateRoot(), Hashes: [][32]byte{sha256.Sum256(chunk)}})
		if err := r.Apply(0, chunk); !errors.Is(err, core.ErrSnapshotMalformed) {
			t.Errorf("%s: %v, want ErrSnapshotMalformed", name, err)
		}
		r.Close()
	}
}

// stateFile encodes a state file of the given keys and values, each with
// an empty proof (which proves nothing under any root but the empty one).
func stateFile(t testing.TB, kv ...string) []byte {
	t.Helper()
	w := &core.Writer{}
	for i := 0; i+1 < len(kv); i += 2 {
		w.Bytes([]byte(kv[i]))
		w.Bytes([]byte(kv[i+1]))
		w.Bytes(nil)
		w.Count(0)
	}
	return append(binary.AppendUvarint(nil, uint64(len(w.B))), w.B...)
}

// TestSnapshotBorrowsUnchangedChunks: a large segment that did not change
// between two snapshots is not read again (its chunk hashes come from the
// previous snapshot, proven here by planting a wrong one), and serving a
// chunk checks it, so the planted hash is caught as damage.
func TestSnapshotBorrowsUnchangedChunks(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	defer f.Close()
	var blocks []block
	blocks = append(blocks, block{time: t0, txs: [][]byte{tx(1, topics.CreateTopic{Name: "big", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "segment.bytes", Value: "1200000"}}})}})
	for i := 1; i <= 35; i++ { // 55 KB each: a segment seals every 21 batches
		blocks = append(blocks, block{time: t0 + int64(i), txs: [][]byte{tx(100+i, topics.Produce{Topic: "big", Records: batch(t, t0, record.CodecNone, "b", 500)})}})
	}
	applyRange(t, f, blocks, 1, 26)
	if segs := f.View().Partition("big", 0).Log.Segments(); len(segs) < 2 || segs[0].Size <= core.PackBytes {
		t.Fatalf("test setup: want a sealed segment over %d bytes, have %+v", core.PackBytes, segs)
	}
	s1 := takeSnapshot(t, f, filepath.Join(dir, "s1"), nil)
	applyRange(t, f, blocks, 27, len(blocks))
	borrowed := -1
	for i, c := range s1.Plan {
		if len(c) == 1 && s1.M.Files[c[0].File].Size > core.PackBytes {
			borrowed = i
			s1.Hashes[i] = sha256.Sum256([]byte("planted"))
			break
		}
	}
	if borrowed < 0 {
		t.Fatalf("test setup: no large file in the first snapshot")
	}
	s2 := takeSnapshot(t, f, filepath.Join(dir, "s2"), s1)
	fresh := takeSnapshot(t, f, filepath.Join(dir, "s3"), nil)
	if s2.Hashes[borrowed] != s1.Hashes[borrowed] {
		t.Fatalf("chunk %d was read again instead of borrowed", borrowed)
	}
	if _, err := s2.Chunk(uint32(borrowed)); !errors.Is(err, core.ErrSnapshotDamaged) {
		t.Errorf("serving a chunk with a wrong hash: %v, want ErrSnapshotDamaged", err)
	}
	for i := range fresh.Hashes {
		if i != borrowed && fresh.Hashes[i] != s2.Hashes[i] {
			t.Errorf("chunk %d: borrowed build and fresh build differ", i)
		}
	}
	// A file of a snapshot that loses bytes is damage too.
	if err := os.Truncate(filepath.Join(fresh.Dir(), core.FilesDir, core.MetaKVPath), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Chunk(0); !errors.Is(err, core.ErrSnapshotDamaged) {
		t.Errorf("serving a truncated file: %v, want ErrSnapshotDamaged", err)
	}
}

// FuzzSnapshotChunk feeds arbitrary bytes to the decoders of what peers
// send: metadata, chunks (applied to a staging directory as if their hash
// matched) and meta.kv. Nothing may panic or write outside the staging
// directory.
func FuzzSnapshotChunk(f *testing.F) {
	f.Add(core.EncodeChunk([]core.Piece{{Path: "meta.kv", Data: []byte{1, 'k', 1, 'v'}}, {Path: "logs/t-0/00000000000000000000.log"}}))
	f.Add(core.EncodeChunk([]core.Piece{{Path: "logs/a.b-12/partition.metadata", Offset: 3, Data: []byte("x")}}))
	f.Add(core.SnapshotMeta{Height: 3, AppHash: []byte{1, 2}, Hashes: [][32]byte{{1}, {2}}}.Encode())
	f.Add(core.EncodeChunk([]core.Piece{{Path: "state/00000000.kv", Data: stateFile(f, "t/x", "v", "t/y", "w")}}))
	f.Add(core.EncodeChunk([]core.Piece{{Path: "state/00000000.kv", Data: stateFile(f, "t/x", "v")[:3]}, {Path: "state/00000000.kv", Offset: 3, Data: stateFile(f, "t/x", "v")[3:]}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = core.DecodeSnapshotMeta(data)
		_ = core.DecodeKVs(bytes.NewReader(data), func(k, v []byte) error { return nil })
		root := t.TempDir()
		r := core.StartRestore(assembled.Registry, filepath.Join(root, "staging"), core.SnapshotMeta{Height: 1, StateRoot: core.EmptyStateRoot(), Hashes: [][32]byte{sha256.Sum256(data)}})
		_ = r.Apply(0, data)
		_ = r.CloseFile()
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "staging" {
				t.Fatalf("a chunk wrote %s outside the staging directory", e.Name())
			}
		}
	})
}

// BenchmarkCaptureSnapshot measures the applier's stall at a snapshot
// height: 100 partitions of a few segments each.
func BenchmarkCaptureSnapshot(b *testing.B) {
	dir := b.TempDir()
	f := open(b, dir)
	defer f.Close()
	blocks := []block{{time: t0, txs: [][]byte{tx(1, topics.CreateTopic{Name: "many", Partitions: 100, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "segment.bytes", Value: "20000"}}})}}}
	for i := 1; i <= 20; i++ {
		var txs [][]byte
		for p := int32(0); p < 100; p++ {
			txs = append(txs, tx(1000*i+int(p), topics.Produce{Topic: "many", Partition: p, Records: batch(b, t0, record.CodecNone, "k", 40)}))
		}
		blocks = append(blocks, block{time: t0 + int64(i), txs: txs})
	}
	applyRange(b, f, blocks, 1, len(blocks))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d := filepath.Join(dir, "snapshots", fmt.Sprint(i))
		c, err := f.CaptureSnapshot(d)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Release()
		os.RemoveAll(d)
		b.StartTimer()
	}
}

// TestSnapshotWithoutTopics: a state with no partition (a new cluster
// before its first topic) snapshots and restores too. It once failed
// ("files/meta.kv: no such file or directory"), so such a cluster never
// offered a snapshot and never pruned its blocks.
func TestSnapshotWithoutTopics(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	src, dst := open(t, srcDir), open(t, dstDir)
	defer src.Close()
	defer dst.Close()
	for h := int64(1); h <= 3; h++ {
		if _, err := src.ApplyBlock(core.Block{Height: h, TimeMs: 1_700_000_000_000 + h}); err != nil {
			t.Fatal(err)
		}
		if _, err := src.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s := takeSnapshot(t, src, filepath.Join(srcDir, "snapshots", "h3"), nil)
	restoreInto(t, dst, s)
	if dst.Height != 3 || !bytes.Equal(dst.AppHash, src.AppHash) {
		t.Fatalf("restored height %d app hash %x, want 3 %x", dst.Height, dst.AppHash, src.AppHash)
	}
}

// TestSnapshotFromByzantinePeer: a peer serves a snapshot of a state it
// altered (one committed offset), with chunk hashes that match what it
// sends and the true app hash. The restoring broker refuses the chunk that
// holds the altered value as it arrives, because its proof does not lead
// to the trusted state root (ErrStateRoot), leaving its own state empty;
// the honest peer's snapshot of the same height restores.
// (Issue 16, "State sync that trusts no peer".)
func TestSnapshotFromByzantinePeer(t *testing.T) {
	blocks := scenario(t)
	honestDir, liarDir := t.TempDir(), t.TempDir()
	honest, liar := open(t, honestDir), open(t, liarDir)
	defer honest.Close()
	defer liar.Close()
	want := applyRange(t, honest, blocks, 1, 12)
	applyRange(t, liar, blocks, 1, 12)

	key := groups.OffsetKey(groups.OffsetRef{Group: "audit", Topic: "orders", Partition: 0})
	v, ok, err := liar.Store.Get(key)
	if err != nil || !ok {
		t.Fatalf("the scenario's committed offset of audit/orders-0: %v %v", ok, err)
	}
	v[8]++ // the low byte of the offset (after the format byte)
	b := liar.Store.NewBatch()
	b.Set(key, v)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}

	bad := takeSnapshot(t, liar, filepath.Join(liarDir, "snap"), nil)
	if !bytes.Equal(bad.AppHash(), want[11]) {
		t.Fatalf("the liar's snapshot claims app hash %X, the trusted one is %X", bad.AppHash(), want[11])
	}
	dst := open(t, t.TempDir())
	defer dst.Close()
	// Every chunk matches its hash: the lie is in the state, and the chunk
	// that carries it is refused.
	if i, err := restoreChunks(t, bad); !errors.Is(err, core.ErrStateRoot) || !errors.Is(err, core.ErrSnapshotMismatch) || !chunkHolds(t, bad, i, key) {
		t.Fatalf("restoring an altered state: chunk %d: %v, want ErrStateRoot at the chunk holding %q", i, err, key)
	}
	if h, _ := dst.Info(); h != 0 || dst.Groups().Group("audit") != nil {
		t.Fatalf("a refused snapshot left state behind (height %d)", h)
	}

	good := takeSnapshot(t, honest, filepath.Join(honestDir, "snap"), nil)
	restoreInto(t, dst, good)
	if h, hash := dst.Info(); h != 12 || !bytes.Equal(hash, want[11]) {
		t.Fatalf("the honest snapshot restored to height %d hash %X", h, hash)
	}
	if o := dst.Groups().Group("audit").Offsets["orders"][0]; o.Offset != 3 {
		t.Fatalf("restored committed offset %d, want 3", o.Offset)
	}
}

// restoreChunks applies s's chunks to a fresh Restore until one is refused,
// and returns its index and the error (nil after the last).
func restoreChunks(t testing.TB, s *core.Snapshot) (uint32, error) {
	t.Helper()
	r, err := NewRestore(filepath.Join(t.TempDir(), "staging"), offerOf(s))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return applyChunks(t, r, s)
}

// chunkHolds reports whether chunk i of s carries key in a state file.
func chunkHolds(t testing.TB, s *core.Snapshot, i uint32, key []byte) bool {
	t.Helper()
	if i >= s.Chunks() {
		return false
	}
	c, err := s.Chunk(i)
	if err != nil {
		t.Fatal(err)
	}
	pieces, err := assembled.DecodeChunk(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pieces {
		if core.IsStateFileName(p.Path) && bytes.Contains(p.Data, key) {
			return true
		}
	}
	return false
}

// TestSnapshotOmittingState: a peer serves a snapshot whose state leaves
// one committed offset out. Every value it sends proves, so every chunk is
// taken; the omission shows when the whole is checked (ErrStateRoot), and
// nothing of it is used.
func TestSnapshotOmittingState(t *testing.T) {
	blocks := scenario(t)
	dir := t.TempDir()
	liar := open(t, dir)
	defer liar.Close()
	applyRange(t, liar, blocks, 1, 12)
	key := groups.OffsetKey(groups.OffsetRef{Group: "audit", Topic: "orders", Partition: 0})
	b := liar.Store.NewBatch()
	b.Delete(key) // behind the trie's back: its root still holds the key
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	bad := takeSnapshot(t, liar, filepath.Join(dir, "snap"), nil)
	if i, err := restoreChunks(t, bad); err != nil {
		t.Fatalf("chunk %d of a snapshot whose every value proves: %v", i, err)
	}
	dst := open(t, t.TempDir())
	defer dst.Close()
	if err := tryRestore(t, dst, bad); !errors.Is(err, core.ErrStateRoot) {
		t.Fatalf("restoring a state with a key left out: %v, want ErrStateRoot", err)
	}
	if h, _ := dst.Info(); h != 0 {
		t.Fatalf("a refused snapshot left state behind (height %d)", h)
	}
}

// TestSnapshotStateOutsideItsFile: an authenticated key smuggled into
// meta.kv, where no proof covers it, is refused.
func TestSnapshotStateOutsideItsFile(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := core.EncodeKV(w, []byte("o/x\x00y\x00\x00\x00\x00\x00"), []byte{1}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	chunk := core.EncodeChunk([]core.Piece{{Path: core.MetaKVPath, Data: buf.Bytes()}})
	dir := t.TempDir()
	r := core.StartRestore(assembled.Registry, filepath.Join(dir, "staging"), core.SnapshotMeta{Height: 1, StateRoot: core.EmptyStateRoot(), Hashes: [][32]byte{sha256.Sum256(chunk)}})
	defer r.Close()
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(0, chunk); err != nil {
		t.Fatal(err)
	}
	if err := r.StageStore(); !errors.Is(err, core.ErrSnapshotMalformed) {
		t.Fatalf("an authenticated key in meta.kv: %v, want ErrSnapshotMalformed", err)
	}
}
