package core

// Batch proofs (issue 9, DESIGN.md §4): the app hash commits to every batch
// appended to a partition log, as stored, so that a client can check a
// batch it read against a header signed by the validators without trusting
// the broker that served it.
//
// Each append in a block (a produced batch after its base offset, partition
// leader epoch and log-append time are set; a transaction marker) gives one
// leaf, in apply order (proof.BatchLeaf), and the block's app hash is
// proof.AppHash(digest, stateRoot, root)
// where digest is the hash chaining the previous app hash, the height, the
// block time, every transaction and its results and the housekeeping
// changes (ApplyBlock), stateRoot the root of the authenticated state after
// the block (authstate.go), and root is the Merkle root of the block's leaves
// (CometBFT's crypto/merkle, RFC 6962: the root of no leaves is the hash of
// nothing). A proof of one batch is the digest, the state root, its leaf's Merkle path, and
// the header of the next height, which carries this app hash, with the
// commit signed by the validators (added by the broker, which holds the
// blocks). The state keeps, in the metadata store:
//
//	v/<height u64>                                     digest, state root and the block's leaves
//	b/<topic id [16]><partition u32><base offset u64>  height and leaf index of the batch
//
// The core writes v/ (persistProofs, after the app hash); the topics
// module, which appends the batches, adds the leaves and writes b/ in its
// stage step (topic_proofs.go). Both are written in the block's synced
// batch and ship with snapshots;
// the batch entries of a deleted topic go with it. Entries of batches that
// retention removed stay (about 40 bytes a batch and 32 a block) until the
// topic is deleted.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// proofVersion is the format of v/<height>: 2 added the state root.
const proofVersion = 2

// ErrNoProof: no proof exists for what was asked (an offset outside the
// log, a batch written before proofs were kept, or rewritten by compaction).
var ErrNoProof = errors.New("stele/fsm: no proof")

func blockProofKey(height int64) []byte {
	return binary.BigEndian.AppendUint64([]byte("v/"), uint64(height))
}

// persistProofs adds the block's v/ entry to the state's batch (the
// topics module's stage wrote its batches' b/ entries, topic_proofs.go).
func (f *Machine) persistProofs(set func(k, v []byte)) {
	if len(f.Leaves) == 0 {
		return
	}
	w := &Writer{}
	w.U8(proofVersion)
	w.Bytes(f.blockDigest)
	w.Bytes(f.StateRoot)
	w.Count(len(f.Leaves))
	for _, l := range f.Leaves {
		w.Raw(l)
	}
	set(blockProofKey(f.Height), w.B)
}

// BlockProofEntry reads the v/ entry of height: the block's digest, its
// state root and its leaves, in append order. None kept is ErrNoProof.
func (f *Machine) BlockProofEntry(height int64) (digest, stateRoot []byte, leaves [][]byte, err error) {
	v, ok, err := f.Store.Get(blockProofKey(height))
	if err != nil {
		return nil, nil, nil, err
	}
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: no leaves kept for height %d", ErrNoProof, height)
	}
	r := &Reader{B: v}
	if ver := r.U8(); ver != proofVersion {
		return nil, nil, nil, fmt.Errorf("stele/fsm: proof format %d is not supported by this version (%d)", ver, proofVersion)
	}
	digest = append([]byte(nil), r.Bytes()...)
	stateRoot = append([]byte(nil), r.Bytes()...)
	n := r.Count(sha256.Size)
	leaves = make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		leaves = append(leaves, r.Take(sha256.Size))
	}
	if r.E != nil {
		return nil, nil, nil, fmt.Errorf("stele/fsm: proof entry of height %d: %w", height, r.E)
	}
	return digest, stateRoot, leaves, nil
}
