package cometbft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/cometbft/cometbft/crypto/ed25519"

	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/store"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/storage"
)

var (
	// ErrNoHeader: no signed header of the height asked for is held: the
	// height is not committed yet, or was pruned before it was archived.
	ErrNoHeader = errors.New("stele/consensus/cometbft: no such signed header")
)

// headersDir is the header archive's store, below the CometBFT home.
const headersDir = "data/stele-headers"

// The header archive keeps, for every height whose header carries a new
// app hash, the header and the commit that signed it (a CometBFT
// SignedHeader, protobuf-encoded under h/<height u64>). Those headers prove
// the batches of the block before (pkg/proof), long after the block store
// pruned the block: a single node prunes every block once its state is
// durable, a cluster keeps RetainBlocks. A header is archived in the ABCI
// Commit of its height, before the block store may prune it; it is node-
// local (not state: the commits' signatures differ between brokers), about
// 1 KB a height, and kept as long as the data directory. Heights replayed
// at start, before the node runs, and heights a broker skipped by state
// sync are not archived: another broker can serve their proofs.
type headerArchive struct {
	mu     sync.RWMutex // closing waits for readers (HTTP handlers)
	st     *storage.Store
	closed bool
	last   []byte // app hash of the last header archived; Commit's only
}

// The archive also keeps every validator set the application's state has
// had (the genesis set, then each set its membership made: a validator
// voted out), protobuf-encoded under s/<the set's hash>, so a proof of a
// header that names a set other than the genesis one carries that set and
// a light client can follow the change (pkg/proof's VerifyHeaderWith).
// Sets change rarely: the set is archived at the first commit after start
// and after each block that changed it (abci.go's setArchived), and
// written unless it is stored already.

func setKey(hash []byte) []byte { return append([]byte("s/"), hash...) }

// archiveSet stores vals, the application's committed validator set,
// unless it is stored already.
func (h *headerArchive) archiveSet(vals []consensus.ValidatorUpdate) error {
	if len(vals) == 0 {
		return nil
	}
	var tv []*types.Validator
	for _, v := range vals {
		if len(v.PubKey) != ed25519.PubKeySize {
			return fmt.Errorf("stele/consensus/cometbft: a validator key of %d bytes", len(v.PubKey))
		}
		tv = append(tv, types.NewValidator(ed25519.PubKey(v.PubKey), v.Power))
	}
	set := types.NewValidatorSet(tv)
	pb, err := set.ToProto()
	if err != nil {
		return err
	}
	b, err := pb.Marshal()
	if err != nil {
		return err
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrNotStarted
	}
	key := setKey(set.Hash())
	if _, ok, err := h.st.Get(key); err != nil {
		return err
	} else if !ok {
		batch := h.st.NewBatch()
		batch.Set(key, b)
		if err := batch.Commit(false); err != nil {
			return err
		}
	}
	return nil
}

// getSet returns the archived validator set whose hash is hash (nil when
// none is).
func (h *headerArchive) getSet(hash []byte) ([]byte, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, ErrNotStarted
	}
	b, ok, err := h.st.Get(setKey(hash))
	if err != nil || !ok {
		return nil, err
	}
	return b, nil
}

func openHeaderArchive(home string) (*headerArchive, error) {
	st, err := storage.OpenStore(filepath.Join(home, headersDir))
	if err != nil {
		return nil, err
	}
	return &headerArchive{st: st}, nil
}

func headerKey(height int64) []byte {
	return binary.BigEndian.AppendUint64([]byte("h/"), uint64(height))
}

// archive stores the header of height with the commit this node saw for
// it, unless its app hash is the previous archived header's.
func (h *headerArchive) archive(bs *store.BlockStore, height int64) error {
	meta := bs.LoadBlockMeta(height)
	commit := bs.LoadSeenCommit(height)
	if meta == nil || commit == nil || commit.Height != height {
		return fmt.Errorf("%w: height %d is not in the block store", ErrNoHeader, height)
	}
	if h.last != nil && bytes.Equal(h.last, meta.Header.AppHash) {
		return nil
	}
	sh := types.SignedHeader{Header: &meta.Header, Commit: commit}
	b, err := sh.ToProto().Marshal()
	if err != nil {
		return fmt.Errorf("stele/consensus/cometbft: encoding the header of height %d: %w", height, err)
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrNotStarted
	}
	batch := h.st.NewBatch()
	batch.Set(headerKey(height), b)
	if err := batch.Commit(false); err != nil {
		return err
	}
	h.last = append(h.last[:0], meta.Header.AppHash...)
	return nil
}

func (h *headerArchive) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return h.st.Close()
}

func (h *headerArchive) get(height int64) (*types.SignedHeader, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, ErrNotStarted
	}
	b, ok, err := h.st.Get(headerKey(height))
	if err != nil || !ok {
		return nil, err
	}
	var pb cmtproto.SignedHeader
	if err := pb.Unmarshal(b); err != nil {
		return nil, fmt.Errorf("stele/consensus/cometbft: archived header of height %d: %w", height, err)
	}
	return types.SignedHeaderFromProto(&pb)
}

// HeaderValidators returns the validator set the header of height names,
// protobuf-encoded, when that is not the genesis set and this node has
// archived it; nil otherwise (the genesis set, which clients trust
// already, or a set this node never held: another broker's proof carries
// it).
func (o *Orderer) HeaderValidators(height int64) []byte {
	sh, err := o.SignedHeader(height)
	if err != nil {
		return nil
	}
	o.mu.Lock()
	n, a := o.mu.node, o.mu.abci
	o.mu.Unlock()
	var gv []*types.Validator
	for _, v := range n.GenesisDoc().Validators {
		gv = append(gv, types.NewValidator(v.PubKey, v.Power))
	}
	if bytes.Equal(types.NewValidatorSet(gv).Hash(), sh.ValidatorsHash) {
		return nil
	}
	b, err := a.headers.getSet(sh.ValidatorsHash)
	if err != nil {
		return nil
	}
	return b
}

// SignedHeader returns the header of height with a commit that signed it:
// from the header archive, or else from the node's block store (the
// commit stored with the next block, or the one this node saw for the
// latest). It is what proves the app hash of height-1 (pkg/proof).
func (o *Orderer) SignedHeader(height int64) (*types.SignedHeader, error) {
	o.mu.Lock()
	n, a := o.mu.node, o.mu.abci
	running := o.mu.state == stateRunning
	o.mu.Unlock()
	if !running {
		return nil, ErrNotStarted
	}
	if sh, err := a.headers.get(height); err != nil || sh != nil {
		return sh, err
	}
	bs := n.BlockStore()
	meta := bs.LoadBlockMeta(height)
	if meta == nil {
		return nil, fmt.Errorf("%w: height %d (the block store holds %d to %d)", ErrNoHeader, height, bs.Base(), bs.Height())
	}
	commit := bs.LoadBlockCommit(height)
	if commit == nil {
		commit = bs.LoadSeenCommit(height)
	}
	if commit == nil || commit.Height != height {
		return nil, fmt.Errorf("%w: no commit for height %d yet", ErrNoHeader, height)
	}
	return &types.SignedHeader{Header: &meta.Header, Commit: commit}, nil
}

// BlockTxs returns the transactions of the block at height if this node's
// block store holds it (a block block sync has stored counts, applied or
// not: its commit was checked). False before Start, after Stop, or for a
// height pruned or not reached.
func (o *Orderer) BlockTxs(height int64) ([][]byte, bool) {
	n := o.Node()
	if n == nil || height < 1 {
		return nil, false
	}
	b := n.BlockStore().LoadBlock(height)
	if b == nil {
		return nil, false
	}
	return b.Txs.ToSliceOfBytes(), true
}
