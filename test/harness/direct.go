package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Requests to one broker. A franz-go client routes by metadata and may go
// to any broker; these helpers send raw kmsg requests to the seed broker of
// a client seeded with node i only, so the answer is node i's own view.

// LogRecord is one record as a broker stores it.
type LogRecord struct {
	Offset int64
	Value  string
}

// DirectClient returns node i's single-broker client (made once). Its
// requests may wait out a broker's read barrier (up to 5 s, then
// NOT_LEADER_OR_FOLLOWER): requests without a timeout of their own
// (ListOffsets, OffsetForLeaderEpoch) are given 8 s.
func (c *Cluster) DirectClient(i int) *kgo.Client {
	c.T.Helper()
	n := c.Nodes[i]
	if n.direct == nil {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.Kafka), kgo.DialTimeout(2 * time.Second),
			kgo.RequestTimeoutOverhead(8 * time.Second)}, c.ClientOpts...)...)
		if err != nil {
			c.T.Fatal(err)
		}
		n.direct = cl
	}
	return n.direct
}

// Request sends req to node i itself.
func (c *Cluster) Request(ctx context.Context, i int, req kmsg.Request) (kmsg.Response, error) {
	return c.DirectClient(i).SeedBrokers()[0].Request(ctx, req)
}

// HighWatermarks asks node i (ListOffsets, latest) for the high watermark of
// partitions 0..parts-1 of topic. In a cluster the broker first waits for a
// read barrier (a consensus round, up to 5 s, longer after a kill moves the
// proposer), so the request may take that long; a broker that cannot get
// one answers NOT_LEADER_OR_FOLLOWER. HeldHighWatermarks reads what a
// broker holds without a barrier.
func (c *Cluster) HighWatermarks(i int, topic string, parts int32) ([]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	kresp, err := c.Request(ctx, i, req)
	if err != nil {
		return nil, fmt.Errorf("node%d ListOffsets: %w", i, err)
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	hwm := make([]int64, parts)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != int(parts) {
		return nil, fmt.Errorf("node%d ListOffsets: answer for %d topics", i, len(resp.Topics))
	}
	for _, rp := range resp.Topics[0].Partitions {
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			return nil, fmt.Errorf("node%d ListOffsets %s-%d: %w", i, topic, rp.Partition, err)
		}
		hwm[rp.Partition] = rp.Offset
	}
	return hwm, nil
}

// HeldHighWatermarks asks node i for the high watermark of partitions
// 0..parts-1 of topic as it holds them, from Fetch answers at offset 0:
// unlike ListOffsets, a read inside the log needs no read barrier, so a
// node cut off from the others answers too (with what it has).
func (c *Cluster) HeldHighWatermarks(i int, topic string, parts int32) ([]int64, error) {
	hwm := make([]int64, parts)
	for p := range parts {
		fp, err := c.RawFetch(i, topic, p, 0)
		if err != nil {
			return nil, err
		}
		hwm[p] = fp.HighWatermark
	}
	return hwm, nil
}

// FetchAll reads partition p of topic from node i, from offset 0 to the
// high watermark node i reports, with raw Fetch requests.
func (c *Cluster) FetchAll(i int, topic string, p int32) ([]LogRecord, error) {
	var out []LogRecord
	next := int64(0)
	for {
		fp, err := c.RawFetch(i, topic, p, next)
		if err != nil {
			return nil, err
		}
		if next >= fp.HighWatermark {
			return out, nil
		}
		recs, err := DecodeBatches(topic, p, next, fp.RecordBatches)
		if err != nil {
			return nil, fmt.Errorf("node%d Fetch %s-%d@%d: %w", i, topic, p, next, err)
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("node%d Fetch %s-%d@%d: no records below the high watermark %d", i, topic, p, next, fp.HighWatermark)
		}
		out = append(out, recs...)
		next = recs[len(recs)-1].Offset + 1
	}
}

// RawFetch asks node i for partition p of topic from offset next (one raw
// read_uncommitted Fetch, no wait) and returns its answer for the
// partition, or the error it carried.
func (c *Cluster) RawFetch(i int, topic string, p int32, next int64) (kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 0, 8<<20
	req.SessionID, req.SessionEpoch = 0, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, next, 4<<20
	rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	kresp, err := c.Request(ctx, i, req)
	cancel()
	if err != nil {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("node%d Fetch %s-%d@%d: %w", i, topic, p, next, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("node%d Fetch: %w", i, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("node%d Fetch %s-%d: answer has %d topics", i, topic, p, len(resp.Topics))
	}
	fp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		return fp, fmt.Errorf("node%d Fetch %s-%d@%d: %w", i, topic, p, next, err)
	}
	return fp, nil
}

// DecodeBatches decodes back-to-back RecordBatch v2 bytes (a Fetch answer
// or a segment file) into records at or after offset from.
func DecodeBatches(topic string, p int32, from int64, data []byte) ([]LogRecord, error) {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition, rp.HighWatermark, rp.RecordBatches = p, 1<<62, data
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: topic, Partition: p, Offset: from},
		&rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		return nil, fp.Err
	}
	out := make([]LogRecord, 0, len(fp.Records))
	for _, r := range fp.Records {
		out = append(out, LogRecord{Offset: r.Offset, Value: string(r.Value)})
	}
	return out, nil
}

// RawProduce sends one batch of values to partition p of topic on node i
// itself (acks=all, the given produce timeout) and returns the partition's
// error code and base offset. The values should be registered with the
// workload first (workload.registerRaw), since a produce that timed out
// may still be committed later.
func (c *Cluster) RawProduce(i int, topic string, p int32, timeout time.Duration, values ...string) (int16, int64, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, int32(timeout.Milliseconds())
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, EncodeBatch(time.Now().UnixMilli(), values...)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	kresp, err := c.Request(ctx, i, req)
	if err != nil {
		return 0, -1, fmt.Errorf("node%d Produce: %w", i, err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, -1, fmt.Errorf("node%d Produce: answer has %d topics", i, len(resp.Topics))
	}
	sp := resp.Topics[0].Partitions[0]
	return sp.ErrorCode, sp.BaseOffset, nil
}

// EncodeBatch builds an uncompressed RecordBatch v2 without producer id
// holding values, all with timestamp ts.
func EncodeBatch(ts int64, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		body := r.AppendTo(nil)[1:] // drop the zero length varint AppendTo wrote
		recs = kbin.AppendVarint(recs, int32(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, 0, 61+len(recs))
	b = binary.BigEndian.AppendUint64(b, 0)                     // base offset
	b = binary.BigEndian.AppendUint32(b, 0)                     // length, below
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)            // partition leader epoch -1
	b = append(b, 2)                                            // magic
	b = binary.BigEndian.AppendUint32(b, 0)                     // crc, below
	b = binary.BigEndian.AppendUint16(b, 0)                     // attributes
	b = binary.BigEndian.AppendUint32(b, uint32(len(values)-1)) // last offset delta
	b = binary.BigEndian.AppendUint64(b, uint64(ts))            // first timestamp
	b = binary.BigEndian.AppendUint64(b, uint64(ts))            // max timestamp
	b = binary.BigEndian.AppendUint64(b, 0xffffffffffffffff)    // producer id -1
	b = binary.BigEndian.AppendUint16(b, 0xffff)                // producer epoch -1
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)            // base sequence -1
	b = binary.BigEndian.AppendUint32(b, uint32(len(values)))   // record count
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}
