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
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/crypto/merkle"

	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// proofVersion is the format of v/<height>: 2 added the state root.
const proofVersion = 2

// ErrNoProof: no proof exists for what was asked (an offset outside the
// log, a batch written before proofs were kept, or rewritten by compaction).
var ErrNoProof = errors.New("stele/fsm: no proof")

// batchRef is a batch appended in the block being applied.
type batchRef struct {
	topic     *Topic
	partition int32
	base      int64
}

// proveAppend records the leaf of a batch just appended to p.
func (f *FSM) proveAppend(t *Topic, p *Partition, base int64, batch []byte) {
	f.leaves = append(f.leaves, proof.BatchLeaf(t.Name, t.ID, p.Index, base, batch))
	f.leafRefs = append(f.leafRefs, batchRef{t, p.Index, base})
}

func blockProofKey(height int64) []byte {
	return binary.BigEndian.AppendUint64([]byte("v/"), uint64(height))
}

func batchProofPrefix(id TopicID) []byte { return append([]byte("b/"), id[:]...) }

func batchProofKey(id TopicID, partition int32, base int64) []byte {
	k := binary.BigEndian.AppendUint32(batchProofPrefix(id), uint32(partition))
	return binary.BigEndian.AppendUint64(k, uint64(base))
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

// BatchProof is the state's part of the proof of one stored batch: the
// batch as the log holds it, and how it reaches the app hash of Height
// (which the header of Height+1 carries).
type BatchProof struct {
	Topic      string
	TopicID    TopicID
	Partition  int32
	BaseOffset int64
	LastOffset int64
	Batch      []byte
	Height     int64
	Digest     []byte       // the block's transactions and changes
	StateRoot  []byte       // the authenticated state's root after the block
	Root       []byte       // the Merkle root of the block's appended batches
	Path       merkle.Proof // the batch's leaf under Root
}

// located is the committed batch holding an offset and where its proof is.
type located struct {
	t      *TopicView
	batch  []byte
	head   record.Header
	height int64
	index  int
}

// locate finds the committed batch holding offset and the height and leaf
// index of its proof entry.
func (f *FSM) locate(topic string, partition int32, offset int64) (*located, error) {
	t := f.View().Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	if partition < 0 || int(partition) >= len(t.Partitions) {
		return nil, fmt.Errorf("%w: %s has no partition %d", ErrUnknownTopic, topic, partition)
	}
	p := t.Partitions[partition]
	if offset < p.LogStartOffset() || offset >= p.HighWatermark() {
		return nil, fmt.Errorf("%w: offset %d, log start %d, high watermark %d", ErrOffsetOutOfRange, offset, p.LogStartOffset(), p.HighWatermark())
	}
	data, err := p.Read(offset, 1)
	if err != nil {
		return nil, err
	}
	batches, err := record.Split(data)
	if err != nil {
		return nil, err
	}
	if len(batches) == 0 {
		return nil, fmt.Errorf("%w: nothing stored at %s-%d offset %d", ErrNoProof, topic, partition, offset)
	}
	l := &located{t: t, batch: batches[0]}
	if l.head, err = record.ParseHeader(l.batch); err != nil {
		return nil, err
	}
	if l.head.BaseOffset > offset || l.head.LastOffset() < offset {
		return nil, fmt.Errorf("%w: offset %d of %s-%d was removed by compaction", ErrNoProof, offset, topic, partition)
	}
	ref, ok, err := f.store.Get(batchProofKey(t.ID, partition, l.head.BaseOffset))
	if err != nil {
		return nil, err
	}
	if !ok || len(ref) != 12 {
		return nil, fmt.Errorf("%w: the batch at %s-%d offset %d was written before this version kept proofs", ErrNoProof, topic, partition, l.head.BaseOffset)
	}
	l.height, l.index = int64(binary.BigEndian.Uint64(ref)), int(binary.BigEndian.Uint32(ref[8:]))
	return l, nil
}

// BatchHeight returns the height of the block that appended the committed
// batch holding offset, and the batch's first and last offsets: a Kafka
// producer, which learns only offsets, reads its write's height here.
// Errors as ProveBatch's.
func (f *FSM) BatchHeight(topic string, partition int32, offset int64) (height, base, last int64, err error) {
	l, err := f.locate(topic, partition, offset)
	if err != nil {
		return 0, 0, 0, err
	}
	return l.height, l.head.BaseOffset, l.head.LastOffset(), nil
}

// ProveBatch returns the proof of the committed batch that holds offset in
// the partition. It fails with ErrUnknownTopic, ErrOffsetOutOfRange (an
// offset below the log start or at or past the high watermark), or
// ErrNoProof (a batch appended before this version kept proofs, or one
// compaction rewrote).
func (f *FSM) ProveBatch(topic string, partition int32, offset int64) (*BatchProof, error) {
	l, err := f.locate(topic, partition, offset)
	if err != nil {
		return nil, err
	}
	t, batch, h, height, index := l.t, l.batch, l.head, l.height, l.index
	v, ok, err := f.store.Get(blockProofKey(height))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: no leaves kept for height %d", ErrNoProof, height)
	}
	r := &reader{b: v}
	if ver := r.u8(); ver != proofVersion {
		return nil, fmt.Errorf("stele/fsm: proof format %d is not supported by this version (%d)", ver, proofVersion)
	}
	digest := append([]byte(nil), r.bytes()...)
	stateRoot := append([]byte(nil), r.bytes()...)
	n := r.count(sha256.Size)
	leaves := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		leaves = append(leaves, r.take(sha256.Size))
	}
	if r.e != nil {
		return nil, fmt.Errorf("stele/fsm: proof entry of height %d: %w", height, r.e)
	}
	if index >= len(leaves) {
		return nil, fmt.Errorf("stele/fsm: proof entry of height %d has %d leaves, batch index %d", height, len(leaves), index)
	}
	if !bytes.Equal(leaves[index], proof.BatchLeaf(t.Name, t.ID, partition, h.BaseOffset, batch)) {
		return nil, fmt.Errorf("%w: the batch at %s-%d offset %d was rewritten by compaction since height %d", ErrNoProof, topic, partition, h.BaseOffset, height)
	}
	root, proofs := merkle.ProofsFromByteSlices(leaves)
	return &BatchProof{
		Topic: t.Name, TopicID: t.ID, Partition: partition, BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(),
		Batch: append([]byte(nil), batch...), Height: height, Digest: digest, StateRoot: stateRoot, Root: root, Path: *proofs[index],
	}, nil
}
