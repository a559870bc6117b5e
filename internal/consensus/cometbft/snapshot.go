package cometbft

import (
	"context"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/stele-io/stele/internal/consensus"
)

// The ABCI state sync calls, passed to the application when it implements
// consensus.Snapshotter; an application that does not serves no snapshots
// and refuses every offer. CometBFT makes all four on its snapshot
// connection, concurrently with the block calls; OfferSnapshot and
// ApplySnapshotChunk only on a node syncing from an empty state.
//
// A peer's snapshot and chunks reach the application's decoders; a panic
// there rejects the snapshot and its sender instead of stopping the node.

// snapshotter returns the application's Snapshotter, if it has one.
func (a *abciApp) snapshotter() (consensus.Snapshotter, bool) {
	s, ok := a.app.(consensus.Snapshotter)
	return s, ok
}

// ListSnapshots implements abci.Application.
func (a *abciApp) ListSnapshots(context.Context, *abci.RequestListSnapshots) (*abci.ResponseListSnapshots, error) {
	s, ok := a.snapshotter()
	if !ok {
		return &abci.ResponseListSnapshots{}, nil
	}
	list, err := s.ListSnapshots()
	if err != nil {
		a.logger.Error("listing snapshots", "err", err)
		return &abci.ResponseListSnapshots{}, nil
	}
	res := &abci.ResponseListSnapshots{Snapshots: make([]*abci.Snapshot, len(list))}
	for i, x := range list {
		res.Snapshots[i] = &abci.Snapshot{Height: uint64(x.Height), Format: x.Format, Chunks: x.Chunks, Hash: x.Hash, Metadata: x.Metadata}
	}
	return res, nil
}

// LoadSnapshotChunk implements abci.Application. A chunk the application
// does not hold is answered empty, which CometBFT sends as "missing".
func (a *abciApp) LoadSnapshotChunk(_ context.Context, req *abci.RequestLoadSnapshotChunk) (*abci.ResponseLoadSnapshotChunk, error) {
	s, ok := a.snapshotter()
	if !ok || req.Height > 1<<62 {
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	chunk, err := s.LoadSnapshotChunk(int64(req.Height), req.Format, req.Chunk)
	if err != nil {
		a.logger.Warn("loading a snapshot chunk", "height", req.Height, "chunk", req.Chunk, "err", err)
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	return &abci.ResponseLoadSnapshotChunk{Chunk: chunk}, nil
}

// OfferSnapshot implements abci.Application. req.AppHash is the app hash
// at the snapshot's height that CometBFT's state provider verified.
func (a *abciApp) OfferSnapshot(_ context.Context, req *abci.RequestOfferSnapshot) (res *abci.ResponseOfferSnapshot, _ error) {
	s, ok := a.snapshotter()
	if !ok {
		return &abci.ResponseOfferSnapshot{Result: abci.ResponseOfferSnapshot_ABORT}, nil
	}
	if req.Snapshot == nil || req.Snapshot.Height == 0 || req.Snapshot.Height > 1<<62 {
		return &abci.ResponseOfferSnapshot{Result: abci.ResponseOfferSnapshot_REJECT}, nil
	}
	defer func() {
		if r := recover(); r != nil {
			a.logger.Error("application panicked on an offered snapshot; rejecting it", "panic", r)
			res = &abci.ResponseOfferSnapshot{Result: abci.ResponseOfferSnapshot_REJECT_SENDER}
		}
	}()
	snap := consensus.Snapshot{Height: int64(req.Snapshot.Height), Format: req.Snapshot.Format,
		Chunks: req.Snapshot.Chunks, Hash: req.Snapshot.Hash, Metadata: req.Snapshot.Metadata}
	return &abci.ResponseOfferSnapshot{Result: offerResult(s.OfferSnapshot(snap, req.AppHash))}, nil
}

// ApplySnapshotChunk implements abci.Application.
func (a *abciApp) ApplySnapshotChunk(_ context.Context, req *abci.RequestApplySnapshotChunk) (res *abci.ResponseApplySnapshotChunk, _ error) {
	s, ok := a.snapshotter()
	if !ok {
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ABORT}, nil
	}
	defer func() {
		if r := recover(); r != nil {
			a.logger.Error("application panicked on a snapshot chunk; rejecting the snapshot", "panic", r, "peer", req.Sender)
			res = &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT, RejectSenders: []string{req.Sender}}
		}
	}()
	out := s.ApplySnapshotChunk(req.Index, req.Chunk, req.Sender)
	return &abci.ResponseApplySnapshotChunk{Result: applyResult(out.Result), RefetchChunks: out.Refetch, RejectSenders: out.RejectSenders}, nil
}

func offerResult(r consensus.OfferResult) abci.ResponseOfferSnapshot_Result {
	switch r {
	case consensus.OfferAccept:
		return abci.ResponseOfferSnapshot_ACCEPT
	case consensus.OfferReject:
		return abci.ResponseOfferSnapshot_REJECT
	case consensus.OfferRejectFormat:
		return abci.ResponseOfferSnapshot_REJECT_FORMAT
	case consensus.OfferRejectSender:
		return abci.ResponseOfferSnapshot_REJECT_SENDER
	default:
		return abci.ResponseOfferSnapshot_ABORT
	}
}

func applyResult(r consensus.ApplyResult) abci.ResponseApplySnapshotChunk_Result {
	switch r {
	case consensus.ApplyAccept:
		return abci.ResponseApplySnapshotChunk_ACCEPT
	case consensus.ApplyRetry:
		return abci.ResponseApplySnapshotChunk_RETRY
	case consensus.ApplyRetrySnapshot:
		return abci.ResponseApplySnapshotChunk_RETRY_SNAPSHOT
	case consensus.ApplyRejectSnapshot:
		return abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT
	default:
		return abci.ResponseApplySnapshotChunk_ABORT
	}
}
