package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/pkg/proof"
)

// auditState proves, through the broker, each topic's state and every
// partition's offsets against the validators (the broker's state must hash
// to the state root they signed), and checks that what the broker answers
// over Kafka is not ahead of it: its offsets are read first, so the proven
// state, of a later height, may only be at or past them (offsets never go
// back).
func auditState(ctx context.Context, g *globalOptions, out io.Writer, n *auditNode, topics []string) error {
	cl, err := g.newClient(kgo.SeedBrokers(n.kafka))
	if err != nil {
		return err
	}
	defer cl.Close()
	seed := cl.SeedBrokers()[0]
	proven := 0
	for _, topic := range topics {
		starts, err1 := listOffsetsAt(ctx, seed, topic, -2)
		ends, err2 := listOffsetsAt(ctx, seed, topic, -1)
		if err := errors.Join(err1, err2); err != nil {
			n.diverge("topic %s: listing offsets: %v", topic, err)
			continue
		}
		v, err := n.proofs.ProveState(ctx, proof.TopicKey(topic))
		if err != nil {
			n.diverge("topic %s: its state is not proven: %v", topic, err)
			continue
		}
		raw := v.Values[string(proof.TopicKey(topic))]
		if raw == nil {
			n.diverge("topic %s: listed over Kafka, but proven absent from the state at height %d", topic, v.Height)
			continue
		}
		t, err := proof.DecodeTopic(raw)
		if err != nil {
			n.diverge("topic %s: the proven topic does not decode: %v", topic, err)
			continue
		}
		keys := make([][]byte, t.Partitions)
		for p := range keys {
			keys[p] = proof.PartitionKey(topic, int32(p))
		}
		for lo := 0; lo < len(keys); lo += proof.MaxStateProofKeys {
			hi := min(lo+proof.MaxStateProofKeys, len(keys))
			v, err := n.proofs.ProveState(ctx, keys[lo:hi]...)
			if err != nil {
				n.diverge("topic %s: partition offsets not proven: %v", topic, err)
				break
			}
			for p := lo; p < hi; p++ {
				raw := v.Values[string(keys[p])]
				if raw == nil {
					n.diverge("%s-%d: proven absent from the state at height %d, though the topic has %d partitions", topic, p, v.Height, t.Partitions)
					continue
				}
				pp, err := proof.DecodePartition(raw)
				if err != nil {
					n.diverge("%s-%d: the proven offsets do not decode: %v", topic, p, err)
					continue
				}
				proven++
				if e, ok := ends[int32(p)]; ok && e > pp.HighWatermark {
					n.diverge("%s-%d: serves high watermark %d over Kafka, above the %d its proven state holds at a later height (%d)", topic, p, e, pp.HighWatermark, v.Height)
				}
				if s, ok := starts[int32(p)]; ok && s > pp.LogStartOffset {
					n.diverge("%s-%d: serves log start offset %d over Kafka, above the %d its proven state holds at a later height (%d)", topic, p, s, pp.LogStartOffset, v.Height)
				}
			}
		}
	}
	fmt.Fprintf(out, "broker %s: the state of %d topics and %d partitions proven\n", n.kafka, len(topics), proven)
	return nil
}

// listOffsetsAt asks this broker itself (not the partitions' leaders, as a
// Kafka client would) for the offsets at timestamp (-2 earliest, -1
// latest) of every partition of topic it answers for without an error.
func listOffsetsAt(ctx context.Context, b *kgo.Broker, topic string, timestamp int64) (map[int32]int64, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, b)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, t := range mresp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.Partition, timestamp, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}
