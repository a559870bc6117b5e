package kafka

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAllocationsPerRecord checks that the broker allocates per request and
// per batch on produce and fetch, never per record: a request carrying a
// batch of 1000 keyed records (whose keys the key index takes) costs the
// whole process (broker, its orderer and the client) about as many
// allocations as one carrying 10 records.
// Allocation counts, not times, so the test cannot fail on a slow machine;
// the margin (200 for 990 more records) absorbs background work.
func TestAllocationsPerRecord(t *testing.T) {
	tb := startTestBroker(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const topic = "allocs"
	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, 1, 1
	create.Topics = append(create.Topics, ct)
	rawRequest(t, cl, create)

	batch := func(n int) []byte {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "key %d", i%100), Value: fmt.Appendf(nil, "value %06d", i)}
		}
		return rawBatch(t, recs...)
	}
	produce := func(b []byte) {
		req := produceRequest(topic, b)
		resp := rawRequest(t, cl, req).(*kmsg.ProduceResponse)
		if c := resp.Topics[0].Partitions[0].ErrorCode; c != 0 {
			t.Fatalf("produce: %v", kerr.ErrorForCode(c))
		}
	}
	fetch := func(offset int64, want int) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, 50<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = offset, 50<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, cl, req).(*kmsg.FetchResponse)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || len(p.RecordBatches) < want {
			t.Fatalf("fetch at %d: %v, %d bytes", offset, kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
		}
	}
	mallocs := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.Mallocs
	}
	// per returns the median allocations of one call of fn over 15 calls.
	per := func(fn func(i int)) uint64 {
		var counts []uint64
		for i := range 15 {
			before := mallocs()
			fn(i)
			counts = append(counts, mallocs()-before)
		}
		slices.Sort(counts)
		return counts[len(counts)/2]
	}

	small, large := batch(10), batch(1000)
	produce(small) // warm up the topic, the connection and the client
	var next int64 = 10
	produceSmall := per(func(int) { produce(small); next += 10 })
	produceLarge := per(func(int) { produce(large); next += 1000 })
	// Fetch the same batches again: the last 15 large ones, then the 15
	// small ones before them, one batch per request.
	largeFrom := next - 15*1000
	smallFrom := largeFrom - 15*10
	fetchSmall := per(func(i int) { fetch(smallFrom+int64(i)*10, len(small)) })
	fetchLarge := per(func(i int) { fetch(largeFrom+int64(i)*1000, len(large)) })
	t.Logf("allocations per request: produce %d (10 records) / %d (1000 records); fetch %d / %d",
		produceSmall, produceLarge, fetchSmall, fetchLarge)
	const margin = 200
	if produceLarge > produceSmall+margin {
		t.Errorf("a produce of 1000 records allocates %d times, one of 10 records %d: allocations grow with records", produceLarge, produceSmall)
	}
	if fetchLarge > fetchSmall+margin {
		t.Errorf("a fetch of 1000 records allocates %d times, one of 10 records %d: allocations grow with records", fetchLarge, fetchSmall)
	}
}
