package record

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// A real franz-go producer writes batches (idempotent, compressed with each
// codec) to an in-process kfake cluster; fetched back raw, they pass
// ValidateStored and decode to exactly what was produced, and each one
// passed Validate as a produce once its base offset is set back to 0.
func TestFranzGoClientBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kfake cluster")
	}
	codecs := map[Codec]kgo.CompressionCodec{
		CodecNone:   kgo.NoCompression(),
		CodecGzip:   kgo.GzipCompression(),
		CodecSnappy: kgo.SnappyCompression(),
		CodecLZ4:    kgo.Lz4Compression(),
		CodecZstd:   kgo.ZstdCompression(),
	}
	var topics []string
	for c := range codecs {
		topics = append(topics, "t-"+c.String())
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			topic := "t-" + c.String()
			cl, err := kgo.NewClient(
				kgo.SeedBrokers(cluster.ListenAddrs()...),
				kgo.DefaultProduceTopic(topic),
				kgo.ProducerBatchCompression(codecs[c]),
				kgo.ProducerLinger(20*time.Millisecond),
				kgo.MaxVersions(kversion.V3_0_0()), // Fetch by topic name
			)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()

			var produced []*kgo.Record
			for i := range 60 {
				r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "value %d %0*d", i, i*10, 0)}
				switch i % 3 {
				case 1:
					r.Value = nil
					r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte{1, 2, 3}}, {Key: "empty"}}
				case 2:
					r.Key = nil
				}
				produced = append(produced, r)
			}
			if err := cl.ProduceSync(ctx, produced[:1]...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, produced[1:]...).FirstErr(); err != nil {
				t.Fatal(err)
			}

			raw := fetchRaw(ctx, t, cl, topic)
			batches, err := Split(raw)
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if len(batches) < 2 {
				t.Fatalf("%d batches; want at least 2", len(batches))
			}
			var got []Record
			compressed := 0
			for _, b := range batches {
				h, err := ValidateStored(b)
				if err != nil {
					t.Fatalf("ValidateStored: %v", err)
				}
				if h.ProducerID < 0 || h.BaseSequence < 0 {
					t.Fatalf("header %+v: want an idempotent batch", h)
				}
				// franz-go sends a batch uncompressed when compressing
				// would not shrink it.
				if h.Codec() == c {
					compressed++
				} else if h.Codec() != CodecNone {
					t.Fatalf("header %+v: codec %v, want %v", h, h.Codec(), c)
				}
				_, recs, err := Records(b)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, recs...)
				SetBaseOffset(b, 0)
				if _, err := Validate(b); err != nil {
					t.Fatalf("Validate of the batch as produced: %v", err)
				}
			}
			if compressed == 0 {
				t.Fatalf("no batch was compressed with %v", c)
			}
			if len(got) != len(produced) {
				t.Fatalf("%d records fetched, %d produced", len(got), len(produced))
			}
			for i, r := range got {
				p := produced[i]
				if r.Offset != int64(i) || r.Offset != p.Offset || r.Timestamp != p.Timestamp.UnixMilli() ||
					!sameBytes(r.Key, p.Key) || !sameBytes(r.Value, p.Value) || len(r.Headers) != len(p.Headers) {
					t.Fatalf("record %d: got %+v, produced %+v", i, r, p)
				}
				for j, h := range r.Headers {
					if h.Key != p.Headers[j].Key || string(h.Value) != string(p.Headers[j].Value) {
						t.Fatalf("record %d header %d: %+v, want %+v", i, j, h, p.Headers[j])
					}
				}
			}
		})
	}
}

// fetchRaw returns the raw records field of a Fetch of partition 0.
func fetchRaw(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) []byte {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = 16 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 16 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch response %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("fetch error code %d", p.ErrorCode)
	}
	return p.RecordBatches
}
