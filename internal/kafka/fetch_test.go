package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/record"
)

// TestFetchMaxBytesKIP74: a Fetch answer honours max_bytes and
// partition_max_bytes as Kafka's ReplicaManager.readFromLog does
// (Reference: KIP-74): the first partition with data returns its first
// batch whole even when it is larger than either limit; every partition
// after that gets only whole batches that fit in both its own limit and in
// what is left of max_bytes, and nothing when its first batch does not fit.
func TestFetchMaxBytesKIP74(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 3, -1, nil, "f74"); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		for i := 0; i < 3; i++ { // one batch per record: ProduceSync waits for each
			if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "f74", Partition: p, Value: make([]byte, 1000)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// fetch returns how many whole batches each partition got and the
	// answer's record bytes; offsets[p] is partition p's fetch offset.
	fetch := func(maxBytes, partMax int32, offsets [3]int64) ([3]int, int) {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = 12
		req.MaxWaitMillis, req.MaxBytes = 0, maxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "f74"
		for p := int32(0); p < 3; p++ {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offsets[p], partMax
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		var got [3]int
		total := 0
		for _, sp := range resp.Topics[0].Partitions {
			if sp.ErrorCode != 0 {
				t.Fatalf("partition %d: error %d", sp.Partition, sp.ErrorCode)
			}
			batches, err := record.Split(sp.RecordBatches)
			if err != nil {
				t.Fatalf("partition %d: %v (a partial batch?)", sp.Partition, err)
			}
			got[sp.Partition] = len(batches)
			total += len(sp.RecordBatches)
		}
		return got, total
	}
	all, total := fetch(1<<20, 1<<20, [3]int64{})
	if all != [3]int{3, 3, 3} {
		t.Fatalf("unlimited fetch: batches %v, want 3 per partition", all)
	}
	size := int32(total / 9) // every batch has the same size
	cases := []struct {
		name           string
		maxBytes, part int32
		offsets        [3]int64
		want           [3]int
		mayExceedByOne bool
	}{
		{"max_bytes 1.5 batches", size + size/2, 1 << 20, [3]int64{}, [3]int{1, 0, 0}, false},
		{"max_bytes half a batch: the first still goes out", size / 2, 1 << 20, [3]int64{}, [3]int{1, 0, 0}, true},
		{"max_bytes 0", 0, 1 << 20, [3]int64{}, [3]int{1, 0, 0}, true},
		{"partition_max_bytes half a batch", 1 << 20, size / 2, [3]int64{}, [3]int{1, 0, 0}, true},
		{"max_bytes 2.5, partition 2 batches", 2*size + size/2, 2 * size, [3]int64{}, [3]int{2, 0, 0}, false},
		{"max_bytes 4.5, partition 2.5 batches", 4*size + size/2, 2*size + size/2, [3]int64{}, [3]int{2, 2, 0}, false},
		{"first partition at its end: the next is first with data", size / 2, 1 << 20, [3]int64{3, 0, 0}, [3]int{0, 1, 0}, true},
		{"first partition at its end, then the limits", 2*size + size/2, size + size/2, [3]int64{3, 1, 0}, [3]int{0, 1, 1}, false},
	}
	for _, c := range cases {
		got, n := fetch(c.maxBytes, c.part, c.offsets)
		if got != c.want {
			t.Errorf("%s: batches %v, want %v", c.name, got, c.want)
		}
		if limit := int(c.maxBytes); n > limit && !(c.mayExceedByOne && n == int(size)) {
			t.Errorf("%s: %d bytes for max_bytes %d", c.name, n, limit)
		}
	}
}

// TestFetchTinyLimitsProgress: a franz-go consumer whose fetch limits are
// smaller than every batch still reads every record (KIP-74).
func TestFetchTinyLimitsProgress(t *testing.T) {
	addr := newTestBroker(t)
	cl := client(t, addr, kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx(t), 3, -1, nil, "tiny"); err != nil {
		t.Fatal(err)
	}
	const perPartition = 4
	for p := int32(0); p < 3; p++ {
		for i := 0; i < perPartition; i++ {
			if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "tiny", Partition: p, Value: make([]byte, 500)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cons := client(t, addr, kgo.ConsumeTopics("tiny"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(100), kgo.FetchMaxPartitionBytes(100))
	n := 0
	for n < 3*perPartition {
		fs := cons.PollFetches(ctx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		n += len(fs.Records())
	}
}
