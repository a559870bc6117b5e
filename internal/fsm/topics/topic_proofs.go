package topics

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cometbft/cometbft/crypto/merkle"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// The topics module's part of batch proofs (proofs.go): the leaf of each
// batch appended to a partition log, the b/ entries that say which block
// and leaf a batch is, and the proofs of committed batches readers ask for.

// batchRef is a batch appended in the block being applied.
type batchRef struct {
	topic     *Topic
	partition int32
	base      int64
}

// proveAppend records the leaf of a batch just appended to p.
func (f *Topics) proveAppend(t *Topic, p *Partition, base int64, batch []byte) {
	f.Leaves = append(f.Leaves, proof.BatchLeaf(t.Name, t.ID, p.Index, base, batch))
	f.leafRefs = append(f.leafRefs, batchRef{t, p.Index, base})
}

// stageBatchRefs writes the b/ entry of every batch the block appended,
// but those of a topic it deleted: the block's height and the batch's
// leaf index. The entries are outside the state trie (persist.go), so
// they go straight into the store's batch, after the deleted topics'
// b/ prefixes are dropped (stageTopics).
func stageBatchRefs(f *Topics, b *core.StateBatch) {
	for i, r := range f.leafRefs {
		if r.topic.Deleted {
			continue
		}
		v := binary.BigEndian.AppendUint64(nil, uint64(f.Height))
		b.B.Set(batchProofKey(r.topic.ID, r.partition, r.base), binary.BigEndian.AppendUint32(v, uint32(i)))
	}
}

func BatchProofPrefix(id core.TopicID) []byte { return append([]byte("b/"), id[:]...) }

func batchProofKey(id core.TopicID, partition int32, base int64) []byte {
	k := binary.BigEndian.AppendUint32(BatchProofPrefix(id), uint32(partition))
	return binary.BigEndian.AppendUint64(k, uint64(base))
}

// BatchProof is the state's part of the proof of one stored batch: the
// batch as the log holds it, and how it reaches the app hash of Height
// (which the header of Height+1 carries).
type BatchProof struct {
	Topic      string
	TopicID    core.TopicID
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
func (f *Topics) locate(topic string, partition int32, offset int64) (*located, error) {
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
		return nil, fmt.Errorf("%w: nothing stored at %s-%d offset %d", core.ErrNoProof, topic, partition, offset)
	}
	l := &located{t: t, batch: batches[0]}
	if l.head, err = record.ParseHeader(l.batch); err != nil {
		return nil, err
	}
	if l.head.BaseOffset > offset || l.head.LastOffset() < offset {
		return nil, fmt.Errorf("%w: offset %d of %s-%d was removed by compaction", core.ErrNoProof, offset, topic, partition)
	}
	ref, ok, err := f.Store.Get(batchProofKey(t.ID, partition, l.head.BaseOffset))
	if err != nil {
		return nil, err
	}
	if !ok || len(ref) != 12 {
		return nil, fmt.Errorf("%w: the batch at %s-%d offset %d was written before this version kept proofs", core.ErrNoProof, topic, partition, l.head.BaseOffset)
	}
	l.height, l.index = int64(binary.BigEndian.Uint64(ref)), int(binary.BigEndian.Uint32(ref[8:]))
	return l, nil
}

// BatchHeight returns the height of the block that appended the committed
// batch holding offset, and the batch's first and last offsets: a Kafka
// producer, which learns only offsets, reads its write's height here.
// Errors as ProveBatch's.
func (f *Topics) BatchHeight(topic string, partition int32, offset int64) (height, base, last int64, err error) {
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
func (f *Topics) ProveBatch(topic string, partition int32, offset int64) (*BatchProof, error) {
	l, err := f.locate(topic, partition, offset)
	if err != nil {
		return nil, err
	}
	t, batch, h, height, index := l.t, l.batch, l.head, l.height, l.index
	digest, stateRoot, leaves, err := f.BlockProofEntry(height)
	if err != nil {
		return nil, err
	}
	if index >= len(leaves) {
		return nil, fmt.Errorf("stele/fsm: proof entry of height %d has %d leaves, batch index %d", height, len(leaves), index)
	}
	if !bytes.Equal(leaves[index], proof.BatchLeaf(t.Name, t.ID, partition, h.BaseOffset, batch)) {
		return nil, fmt.Errorf("%w: the batch at %s-%d offset %d was rewritten by compaction since height %d", core.ErrNoProof, topic, partition, h.BaseOffset, height)
	}
	root, proofs := merkle.ProofsFromByteSlices(leaves)
	return &BatchProof{
		Topic: t.Name, TopicID: t.ID, Partition: partition, BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(),
		Batch: append([]byte(nil), batch...), Height: height, Digest: digest, StateRoot: stateRoot, Root: root, Path: *proofs[index],
	}, nil
}
