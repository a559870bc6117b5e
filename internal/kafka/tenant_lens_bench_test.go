package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkTenantLens (docs/benchmarks.md "The tenant lens"): what the
// renaming of a tenant's connection (tenant_lens.go) costs a Produce
// request and a Fetch response of 4 partitions of 16 KiB each (the lens
// walks the request in and the response out, skipping record bytes).
// The peer, in the same run, is decoding the same request from its
// bytes, which every request pays.
func BenchmarkTenantLens(b *testing.B) {
	records := make([]byte, 16<<10)
	produce := func() *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
		t := kmsg.NewProduceRequestTopic()
		t.Topic = "orders"
		for p := range int32(4) {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, records
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
		return req
	}
	fetch := func() *kmsg.FetchResponse {
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = 12
		t := kmsg.NewFetchResponseTopic()
		t.Topic = "acme~orders"
		for p := range int32(4) {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.RecordBatches, rp.HighWatermark = p, records, 100
			t.Partitions = append(t.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, t)
		return resp
	}
	l := newTenantLens("acme")
	b.Run("produce request in", func(b *testing.B) {
		req := produce()
		b.ReportAllocs()
		for b.Loop() {
			req.Topics[0].Topic = "orders"
			l.in(req)
		}
	})
	b.Run("fetch response out", func(b *testing.B) {
		resp := fetch()
		b.ReportAllocs()
		for b.Loop() {
			resp.Topics[0].Topic = "acme~orders"
			l.out(resp)
		}
	})
	b.Run("peer: produce request decoded", func(b *testing.B) {
		raw := produce().AppendTo(nil)
		b.ReportAllocs()
		for b.Loop() {
			req := kmsg.NewPtrProduceRequest()
			req.Version = 9
			if err := req.ReadFrom(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
