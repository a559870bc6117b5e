package dataplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// storeRecord encodes one record the way the layout in store.go documents
// it, independently of the store's own encoder.
func storeRecord(payload []byte, height int64) []byte {
	b := unpaddedRecord(payload, height)
	return append(b, make([]byte, alignUp(int64(len(b)))-int64(len(b)))...)
}

// unpaddedRecord is payload's record without the padding after it.
func unpaddedRecord(payload []byte, height int64) []byte { return magicRecord("SBT2", payload, height) }

// v1Record is payload's record as written before records were aligned
// and their CRC covered the header only: magic SBT1, a CRC of header and
// payload, no padding.
func v1Record(payload []byte, height int64) []byte { return magicRecord("SBT1", payload, height) }

// magicRecord is payload's unpadded record with magic, its CRC computed as
// that magic's records have it.
func magicRecord(magic string, payload []byte, height int64) []byte {
	d := sha256.Sum256(payload)
	b := []byte(magic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = binary.BigEndian.AppendUint64(b, uint64(height))
	b = append(b, d[:]...)
	b = append(b, payload...)
	covered := b[:storeHeaderSize] // SBT2: the header
	if magic == "SBT1" {
		covered = b // header and payload
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(covered, crc32.MakeTable(crc32.Castagnoli)))
}

// testPayload returns a distinct payload of n bytes for i.
func testPayload(i, n int) []byte {
	b := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, n/3+1)[:n]
	copy(b, fmt.Sprintf("batch %d;", i))
	return b
}

func openTestStore(t testing.TB, dir string, opts StoreOptions) *Store {
	t.Helper()
	s, err := OpenStore(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustPut(t testing.TB, s *Store, payload []byte, height int64) [32]byte {
	t.Helper()
	d, err := s.Put(payload, height)
	if err != nil {
		t.Fatal(err)
	}
	if d != sha256.Sum256(payload) {
		t.Fatalf("Put returned %x, want the payload's SHA-256", d)
	}
	return d
}

func mustGet(t testing.TB, s *Store, d [32]byte, want []byte) {
	t.Helper()
	got, err := s.Get(d)
	if err != nil {
		t.Fatalf("Get(%x): %v", d[:4], err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%x) returned %d bytes, not the %d stored", d[:4], len(got), len(want))
	}
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.batch"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// holdSyncs makes every group commit leader of s wait, after it took the
// state to sync, until release is called (at the latest when the test ends,
// so that a failing test does not leave Close waiting). entered receives
// when the first leader waits.
func holdSyncs(t testing.TB, s *Store) (release func(), entered <-chan struct{}) {
	ch, in := make(chan struct{}), make(chan struct{}, 1)
	release = sync.OnceFunc(func() { close(ch) })
	t.Cleanup(release)
	s.syncHook = func() {
		select {
		case in <- struct{}{}:
		default:
		}
		<-ch
	}
	return release, in
}

// receive waits for ch with a deadline.
func receive(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitAppended waits until n records have been appended to s.
func waitAppended(t testing.TB, s *Store, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.wmu.Lock()
		appended := s.lastTicket
		s.wmu.Unlock()
		if appended == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records appended, want %d", appended, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStorePutGet(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	p := testPayload(1, 1000)
	d := mustPut(t, s, p, 7)
	mustGet(t, s, d, p)
	if !s.Has(d) {
		t.Fatal("Has is false for a stored batch")
	}
	// The file holds exactly the documented record.
	files := segmentFiles(t, dir)
	if len(files) != 1 || filepath.Base(files[0]) != "00000000000000000000.batch" {
		t.Fatalf("segment files %v", files)
	}
	if b, _ := os.ReadFile(files[0]); !bytes.Equal(b, storeRecord(p, 7)) {
		t.Fatal("the segment does not hold the record as documented")
	}

	st := s.Stats()
	if d2 := mustPut(t, s, p, 3); d2 != d || s.Stats() != st {
		t.Fatalf("a second Put of the same payload changed the store: %+v then %+v", st, s.Stats())
	}
	if st != (StoreStats{Batches: 1, Bytes: alignUp(int64(len(p) + storeOverhead)), Segments: 1}) {
		t.Fatalf("stats %+v", st)
	}

	missing := sha256.Sum256([]byte("never stored"))
	if _, err := s.Get(missing); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent digest: %v, want ErrNotFound", err)
	}
	if s.Has(missing) {
		t.Fatal("Has is true for an absent digest")
	}
	if _, err := s.Put(nil, 1); !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("Put(empty): %v", err)
	}
	if _, err := s.Put(make([]byte, MaxStoredBatchBytes+1), 1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put(too large): %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Put(testPayload(2, 10), 1); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := s.Get(d); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if s.Has(d) {
		t.Fatal("Has after Close")
	}
}

func TestStoreOptionsValidate(t *testing.T) {
	if err := (StoreOptions{SegmentBytes: -1}).Validate(); !errors.Is(err, ErrStoreConfig) {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := OpenStore(t.TempDir(), StoreOptions{SegmentBytes: -1}); !errors.Is(err, ErrStoreConfig) {
		t.Fatalf("OpenStore: %v", err)
	}
	if err := (StoreOptions{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRollPruneReopen rolls segments, prunes by height and reopens.
func TestStoreRollPruneReopen(t *testing.T) {
	dir := t.TempDir()
	// 300-byte payloads make 352-byte records padded to 4096 bytes: two per
	// 8 KiB segment.
	s := openTestStore(t, dir, StoreOptions{SegmentBytes: 2 * storeAlign})
	var ds [][32]byte
	var ps [][]byte
	for i := range 10 {
		p := testPayload(i, 300)
		ps, ds = append(ps, p), append(ds, mustPut(t, s, p, int64(i+1)))
	}
	want := StoreStats{Batches: 10, Bytes: 10 * storeAlign, Segments: 5}
	if st := s.Stats(); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	var names []string
	for _, f := range segmentFiles(t, dir) {
		names = append(names, filepath.Base(f))
	}
	if got := strings.Join(names, " "); got != "00000000000000000000.batch 00000000000000000002.batch 00000000000000000004.batch 00000000000000000006.batch 00000000000000000008.batch" {
		t.Fatalf("segment files: %s", got)
	}
	s.Close()

	s = openTestStore(t, dir, StoreOptions{SegmentBytes: 2 * storeAlign})
	if st := s.Stats(); st != want {
		t.Fatalf("after reopen: stats %+v, want %+v", st, want)
	}
	for i := range ds {
		mustGet(t, s, ds[i], ps[i])
	}

	// Heights 1-2 and 3-4 fill the first two segments.
	if n, err := s.Prune(5); err != nil || n != 2 {
		t.Fatalf("Prune(5) = %d, %v; want 2 segments", n, err)
	}
	for i := range ds {
		_, err := s.Get(ds[i])
		if i < 4 && !errors.Is(err, ErrNotFound) || i >= 4 && err != nil {
			t.Fatalf("batch at height %d after Prune(5): %v", i+1, err)
		}
		if s.Has(ds[i]) != (i >= 4) {
			t.Fatalf("Has(batch at height %d) after Prune(5) = %v", i+1, s.Has(ds[i]))
		}
	}
	// The active segment stays whatever its heights.
	if n, err := s.Prune(100); err != nil || n != 2 {
		t.Fatalf("Prune(100) = %d, %v; want 2 segments", n, err)
	}
	want = StoreStats{Batches: 2, Bytes: 2 * storeAlign, Segments: 1}
	if st := s.Stats(); st != want || len(segmentFiles(t, dir)) != 1 {
		t.Fatalf("after pruning: stats %+v and files %v, want %+v", st, segmentFiles(t, dir), want)
	}
	mustGet(t, s, ds[9], ps[9])

	// A record larger than the roll size gets a segment of its own.
	big := testPayload(99, 9000)
	db := mustPut(t, s, big, 200)
	after := mustPut(t, s, testPayload(100, 10), 201)
	if st := s.Stats(); st.Segments != 3 {
		t.Fatalf("segments %d after a large record, want 3", st.Segments)
	}
	s.Close()
	s = openTestStore(t, dir, StoreOptions{SegmentBytes: 2 * storeAlign})
	mustGet(t, s, db, big)
	mustGet(t, s, after, testPayload(100, 10))
	if st := s.Stats(); st.Batches != 4 || st.Segments != 3 {
		t.Fatalf("after reopen: stats %+v", st)
	}
}

// TestStorePutAgainAtHigherHeight stores a batch again for a later height
// after its segment rolled: Prune must not drop it before that height.
func TestStorePutAgainAtHigherHeight(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{SegmentBytes: 2 * storeAlign}) // records padded to 4096 bytes
	p := testPayload(1, 300)
	d := mustPut(t, s, p, 1)
	mustPut(t, s, testPayload(2, 300), 2)
	mustPut(t, s, testPayload(3, 300), 3) // rolls: p's segment is sealed at height 2
	st := s.Stats()
	if mustPut(t, s, p, 2); s.Stats() != st {
		t.Fatalf("Put at a height its segment covers wrote again: %+v then %+v", st, s.Stats())
	}
	mustPut(t, s, p, 100)
	if got := s.Stats(); got.Batches != 3 || got.Bytes != st.Bytes+storeAlign {
		t.Fatalf("Put at a later height: %+v, want a new copy", got)
	}
	mustPut(t, s, testPayload(4, 300), 101)
	mustPut(t, s, testPayload(5, 300), 102) // rolls again
	if n, err := s.Prune(50); err != nil || n != 1 {
		t.Fatalf("Prune(50) = %d, %v; want the first segment", n, err)
	}
	mustGet(t, s, d, p)
	s.Close()
	s = openTestStore(t, dir, StoreOptions{SegmentBytes: 2 * storeAlign})
	mustGet(t, s, d, p)
	if n, err := s.Prune(101); err != nil || n != 1 {
		t.Fatalf("Prune(101) = %d, %v; want the segment of the copy", n, err)
	}
	if s.Has(d) {
		t.Fatal("the copy outlived Prune past its height")
	}
}

// TestStoreTornTail cuts the last record at every length: reopening serves
// exactly the records before it and takes new Puts.
func TestStoreTornTail(t *testing.T) {
	src := t.TempDir()
	s := openTestStore(t, src, StoreOptions{})
	ps := [][]byte{testPayload(1, 200), testPayload(2, 100), testPayload(3, 60)}
	var ds [][32]byte
	for i, p := range ps {
		ds = append(ds, mustPut(t, s, p, int64(i)))
	}
	s.Close()
	full, err := os.ReadFile(filepath.Join(src, "00000000000000000000.batch"))
	if err != nil {
		t.Fatal(err)
	}
	prevEnd := len(full) - storeAlign              // the last record's start
	recEnd := prevEnd + storeOverhead + len(ps[2]) // and its end, before the padding

	check := func(t *testing.T, seg []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "00000000000000000000.batch")
		if err := os.WriteFile(path, seg, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := OpenStore(dir, StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if st := s.Stats(); st.Batches != 2 || st.Bytes != int64(prevEnd) {
			t.Fatalf("stats %+v, want the first 2 records", st)
		}
		mustGet(t, s, ds[0], ps[0])
		mustGet(t, s, ds[1], ps[1])
		if s.Has(ds[2]) {
			t.Fatal("the torn record is served")
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != int64(prevEnd) {
			t.Fatalf("the torn tail was not cut: %v, %v", fi.Size(), err)
		}
		mustPut(t, s, ps[2], 2)
		s.Close()
		s = openTestStore(t, dir, StoreOptions{})
		for i := range ps {
			mustGet(t, s, ds[i], ps[i])
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, full) {
			t.Fatal("the segment after recovery and a new Put differs from the original")
		}
	}
	for cut := prevEnd + 1; cut < recEnd; cut++ {
		t.Run(fmt.Sprintf("cut%d", cut), func(t *testing.T) { check(t, full[:cut]) })
	}
	for _, off := range []int{prevEnd, prevEnd + 5, prevEnd + 20, recEnd - 10, recEnd - 1} {
		t.Run(fmt.Sprintf("flip%d", off), func(t *testing.T) {
			b := bytes.Clone(full)
			b[off] ^= 1
			check(t, b)
		})
	}
	t.Run("digest", func(t *testing.T) {
		// A record whose CRC checks out but whose digest is not its
		// payload's is cut too.
		bad := unpaddedRecord(ps[2], 2)
		bad[16] ^= 1
		binary.BigEndian.PutUint32(bad[len(bad)-4:], crc32.Checksum(bad[:storeHeaderSize], crc32.MakeTable(crc32.Castagnoli)))
		check(t, append(bytes.Clone(full[:prevEnd]), bad...))
	})
	t.Run("padding", func(t *testing.T) {
		// A whole last record followed by a partial or damaged padding
		// is served; the padding is rewritten as zeros.
		for _, seg := range [][]byte{full[:recEnd], full[:recEnd+7], func() []byte {
			b := bytes.Clone(full)
			b[recEnd+100] = 1
			return b
		}()} {
			dir := t.TempDir()
			path := filepath.Join(dir, "00000000000000000000.batch")
			if err := os.WriteFile(path, seg, 0o644); err != nil {
				t.Fatal(err)
			}
			s := openTestStore(t, dir, StoreOptions{})
			for i := range ps {
				mustGet(t, s, ds[i], ps[i])
			}
			if st := s.Stats(); st.Batches != 3 || st.Bytes != int64(len(full)) {
				t.Fatalf("stats %+v, want the 3 records", st)
			}
			s.Close()
			if b, _ := os.ReadFile(path); !bytes.Equal(b, full) {
				t.Fatal("the padding was not restored")
			}
		}
	})
}

// TestStoreUnpaddedSegment reads a segment of the older layout (records
// back to back, magic SBT1 with a CRC of the payload too), and appends to
// it on the next boundary.
func TestStoreUnpaddedSegment(t *testing.T) {
	dir := t.TempDir()
	ps := [][]byte{testPayload(1, 200), testPayload(2, 5000), testPayload(3, 60)}
	var seg []byte
	for i, p := range ps {
		seg = append(seg, v1Record(p, int64(i))...)
	}
	path := filepath.Join(dir, "00000000000000000000.batch")
	if err := os.WriteFile(path, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t, dir, StoreOptions{})
	for _, p := range ps {
		mustGet(t, s, sha256.Sum256(p), p)
	}
	p := testPayload(4, 70)
	mustPut(t, s, p, 4)
	s.Close()
	want := append(seg, make([]byte, alignUp(int64(len(seg)))-int64(len(seg)))...)
	want = append(want, storeRecord(p, 4)...)
	if b, _ := os.ReadFile(path); !bytes.Equal(b, want) {
		t.Fatal("the new record is not on the boundary after the old records")
	}
	s = openTestStore(t, dir, StoreOptions{})
	for _, p := range append(ps, p) {
		mustGet(t, s, sha256.Sum256(p), p)
	}
}

// TestStoreDirectWrites checks that segments are written around the page
// cache exactly where the file system opens files for O_DIRECT, on the
// temporary directory's file system and on /dev/shm (tmpfs, which refuses
// O_DIRECT on older kernels), and that records of every size around the
// 4 KiB boundary read back after a reopen either way. Which way each took
// is logged: on a machine where both allow O_DIRECT, the buffered path is
// not exercised here.
func TestStoreDirectWrites(t *testing.T) {
	dirs := []string{t.TempDir()}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "stele-store-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(shm) })
			dirs = append(dirs, shm)
		}
	}
	for _, dir := range dirs {
		s := openTestStore(t, dir, StoreOptions{})
		probe := filepath.Join(dir, "probe")
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		f, derr := openDirect(probe)
		if derr == nil {
			f.Close()
		}
		seg := s.mu.segs[0]
		if direct := seg.w != seg.f; direct != (derr == nil) {
			t.Fatalf("%s: segment written directly: %v; O_DIRECT opens: %v", dir, direct, derr)
		}
		var ds [][32]byte
		var ps [][]byte
		for i, n := range []int{1, 4096 - storeOverhead, 4096 - storeOverhead + 1, 100000} {
			p := testPayload(i, n)
			ps, ds = append(ps, p), append(ds, mustPut(t, s, p, int64(i)))
		}
		s.Close()
		s = openTestStore(t, dir, StoreOptions{})
		for i := range ps {
			mustGet(t, s, ds[i], ps[i])
		}
		s.Close()
		t.Logf("%s: direct writes %v", dir, derr == nil)
	}
}

// syncBuffer is a concurrency-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestStoreCorruptMiddleSegment: in a sealed segment, a record whose
// header fails its CRC is found at open, and it and the rest of its
// segment are not served (logged once, the file left as it is); a record
// whose payload rotted is found when read: that batch alone is no longer
// served, and a Put stores it again.
func TestStoreCorruptMiddleSegment(t *testing.T) {
	for _, c := range []struct {
		name string
		at   int64 // in the middle segment, record 1 (batch 4)
	}{
		{"header", storeAlign + 10},
		{"payload", storeAlign + storeHeaderSize + 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := StoreOptions{SegmentBytes: 3 * storeAlign} // 3 records per segment
			s := openTestStore(t, dir, opts)
			var ds [][32]byte
			var ps [][]byte
			for i := range 9 {
				p := testPayload(i, 100)
				ps, ds = append(ps, p), append(ds, mustPut(t, s, p, int64(i)))
			}
			s.Close()
			files := segmentFiles(t, dir)
			if len(files) != 3 {
				t.Fatalf("segments %v, want 3", files)
			}
			flipByte(t, files[1], c.at)
			before, _ := os.Stat(files[1])

			var logs syncBuffer
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			s, err := OpenStore(dir, opts)
			if err != nil {
				t.Fatalf("OpenStore with a corrupt sealed segment: %v", err)
			}
			defer s.Close()
			lost := map[int]bool{4: true, 5: true} // the record and the rest of its segment
			if c.name == "payload" {
				if !s.Has(ds[4]) {
					t.Fatal("a payload's rot was found at open: the sealed segment was read whole")
				}
				if _, err := s.Get(ds[4]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Get of the rotted batch: %v, want ErrCorrupt", err)
				}
				lost = map[int]bool{4: true}
			}
			for i := range ds {
				if lost[i] {
					if _, err := s.Get(ds[i]); !errors.Is(err, ErrNotFound) {
						t.Fatalf("batch %d, lost to the corruption: %v, want ErrNotFound", i, err)
					}
					continue
				}
				mustGet(t, s, ds[i], ps[i])
			}
			want := map[string]string{"header": "corrupt segment", "payload": "a stored batch is corrupt"}[c.name]
			if n := strings.Count(logs.String(), want); n != 1 {
				t.Fatalf("logged %q %d times:\n%s", want, n, logs.String())
			}
			if after, _ := os.Stat(files[1]); after.Size() != before.Size() {
				t.Fatal("a sealed segment was cut")
			}
			d := mustPut(t, s, ps[4], 4)
			mustGet(t, s, d, ps[4])
		})
	}
}

// TestStoreGetCorruptOnDisk flips a byte of a stored record after open: Get
// notices, the batch is no longer served, and a Put stores it again.
func TestStoreGetCorruptOnDisk(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	p := testPayload(1, 500)
	d := mustPut(t, s, p, 1)
	other := testPayload(2, 500)
	d2 := mustPut(t, s, other, 1)
	flipByte(t, segmentFiles(t, dir)[0], storeHeaderSize+10)
	if _, err := s.Get(d); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a flipped record: %v, want ErrCorrupt", err)
	}
	mustGet(t, s, d2, other)
	if s.Has(d) {
		t.Fatal("a batch found corrupt is still served")
	}
	if _, err := s.Get(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get again: %v, want ErrNotFound", err)
	}
	mustPut(t, s, p, 1)
	mustGet(t, s, d, p)
	if st := s.Stats(); st.Batches != 2 {
		t.Fatalf("stats %+v", st)
	}

	// A record of the older layout (SBT1, its CRC over the payload too)
	// rotted after open so that its CRC still matches: Get checks the
	// digest, not only the CRC.
	dir = t.TempDir()
	path := filepath.Join(dir, "00000000000000000000.batch")
	if err := os.WriteFile(path, v1Record(other, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, StoreOptions{})
	mustGet(t, s, d2, other)
	rotted := v1Record(other, 1)
	rotted[storeHeaderSize+10] ^= 1
	binary.BigEndian.PutUint32(rotted[len(rotted)-4:], crc32.Checksum(rotted[:len(rotted)-4], crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(path, rotted, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(d2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of an SBT1 record whose payload fails its digest: %v, want ErrCorrupt", err)
	}
}

// TestStoreConcurrentPut runs Puts from 8 goroutines with Gets, Prunes and
// Stats alongside, across rolls (run with -race).
func TestStoreConcurrentPut(t *testing.T) {
	dir := t.TempDir()
	opts := StoreOptions{SegmentBytes: 64 << 10}
	s := openTestStore(t, dir, opts)
	const writers, each = 8, 200
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		written sync.Map // digest -> payload, once Put returned
	)
	ds := make([][][32]byte, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				p := testPayload(w*each+i, 200+(w*each+i)%1500)
				d, err := s.Put(p, int64(1000+i))
				if err != nil {
					t.Error(err)
					return
				}
				ds[w] = append(ds[w], d)
				written.Store(d, p)
			}
		})
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		for !stop.Load() {
			written.Range(func(k, v any) bool {
				got, err := s.Get(k.([32]byte))
				if err != nil || !bytes.Equal(got, v.([]byte)) {
					t.Errorf("Get of an acknowledged batch: %v", err)
					return false
				}
				return !stop.Load()
			})
		}
	})
	readers.Go(func() {
		for !stop.Load() {
			if _, err := s.Prune(500); err != nil {
				t.Error(err)
			}
			s.Stats()
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	if t.Failed() {
		return
	}
	check := func(s *Store) {
		for w := range writers {
			for i, d := range ds[w] {
				mustGet(t, s, d, testPayload(w*each+i, 200+(w*each+i)%1500))
			}
		}
		if st := s.Stats(); st.Batches != writers*each || st.Segments < 2 {
			t.Fatalf("stats %+v", st)
		}
	}
	check(s)
	s.Close()
	check(openTestStore(t, dir, opts))
}

// TestStoreGetDuringPrune reads while segments are pruned: a Get returns
// the batch or ErrNotFound, never another error.
func TestStoreGetDuringPrune(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{SegmentBytes: 2048})
	var ds [][32]byte
	var ps [][]byte
	for i := range 60 {
		p := testPayload(i, 400)
		ps, ds = append(ps, p), append(ds, mustPut(t, s, p, int64(i)))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				for i, d := range ds {
					got, err := s.Get(d)
					if err != nil && !errors.Is(err, ErrNotFound) || err == nil && !bytes.Equal(got, ps[i]) {
						t.Errorf("Get during Prune: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			mustPut(t, s, testPayload(1000+i, 400), int64(100+i))
		}
	})
	for below := int64(0); below <= 60; below += 4 {
		if _, err := s.Prune(below); err != nil {
			t.Error(err)
		}
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	for i, d := range ds {
		if _, err := s.Get(d); !errors.Is(err, ErrNotFound) {
			t.Fatalf("batch at height %d after Prune(60): %v", i, err)
		}
	}
}

// TestStoreGroupCommit shows that concurrent Puts share fsyncs: the first
// leader's fsync, which covers its own record, is held until all 64 records
// are appended; then one more fsync makes all the others durable.
func TestStoreGroupCommit(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	const n = 64
	var first atomic.Bool
	s.syncHook = func() {
		if first.Swap(true) {
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.wmu.Lock()
			appended := s.lastTicket
			s.wmu.Unlock()
			if appended == n {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("only %d of %d Puts appended while a sync was pending", appended, n)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	ds := make([][32]byte, n)
	for i := range n {
		wg.Go(func() {
			d, err := s.Put(testPayload(i, 100), 1)
			if err != nil {
				t.Error(err)
			}
			ds[i] = d
		})
	}
	wg.Wait()
	if syncs := s.syncs.Load(); syncs >= n || syncs > 2 {
		t.Fatalf("%d concurrent Puts took %d fsyncs, want at most 2", n, syncs)
	}
	for i, d := range ds {
		mustGet(t, s, d, testPayload(i, 100))
	}
}

// TestStorePruneWhilePending prunes a rolled segment whose record is not
// yet published (its Put still waits for the group fsync): the record must
// not be indexed afterwards.
func TestStorePruneWhilePending(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{SegmentBytes: 200}) // one 100-byte payload per segment
	release, _ := holdSyncs(t, s)
	pa, pb := testPayload(1, 100), testPayload(2, 100)
	var wg sync.WaitGroup
	wg.Go(func() { mustPut(t, s, pa, 1) })
	waitAppended(t, s, 1)
	wg.Go(func() { mustPut(t, s, pb, 100) })
	waitAppended(t, s, 2)
	if n, err := s.Prune(50); err != nil || n != 1 {
		t.Fatalf("Prune(50) = %d, %v; want the first segment", n, err)
	}
	release()
	wg.Wait()
	if _, err := s.Get(sha256.Sum256(pa)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a batch pruned before it was published: %v, want ErrNotFound", err)
	}
	mustGet(t, s, sha256.Sum256(pb), pb)
	if st := s.Stats(); st.Batches != 1 || st.Segments != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStorePutSameConcurrently puts one payload twice while the first Put
// waits for its fsync: it is written once, and both Puts succeed.
func TestStorePutSameConcurrently(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	release, _ := holdSyncs(t, s)
	p := testPayload(1, 100)
	var wg sync.WaitGroup
	wg.Go(func() { mustPut(t, s, p, 1) })
	waitAppended(t, s, 1)
	second := make(chan struct{})
	wg.Go(func() {
		mustPut(t, s, p, 1)
		close(second)
	})
	select {
	case <-second:
		t.Fatal("a Put of a batch not yet durable returned before the fsync")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	wg.Wait()
	if st := s.Stats(); st != (StoreStats{Batches: 1, Bytes: alignUp(int64(len(p) + storeOverhead)), Segments: 1}) {
		t.Fatalf("stats %+v: the batch was written twice?", st)
	}
}

// TestStoreCloseCompletesPuts closes the store while Puts wait for their
// fsync: they succeed, and their batches are there after reopening.
func TestStoreCloseCompletesPuts(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	release, entered := holdSyncs(t, s)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	put := func(i int) { wg.Go(func() { _, errs[i] = s.Put(testPayload(i, 50), 1) }) }
	put(0)
	receive(t, entered, "the first leader")
	for i := 1; i < n; i++ {
		put(i)
	}
	waitAppended(t, s, n)
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	// The first leader's fsync covers only the first record, and no other
	// leader starts once Close has: Close must make the others durable.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.gc.mu.Lock()
		closing := s.gc.closing
		s.gc.mu.Unlock()
		if closing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not start")
		}
		time.Sleep(time.Millisecond)
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if syncs := s.syncs.Load(); syncs != 2 {
		t.Fatalf("%d fsyncs, want 2: the first leader's and Close's", syncs)
	}
	s = openTestStore(t, dir, StoreOptions{})
	if st := s.Stats(); st.Batches != n {
		t.Fatalf("after reopen: %+v", st)
	}
}

// BenchmarkStorePut stores distinct 1 MiB payloads from parallel
// goroutines: go test -run '^$' -bench StorePut ./internal/dataplane/
func BenchmarkStorePut(b *testing.B) {
	s := openTestStore(b, b.TempDir(), StoreOptions{})
	var seq atomic.Uint64
	b.SetBytes(1 << 20)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := testPayload(0, 1<<20)
		for pb.Next() {
			binary.BigEndian.PutUint64(p, seq.Add(1))
			if _, err := s.Put(p, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(s.syncs.Load())/float64(b.N), "fsyncs/op")
}

// openBenchMiB is a flag: the MiB of 1 MiB batches BenchmarkOpenStore
// stores in 64 MiB segments.
var openBenchMiB = flag.Int("store.open-mib", 1024, "MiB of batches BenchmarkOpenStore opens")

// BenchmarkOpenStore opens a store of -store.open-mib MiB of 1 MiB batches
// in 64 MiB segments (the page cache warm: the benchmark cannot drop it).
// "every payload" is what OpenStore did before it read sealed segments'
// headers only: scanStoreSegment over every segment; "headers" is that
// scan's part of OpenStore now (scanStoreHeaders over the sealed segments,
// scanStoreSegment over the last); "OpenStore" the whole open.
func BenchmarkOpenStore(b *testing.B) {
	dir := b.TempDir()
	opts := StoreOptions{SegmentBytes: 64 << 20}
	s := openTestStore(b, dir, opts)
	p := testPayload(0, 1<<20)
	for i := range *openBenchMiB {
		binary.BigEndian.PutUint64(p, uint64(i))
		if _, err := s.Put(p, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	files := segmentFiles(b, dir)
	scan := func(b *testing.B, sealed func(*os.File, int64, func(int64, uint32, int64, [32]byte)) (int64, string, error)) {
		records := 0
		for i, path := range files {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			fi, _ := f.Stat()
			fn := sealed
			if i == len(files)-1 {
				fn = scanStoreSegment
			}
			if _, why, err := fn(f, fi.Size(), func(int64, uint32, int64, [32]byte) { records++ }); err != nil || why != "" {
				b.Fatalf("%s: %v %s", path, err, why)
			}
			f.Close()
		}
		if records != *openBenchMiB {
			b.Fatalf("%d records, want %d", records, *openBenchMiB)
		}
	}
	b.Run("every payload", func(b *testing.B) {
		for range b.N {
			scan(b, scanStoreSegment)
		}
	})
	b.Run("headers", func(b *testing.B) {
		for range b.N {
			scan(b, scanStoreHeaders)
		}
	})
	b.Run("OpenStore", func(b *testing.B) {
		for range b.N {
			s, err := OpenStore(dir, opts)
			if err != nil {
				b.Fatal(err)
			}
			if st := s.Stats(); st.Batches != *openBenchMiB {
				b.Fatalf("%d batches", st.Batches)
			}
			s.Close()
		}
	})
}
