package kafka

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkShareGroupWorkers (issue 23, docs/benchmarks.md): one
// partition, 1,000 keys, each record taking 5 ms to process: records/s
// with a classic consumer group (one busy member, whatever the members)
// and with share groups of 1, 4, 16 and 64 members, with and without key
// ordering, in the same run. Each sub-benchmark produces
// STELE_BENCH_SHARE_RECORDS records (default 4000) to a topic of its own
// and reports records/s from the first record received to the last
// accepted (committed, for the classic group). Against an in-process
// broker (a single node on the local orderer, 5 ms blocks), or the broker
// of STELE_BENCH_BROKERS (a real `stele serve`):
//
//	go test -run '^$' -bench BenchmarkShareGroupWorkers -benchtime 1x ./internal/kafka
//	STELE_BENCH_BROKERS=127.0.0.1:9092 go test -run '^$' -bench BenchmarkShareGroupWorkers -benchtime 1x ./internal/kafka
func BenchmarkShareGroupWorkers(b *testing.B) {
	addr := os.Getenv("STELE_BENCH_BROKERS")
	if addr == "" {
		addr = startTestBrokerClocked(b, 5*time.Millisecond).addr
	}
	records := 4000
	if n := os.Getenv("STELE_BENCH_SHARE_RECORDS"); n != "" {
		fmt.Sscan(n, &records)
	}
	const keys, work = 1000, 5 * time.Millisecond
	run := 0
	setup := func(b *testing.B) (topic, group string) {
		run++
		stamp := time.Now().UnixNano()
		topic, group = fmt.Sprintf("bench-share-%d-%d", stamp, run), fmt.Sprintf("bench-share-g-%d-%d", stamp, run)
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.ProducerLinger(5*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, -1, nil, topic); err != nil {
			b.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range records {
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%04d", i%keys), Value: fmt.Appendf(nil, "%d", i)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		return topic, group
	}
	report := func(b *testing.B, start, end time.Time) {
		b.ReportMetric(float64(records)/end.Sub(start).Seconds(), "records/s")
		b.ReportMetric(0, "ns/op")
	}

	b.Run("classic/members=4", func(b *testing.B) {
		for range b.N {
			topic, group := setup(b)
			var done atomic.Int64
			var first atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			for range 4 { // one partition: one of them is busy
				cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond), kgo.AutoCommitMarks(),
					kgo.AutoCommitInterval(100*time.Millisecond), kgo.BlockRebalanceOnPoll())
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer cl.Close()
					for done.Load() < int64(records) && ctx.Err() == nil {
						pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
						fs := cl.PollRecords(pctx, 100)
						pcancel()
						for _, r := range fs.Records() {
							first.CompareAndSwap(0, time.Now().UnixNano())
							time.Sleep(work)
							cl.MarkCommitRecords(r)
							done.Add(1)
						}
						cl.AllowRebalance()
					}
					cl.CommitMarkedOffsets(context.Background())
				}()
			}
			wg.Wait()
			end := time.Now()
			cancel()
			if done.Load() < int64(records) {
				b.Fatalf("%d of %d records processed", done.Load(), records)
			}
			report(b, time.Unix(0, first.Load()), end)
		}
	})
	for _, keyed := range []bool{false, true} {
		for _, members := range []int{1, 4, 16, 64} {
			b.Run(fmt.Sprintf("share/key-ordering=%t/members=%d", keyed, members), func(b *testing.B) {
				for range b.N {
					topic, group := setup(b)
					admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...))
					if err != nil {
						b.Fatal(err)
					}
					configs := []string{"share.auto.offset.reset", "earliest"}
					if keyed {
						configs = append(configs, "stele.share.key.ordering", "true")
					}
					setGroupConfigs(b, admin, group, configs...)
					admin.Close()
					var (
						done, first atomic.Int64
						seen        sync.Map
						wg          sync.WaitGroup
					)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					for range members {
						cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
							kgo.FetchMaxWait(100*time.Millisecond), kgo.ShareMaxRecords(10))
						if err != nil {
							b.Fatal(err)
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							defer cl.Close()
							for done.Load() < int64(records) && ctx.Err() == nil {
								pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
								fs := cl.PollRecords(pctx, 10)
								pcancel()
								for _, r := range fs.Records() {
									first.CompareAndSwap(0, time.Now().UnixNano())
									time.Sleep(work)
									r.Ack(kgo.AckAccept)
									if _, dup := seen.LoadOrStore(r.Offset, true); !dup {
										done.Add(1)
									}
								}
								cl.FlushAcks(ctx)
							}
						}()
					}
					wg.Wait()
					end := time.Now()
					cancel()
					if done.Load() < int64(records) {
						b.Fatalf("%d of %d records processed", done.Load(), records)
					}
					report(b, time.Unix(0, first.Load()), end)
				}
			})
		}
	}
}
