package cometbft

import (
	"context"
	"path/filepath"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/stele-io/stele/internal/consensus"
)

// panicky is a snapApp whose restore calls panic.
type panicky struct{ *snapApp }

func (panicky) OfferSnapshot(consensus.Snapshot, []byte) consensus.OfferResult { panic("offer") }
func (panicky) ApplySnapshotChunk(uint32, []byte, string) consensus.ChunkOutcome {
	panic("apply")
}

// TestABCISnapshotCalls: the ABCI snapshot calls reach a Snapshotter and
// carry its answers; an application without one serves nothing and refuses
// offers; a panic on a peer's snapshot rejects it and its sender instead of
// stopping the node.
func TestABCISnapshotCalls(t *testing.T) {
	ctx := context.Background()
	plain, _ := openDiskApp(filepath.Join(t.TempDir(), "a.json"), always)
	a := newABCIApp(plain, 1<<20, testLogger(t))
	if res, _ := a.ListSnapshots(ctx, &abci.RequestListSnapshots{}); len(res.Snapshots) != 0 {
		t.Errorf("an application without snapshots listed %d", len(res.Snapshots))
	}
	if res, _ := a.OfferSnapshot(ctx, &abci.RequestOfferSnapshot{Snapshot: &abci.Snapshot{Height: 5}}); res.Result != abci.ResponseOfferSnapshot_ABORT {
		t.Errorf("offer to an application without snapshots: %v", res.Result)
	}

	src := newSnapApp(t, 1, 100, false)
	if _, _, err := src.FinalizeBlock(consensus.Block{Height: 1, Txs: [][]byte{[]byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Commit(); err != nil {
		t.Fatal(err)
	}
	srv := newABCIApp(src, 1<<20, testLogger(t))
	list, _ := srv.ListSnapshots(ctx, &abci.RequestListSnapshots{})
	if len(list.Snapshots) != 1 || list.Snapshots[0].Height != 1 || list.Snapshots[0].Chunks == 0 {
		t.Fatalf("listed %+v, want the snapshot at height 1", list.Snapshots)
	}
	snap := list.Snapshots[0]
	chunk, _ := srv.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: 1, Format: 1, Chunk: 0})
	if len(chunk.Chunk) == 0 {
		t.Fatalf("chunk 0 not served")
	}
	if none, _ := srv.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: 2, Format: 1}); none.Chunk != nil {
		t.Errorf("a chunk of a snapshot not held was served")
	}

	dst := newABCIApp(newSnapApp(t, 1, 100, false), 1<<20, testLogger(t))
	if res, _ := dst.OfferSnapshot(ctx, &abci.RequestOfferSnapshot{Snapshot: snap}); res.Result != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer: %v", res.Result)
	}
	bad := append([]byte(nil), chunk.Chunk...)
	bad[0] ^= 1
	res, _ := dst.ApplySnapshotChunk(ctx, &abci.RequestApplySnapshotChunk{Index: 0, Chunk: bad, Sender: "peer-x"})
	if res.Result != abci.ResponseApplySnapshotChunk_RETRY || len(res.RefetchChunks) != 1 || len(res.RejectSenders) != 1 || res.RejectSenders[0] != "peer-x" {
		t.Errorf("bad chunk: %+v, want a retry refetching it and rejecting peer-x", res)
	}

	p := newABCIApp(panicky{newSnapApp(t, 1, 100, false)}, 1<<20, testLogger(t))
	if res, _ := p.OfferSnapshot(ctx, &abci.RequestOfferSnapshot{Snapshot: snap}); res.Result != abci.ResponseOfferSnapshot_REJECT_SENDER {
		t.Errorf("panicking offer: %v, want REJECT_SENDER", res.Result)
	}
	if res, _ := p.ApplySnapshotChunk(ctx, &abci.RequestApplySnapshotChunk{Chunk: chunk.Chunk, Sender: "peer-y"}); res.Result != abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT || len(res.RejectSenders) != 1 {
		t.Errorf("panicking apply: %+v, want REJECT_SNAPSHOT rejecting peer-y", res)
	}
}
