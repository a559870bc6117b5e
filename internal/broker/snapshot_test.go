package broker

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
)

// snapshotBroker is a broker whose application takes snapshots.
type snapshotBroker struct {
	dir  string
	f    *fsm.FSM
	b    *Broker
	snap *SnapshotApp
}

func newSnapshotBroker(t testing.TB, opts SnapshotOptions) *snapshotBroker {
	t.Helper()
	dir := t.TempDir()
	f, err := fsm.Open(fsm.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b := New(f, Options{MaxTxBytes: 64 << 10})
	opts.Dir = filepath.Join(dir, "snapshots")
	snap, err := NewSnapshotApp(b.App(), f, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		snap.Close()
		b.Close()
		f.Close()
	})
	return &snapshotBroker{dir: dir, f: f, b: b, snap: snap}
}

// idle waits until no snapshot is being built.
func (s *snapshotBroker) idle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.snap.mu.Lock()
		building := s.snap.mu.building
		s.snap.mu.Unlock()
		if !building {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a snapshot build did not finish within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logTree returns every file under dir/logs with its bytes.
func logTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(dir, "logs")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(root, path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func applyBlocks(t testing.TB, app consensus.Application, blocks []consensus.Block) {
	t.Helper()
	for _, blk := range blocks {
		if _, _, err := app.FinalizeBlock(blk); err != nil {
			t.Fatal(err)
		}
		if _, err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStateSyncBetweenBrokers: a broker takes a snapshot every Interval
// heights and keeps the last Keep; its retain height keeps RetainBlocks and
// never passes its latest snapshot; an empty broker restores the latest
// snapshot through the Snapshotter calls state sync makes (refusing a
// forged chunk and naming its sender), ends at the snapshot's height and
// app hash with the logs of a broker that applied those blocks, and then
// follows the chain like the others.
func TestStateSyncBetweenBrokers(t *testing.T) {
	src := newSnapshotBroker(t, SnapshotOptions{Interval: 5, Keep: 2, RetainBlocks: 3})
	o := local.New(src.snap, local.Options{Step: time.Millisecond})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	src.b.Start(o)
	ctx := context.Background()
	if r, err := src.b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 2, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	for i := 0; i < 26; i++ {
		if r, err := src.b.SubmitOne(ctx, fsm.Produce{Topic: "t", Partition: int32(i % 2), Records: batch(t, 1+i%4)}); err != nil || r.Code != 0 {
			t.Fatalf("produce %d: %v %+v", i, err, r)
		}
		src.idle(t) // so that no snapshot height is skipped
	}
	height := o.Height()
	snaps := src.snap.Snapshots()
	if len(snaps) != 2 || snaps[1].Height != height/5*5 || snaps[0].Height != snaps[1].Height-5 {
		t.Fatalf("at height %d the broker keeps snapshots %+v, want the last two multiples of 5", height, snaps)
	}
	entries, _ := os.ReadDir(filepath.Join(src.dir, "snapshots"))
	if len(entries) != 2 {
		t.Errorf("%d entries in the snapshot directory, want 2", len(entries))
	}
	latest := snaps[1].Height
	for _, c := range []struct{ app, want int64 }{{height, min(height-3, latest)}, {latest + 1, latest - 2}, {2, 0}, {0, 0}} {
		if got := src.snap.retainHeight(c.app); got != c.want {
			t.Errorf("retain height for an application retaining %d: %d, want %d", c.app, got, c.want)
		}
	}

	// An empty broker joins from the latest snapshot.
	list, err := src.snap.ListSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	offer := list[len(list)-1]
	blocks := o.Blocks()
	ref := newSnapshotBroker(t, SnapshotOptions{Interval: -1})
	applyBlocks(t, ref.b.App(), blocks[:offer.Height])
	_, trusted := ref.f.Info()

	dst := newSnapshotBroker(t, SnapshotOptions{Interval: -1})
	bad := offer
	bad.Metadata = append([]byte(nil), offer.Metadata...)
	bad.Metadata[len(bad.Metadata)-1] ^= 1
	if r := dst.snap.OfferSnapshot(bad, trusted); r != consensus.OfferRejectSender {
		t.Errorf("offer whose metadata does not match its hash: %v, want OfferRejectSender", r)
	}
	if r := dst.snap.OfferSnapshot(offer, make([]byte, len(trusted))); r != consensus.OfferRejectSender {
		t.Errorf("offer with another app hash than the trusted one: %v, want OfferRejectSender", r)
	}
	if r := ref.snap.OfferSnapshot(offer, trusted); r != consensus.OfferAbort {
		t.Errorf("offer to a broker with state: %v, want OfferAbort", r)
	}
	if r := dst.snap.OfferSnapshot(offer, trusted); r != consensus.OfferAccept {
		t.Fatalf("offer: %v, want OfferAccept", r)
	}
	for i := uint32(0); i < offer.Chunks; i++ {
		chunk, err := src.snap.LoadSnapshotChunk(offer.Height, offer.Format, i)
		if err != nil || chunk == nil {
			t.Fatalf("chunk %d: %v (nil: %v)", i, err, chunk == nil)
		}
		if i == 0 {
			forged := append([]byte(nil), chunk...)
			forged[len(forged)/2] ^= 1
			out := dst.snap.ApplySnapshotChunk(i, forged, "evil-peer")
			if out.Result != consensus.ApplyRetry || fmt.Sprint(out.Refetch) != "[0]" || fmt.Sprint(out.RejectSenders) != "[evil-peer]" {
				t.Fatalf("forged chunk: %+v, want a retry of chunk 0 rejecting evil-peer", out)
			}
		}
		if out := dst.snap.ApplySnapshotChunk(i, chunk, "good-peer"); out.Result != consensus.ApplyAccept {
			t.Fatalf("chunk %d: %+v", i, out)
		}
	}
	if got, err := src.snap.LoadSnapshotChunk(offer.Height, offer.Format, offer.Chunks); got != nil || err != nil {
		t.Errorf("chunk past the end: %v %v, want nothing", got, err)
	}
	h, hash := dst.snap.Info()
	if h != offer.Height || !bytes.Equal(hash, trusted) {
		t.Fatalf("restored broker at height %d hash %x, want %d %x", h, hash, offer.Height, trusted)
	}
	if fmt.Sprint(logTree(t, dst.dir)) != fmt.Sprint(logTree(t, ref.dir)) {
		t.Fatalf("restored logs differ from those of a broker that applied the blocks")
	}
	if p := dst.b.View().Partition("t", 1); p == nil || p.HighWatermark() != ref.b.View().Partition("t", 1).HighWatermark() {
		t.Fatalf("restored view does not show partition t-1 as committed")
	}

	// It follows the chain from there (block sync), like the source.
	applyBlocks(t, dst.snap, blocks[offer.Height:])
	_, want := src.f.Info()
	if _, got := dst.f.Info(); !bytes.Equal(got, want) {
		t.Fatalf("after the remaining blocks: hash %x, source %x", got, want)
	}
	if fmt.Sprint(logTree(t, dst.dir)) != fmt.Sprint(logTree(t, src.dir)) {
		t.Fatalf("logs differ from the source's after the remaining blocks")
	}
}

// TestSnapshotAppReopens: complete snapshots survive a restart; a build a
// crash interrupted and a restore's leftovers are removed.
func TestSnapshotAppReopens(t *testing.T) {
	src := newSnapshotBroker(t, SnapshotOptions{Interval: 2})
	o := local.New(src.snap, local.Options{Step: time.Millisecond})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	src.b.Start(o)
	ctx := context.Background()
	src.b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1})
	for i := 0; i < 4; i++ {
		src.b.SubmitOne(ctx, fsm.Produce{Topic: "t", Records: batch(t, 2)})
		src.idle(t)
	}
	o.Stop()
	want := src.snap.Snapshots()
	if len(want) == 0 {
		t.Fatal("no snapshot taken")
	}
	src.snap.Close()
	dir := filepath.Join(src.dir, "snapshots")
	for _, junk := range []string{fmt.Sprintf("%020d", 99), restoreDir} {
		if err := os.MkdirAll(filepath.Join(dir, junk, "files"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	again, err := NewSnapshotApp(src.b.App(), src.f, SnapshotOptions{Dir: dir, Interval: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.Snapshots(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after reopening: %+v, want %+v", got, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(want) {
		t.Errorf("%d entries left in the snapshot directory, want %d", len(entries), len(want))
	}
}

// TestStateSyncRefusesForgedState: a peer offers a snapshot of the true
// height and app hash whose state it altered (fsm.ForgeSnapshot: one
// partition's state changed, every chunk matching the forged metadata).
// The restoring broker accepts the offer (the metadata's app hash parts
// are the true ones), refuses the chunk that carries the altered value,
// rejecting the snapshot and its sender, and then restores an honest
// peer's snapshot of the same height.
func TestStateSyncRefusesForgedState(t *testing.T) {
	honest := newSnapshotBroker(t, SnapshotOptions{Interval: 5, Keep: 2})
	liar := newSnapshotBroker(t, SnapshotOptions{Interval: 5, Keep: 2})
	o := local.New(honest.snap, local.Options{Step: time.Millisecond})
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	honest.b.Start(o)
	ctx := context.Background()
	if r, err := honest.b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 2, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	for i := 0; i < 12; i++ {
		if r, err := honest.b.SubmitOne(ctx, fsm.Produce{Topic: "t", Partition: int32(i % 2), Records: batch(t, 1+i%4)}); err != nil || r.Code != 0 {
			t.Fatalf("produce %d: %v %+v", i, err, r)
		}
		honest.idle(t)
	}
	list, err := honest.snap.ListSnapshots()
	if err != nil || len(list) == 0 {
		t.Fatalf("the honest broker's snapshots: %v %v", list, err)
	}
	offer := list[len(list)-1]
	for _, blk := range o.Blocks()[:offer.Height] {
		applyBlocks(t, liar.snap, []consensus.Block{blk})
		liar.idle(t)
	}
	liar.snap.mu.Lock()
	var mine *fsm.Snapshot
	for _, s := range liar.snap.mu.snaps {
		if s.Height() == offer.Height {
			mine = s
		}
	}
	liar.snap.mu.Unlock()
	if mine == nil {
		t.Fatalf("the liar has no snapshot at height %d", offer.Height)
	}
	altered := false
	forged, err := fsm.ForgeSnapshot(mine, func(k, v []byte) []byte {
		if altered || !bytes.HasPrefix(k, []byte("p/")) {
			return v
		}
		altered = true
		out := bytes.Clone(v)
		out[len(out)-1] ^= 1
		return out
	})
	if err != nil || !altered {
		t.Fatalf("forging: %v (altered: %v)", err, altered)
	}
	liar.snap.mu.Lock()
	for i, s := range liar.snap.mu.snaps {
		if s == mine {
			liar.snap.mu.snaps[i] = forged
		}
	}
	liar.snap.mu.Unlock()
	lies, err := liar.snap.ListSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	var bad consensus.Snapshot
	for _, s := range lies {
		if s.Height == offer.Height {
			bad = s
		}
	}
	if bytes.Equal(bad.Hash, offer.Hash) {
		t.Fatalf("the forged snapshot has the honest one's hash")
	}
	ref := newSnapshotBroker(t, SnapshotOptions{Interval: -1})
	applyBlocks(t, ref.b.App(), o.Blocks()[:offer.Height])
	_, trusted := ref.f.Info()

	dst := newSnapshotBroker(t, SnapshotOptions{Interval: -1})
	if r := dst.snap.OfferSnapshot(bad, trusted); r != consensus.OfferAccept {
		t.Fatalf("offer of the forged snapshot: %v, want OfferAccept (its metadata is consistent)", r)
	}
	refused := false
	for i := uint32(0); i < bad.Chunks && !refused; i++ {
		chunk, err := liar.snap.LoadSnapshotChunk(bad.Height, bad.Format, i)
		if err != nil || chunk == nil {
			t.Fatalf("forged chunk %d: %v", i, err)
		}
		switch out := dst.snap.ApplySnapshotChunk(i, chunk, "liar"); out.Result {
		case consensus.ApplyAccept:
		case consensus.ApplyRejectSnapshot:
			if fmt.Sprint(out.RejectSenders) != "[liar]" {
				t.Fatalf("forged chunk %d refused without rejecting its sender: %+v", i, out)
			}
			refused = true
		default:
			t.Fatalf("forged chunk %d: %+v, want the snapshot rejected", i, out)
		}
	}
	if !refused {
		t.Fatalf("every chunk of the forged snapshot was taken")
	}
	if h, _ := dst.f.Info(); h != 0 {
		t.Fatalf("a refused snapshot left the broker at height %d", h)
	}
	if r := dst.snap.OfferSnapshot(offer, trusted); r != consensus.OfferAccept {
		t.Fatalf("offer of the honest snapshot: %v", r)
	}
	for i := uint32(0); i < offer.Chunks; i++ {
		chunk, err := honest.snap.LoadSnapshotChunk(offer.Height, offer.Format, i)
		if err != nil || chunk == nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if out := dst.snap.ApplySnapshotChunk(i, chunk, "honest"); out.Result != consensus.ApplyAccept {
			t.Fatalf("honest chunk %d: %+v", i, out)
		}
	}
	if h, hash := dst.f.Info(); h != offer.Height || !bytes.Equal(hash, trusted) {
		t.Fatalf("restored at height %d hash %X, want %d %X", h, hash, offer.Height, trusted)
	}
}
