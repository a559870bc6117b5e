package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// mountTmpfs mounts a tmpfs of size (mount's syntax, "1m") at dir and
// unmounts it when the test ends: a real file system that fills up. It
// needs root (CI runs as root); elsewhere the test is skipped.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs at %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

func growTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v: %s", dir, err, out)
	}
}

// TestFailStopOnFullDisk: the partition logs' file system fills up during
// a block. ApplyBlock fails with ErrLocalFault instead of hashing a
// KAFKA_STORAGE_ERROR result; every later ApplyBlock and Commit refuses;
// once there is room again, a reopened state machine is at the last
// committed height and replaying the failed block and the rest gives the
// app hashes and logs of a state machine that never failed.
func TestFailStopOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	mountTmpfs(t, filepath.Join(dir, "logs"), "256k")
	blocks := []block{{time: t0, txs: [][]byte{tx(1, topics.CreateTopic{Name: "big", Partitions: 1, ReplicationFactor: -1,
		Configs: []topics.ConfigEntry{{Name: "segment.bytes", Value: "10000000"}}})}}}
	for h := 1; h <= 40; h++ {
		var recs []record.Record
		for i := range 8 {
			recs = append(recs, record.Record{OffsetDelta: int32(i), Key: []byte{byte(i)}, Value: bytes.Repeat([]byte{byte(h)}, 1000)})
		}
		b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, block{time: t0 + int64(h), txs: [][]byte{tx(100+h, topics.Produce{Topic: "big", Partition: 0, Records: b})}})
	}

	f := open(t, dir)
	failed := -1
	for i, b := range blocks {
		out, err := f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: b.time, Txs: b.txs})
		if err != nil {
			if !errors.Is(err, core.ErrLocalFault) || !strings.Contains(err.Error(), "no space left") {
				t.Fatalf("height %d: %v, want ErrLocalFault for a full disk", i+1, err)
			}
			failed = i
			break
		}
		for _, o := range out.Txs {
			for _, r := range o.Results {
				if r.Code != 0 {
					t.Fatalf("height %d: result %d (%s): a local fault became a result", i+1, r.Code, r.Message)
				}
			}
		}
		if _, err := f.Commit(); err != nil {
			if !errors.Is(err, core.ErrLocalFault) {
				t.Fatalf("height %d: commit: %v", i+1, err)
			}
			failed = i
			break
		}
	}
	if failed < 0 {
		t.Fatal("the tmpfs never filled up")
	}
	if _, err := f.Commit(); !errors.Is(err, core.ErrLocalFault) {
		t.Fatalf("Commit after the fault: %v, want ErrLocalFault", err)
	}
	if _, err := f.ApplyBlock(core.Block{Height: int64(failed + 2), TimeMs: t0 + 1000}); !errors.Is(err, core.ErrLocalFault) {
		t.Fatalf("ApplyBlock after the fault: %v, want ErrLocalFault", err)
	}
	if f.Fault() == nil {
		t.Fatal("Fault() is nil after a fault")
	}
	f.Close()

	growTmpfs(t, filepath.Join(dir, "logs"), "16m")
	f = open(t, dir)
	defer f.Close()
	if h, _ := f.Info(); h != int64(failed) {
		t.Fatalf("reopened at height %d, want %d (the last committed)", h, failed)
	}
	ref := open(t, t.TempDir())
	defer ref.Close()
	want := applyAll(t, ref, blocks)
	for i := failed; i < len(blocks); i++ {
		out, err := f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: blocks[i].time, Txs: blocks[i].txs})
		if err != nil {
			t.Fatalf("replay height %d: %v", i+1, err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatalf("replay height %d: commit: %v", i+1, err)
		}
		if !bytes.Equal(out.AppHash, want[i]) {
			t.Fatalf("height %d: app hash after the replay differs from a state machine that never failed", i+1)
		}
	}
	sameLogFiles(t, dir, ref.opts.Dir)
}

// TestFailStopOnStoreFault: the metadata store's file system fails reads
// (pebble's errorfs) while a command needs stored state (a producer key's
// registration reads the current key). The block fails with ErrLocalFault;
// nothing is committed; with the fault gone a reopened state machine
// replays the block to the hash of one that never failed.
func TestFailStopOnStoreFault(t *testing.T) {
	// Enough other principals that alice's key lies in a data block of its
	// own, which nothing reads before the rotation does.
	alice := newSigner("zz-alice", 1)
	next := newSigner("zz-alice", 2)
	var first [][]byte
	for i := range 300 {
		first = append(first, tx(10+i, newSigner(fmt.Sprintf("p-%03d", i), byte(i)).register(nil)))
	}
	blocks := []block{
		{time: t0, txs: append(first, tx(1, alice.register(nil)))},
		{time: t0 + 10, txs: [][]byte{tx(2, next.register(&alice))}},
	}
	dir := t.TempDir()
	toggle := &errorfs.Toggle{Injector: errorfs.ErrInjected.If(errorfs.Reads)}
	opts := Options{Dir: dir, HousekeepingIntervalMs: 1000, StoreFS: errorfs.Wrap(vfs.Default, toggle)}
	f, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: blocks[0].time, Txs: blocks[0].txs}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	// The registrations are in the store's files, not in its memtable or
	// its block cache.
	if err := f.Store.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if f, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	toggle.On()
	_, err = f.ApplyBlock(core.Block{Height: 2, TimeMs: blocks[1].time, Txs: blocks[1].txs})
	toggle.Off()
	if !errors.Is(err, core.ErrLocalFault) || !strings.Contains(err.Error(), errorfs.ErrInjected.Error()) {
		t.Fatalf("ApplyBlock with a failing store: %v, want ErrLocalFault wrapping the injected error", err)
	}
	if _, err := f.Commit(); !errors.Is(err, core.ErrLocalFault) {
		t.Fatalf("Commit after the fault: %v", err)
	}
	f.Close()

	if f, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if h, _ := f.Info(); h != 1 {
		t.Fatalf("reopened at height %d, want 1", h)
	}
	out, err := f.ApplyBlock(core.Block{Height: 2, TimeMs: blocks[1].time, Txs: blocks[1].txs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	ref := open(t, t.TempDir())
	defer ref.Close()
	if want := applyAll(t, ref, blocks); !bytes.Equal(out.AppHash, want[1]) {
		t.Fatal("app hash after the replay differs from a state machine that never failed")
	}
	if r := out.Txs[0].Results[0]; r.Code != 0 {
		t.Fatalf("rotation after the replay: %d (%s)", r.Code, r.Message)
	}
}
