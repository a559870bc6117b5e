package broker

import (
	"encoding/hex"
	"errors"
	"path/filepath"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/fsm"
)

// The consensus.Snapshotter side of SnapshotApp: serving snapshots to
// peers and restoring one from them.

// ListSnapshots implements consensus.Snapshotter.
func (a *SnapshotApp) ListSnapshots() ([]consensus.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]consensus.Snapshot, len(a.mu.snaps))
	for i, s := range a.mu.snaps {
		out[i] = consensus.Snapshot{Height: s.Height(), Format: s.Format(), Chunks: s.Chunks(), Hash: s.Hash(), Metadata: s.Metadata()}
	}
	return out, nil
}

// LoadSnapshotChunk implements consensus.Snapshotter. A snapshot whose
// files no longer give the chunks it was built with is deleted.
func (a *SnapshotApp) LoadSnapshotChunk(height int64, format, index uint32) ([]byte, error) {
	a.mu.Lock()
	var s *fsm.Snapshot
	for _, x := range a.mu.snaps {
		if x.Height() == height && x.Format() == format {
			s = x
		}
	}
	a.mu.Unlock()
	if s == nil || index >= s.Chunks() {
		return nil, nil
	}
	data, err := s.Chunk(index)
	if errors.Is(err, fsm.ErrSnapshotDamaged) {
		a.opts.Logger.Error("deleting a damaged snapshot", "height", height, "err", err)
		a.mu.Lock()
		for i, x := range a.mu.snaps {
			if x == s {
				a.mu.snaps = append(a.mu.snaps[:i:i], a.mu.snaps[i+1:]...)
				a.remove(s.Dir())
				break
			}
		}
		a.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		// The snapshot may have been deleted meanwhile (pruned): the peer
		// asks another.
		a.opts.Logger.Debug("loading a snapshot chunk", "height", height, "chunk", index, "err", err)
		return nil, nil
	}
	return data, nil
}

// OfferSnapshot implements consensus.Snapshotter: a snapshot is accepted
// for restore if this broker's state is empty and the snapshot's metadata
// is consistent with the offer and with the trusted app hash.
func (a *SnapshotApp) OfferSnapshot(s consensus.Snapshot, appHash []byte) consensus.OfferResult {
	a.dropRestore()
	if h, _ := a.f.Info(); h != 0 {
		a.opts.Logger.Error("cannot restore a snapshot: this broker holds state at a height while CometBFT has none; "+
			"remove the data directory's meta/ and logs/ (or all of CometBFT's data/) and restart", "height", h)
		return consensus.OfferAbort
	}
	r, err := fsm.NewRestore(filepath.Join(a.opts.Dir, restoreDir), fsm.SnapshotOffer{
		Height: s.Height, Format: s.Format, Chunks: s.Chunks, Hash: s.Hash, Metadata: s.Metadata, AppHash: appHash})
	switch {
	case errors.Is(err, fsm.ErrSnapshotFormat):
		return consensus.OfferRejectFormat
	case errors.Is(err, fsm.ErrSnapshotMalformed), errors.Is(err, fsm.ErrSnapshotMismatch):
		// Every peer advertising exactly this snapshot (metadata included)
		// advertises something false.
		a.opts.Logger.Warn("refusing a snapshot offered by peers", "height", s.Height, "err", err)
		return consensus.OfferRejectSender
	case err != nil:
		a.opts.Logger.Error("preparing a snapshot restore", "height", s.Height, "err", err)
		return consensus.OfferAbort
	}
	a.opts.Logger.Info("restoring a snapshot", "height", s.Height, "chunks", s.Chunks)
	a.restore = r
	return consensus.OfferAccept
}

// ApplySnapshotChunk implements consensus.Snapshotter. A chunk that does
// not match its hash is fetched again from another peer and its sender
// rejected; a chunk whose state does not prove under the trusted app hash
// (fsm.ErrStateRoot) rejects the snapshot and its sender, and CometBFT
// tries another snapshot; after the last chunk the state machine reloads
// on the restored state.
func (a *SnapshotApp) ApplySnapshotChunk(index uint32, chunk []byte, sender string) consensus.ChunkOutcome {
	r := a.restore
	if r == nil {
		return consensus.ChunkOutcome{Result: consensus.ApplyAbort}
	}
	var senders []string
	if sender != "" {
		senders = []string{sender}
	}
	err := r.Apply(index, chunk)
	switch {
	case err == nil:
	case errors.Is(err, fsm.ErrChunkHash):
		a.opts.Logger.Warn("a peer sent a snapshot chunk that does not match its hash", "chunk", index, "peer", sender)
		return consensus.ChunkOutcome{Result: consensus.ApplyRetry, Refetch: []uint32{index}, RejectSenders: senders}
	case errors.Is(err, fsm.ErrChunkOrder):
		return consensus.ChunkOutcome{Result: consensus.ApplyRetrySnapshot}
	case errors.Is(err, fsm.ErrStateRoot):
		// The chunk matches the snapshot's own chunk hashes, but a value in
		// it is not the one under the trusted app hash: the snapshot lies,
		// and so does every peer that advertises it.
		a.opts.Logger.Warn("refusing a snapshot whose state is not the one the validators signed", "chunk", index, "peer", sender, "err", err)
		a.dropRestore()
		return consensus.ChunkOutcome{Result: consensus.ApplyRejectSnapshot, RejectSenders: senders}
	case errors.Is(err, fsm.ErrSnapshotMalformed):
		a.opts.Logger.Warn("the snapshot being restored is malformed", "chunk", index, "err", err)
		a.dropRestore()
		return consensus.ChunkOutcome{Result: consensus.ApplyRejectSnapshot, RejectSenders: senders}
	default:
		a.opts.Logger.Error("writing a snapshot chunk", "chunk", index, "err", err)
		a.dropRestore()
		return consensus.ChunkOutcome{Result: consensus.ApplyAbort}
	}
	if !r.Complete() {
		return consensus.ChunkOutcome{Result: consensus.ApplyAccept}
	}
	err = a.f.RestoreSnapshot(r)
	a.restore = nil
	switch {
	case err == nil:
		h, hash := a.f.Info()
		a.opts.Logger.Info("snapshot restored", "height", h, "app_hash", hex.EncodeToString(hash))
		return consensus.ChunkOutcome{Result: consensus.ApplyAccept}
	case errors.Is(err, fsm.ErrSnapshotMalformed), errors.Is(err, fsm.ErrSnapshotMismatch):
		a.opts.Logger.Warn("the restored snapshot does not check out", "err", err)
		_ = r.Close()
		return consensus.ChunkOutcome{Result: consensus.ApplyRejectSnapshot}
	default:
		a.opts.Logger.Error("putting a restored snapshot in place", "err", err)
		_ = r.Close()
		return consensus.ChunkOutcome{Result: consensus.ApplyAbort}
	}
}

// dropRestore abandons the restore in progress, if any.
func (a *SnapshotApp) dropRestore() {
	if a.restore != nil {
		_ = a.restore.Close()
		a.restore = nil
	}
}
