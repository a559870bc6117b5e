package fsm

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
// Both are written in the block's synced batch and ship with snapshots;
// the batch entries of a deleted topic go with it. Entries of batches that
// retention removed stay (about 40 bytes a batch and 32 a block) until the
// topic is deleted.

import (
	"encoding/binary"
	"errors"
)

// proofVersion is the format of v/<height>: 2 added the state root.
const proofVersion = 2

// ErrNoProof: no proof exists for what was asked (an offset outside the
// log, a batch written before proofs were kept, or rewritten by compaction).
var ErrNoProof = errors.New("stele/fsm: no proof")

func blockProofKey(height int64) []byte {
	return binary.BigEndian.AppendUint64([]byte("v/"), uint64(height))
}

// persistProofs adds the block's proof entries to the state's batch.
func (f *FSM) persistProofs(set func(k, v []byte)) {
	if len(f.leaves) == 0 {
		return
	}
	w := &writer{}
	w.u8(proofVersion)
	w.bytes(f.blockDigest)
	w.bytes(f.stateRoot)
	w.count(len(f.leaves))
	for _, l := range f.leaves {
		w.raw(l)
	}
	set(blockProofKey(f.height), w.b)
	for i, r := range f.leafRefs {
		if r.topic.deleted {
			continue
		}
		v := binary.BigEndian.AppendUint64(nil, uint64(f.height))
		set(batchProofKey(r.topic.ID, r.partition, r.base), binary.BigEndian.AppendUint32(v, uint32(i)))
	}
}
