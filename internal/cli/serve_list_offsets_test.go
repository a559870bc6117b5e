package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var lotRounds = flag.Int("lot.rounds", 100, "rounds of each configuration of TestServeListOffsetsByTimeAfterAck (1000 for the long run)")

// TestServeListOffsetsByTimeAfterAck (issue 27: "ListOffsets by timestamp
// right after an acknowledged produce sometimes finds nothing"): one
// `stele serve` with everything embedded (one CometBFT validator, the data
// plane), franz-go producing one record at a time and, as soon as the
// produce is acknowledged, a kadm client on its own connections asking
// ListOffsets for the record's timestamp T and for T-1. Configurations:
// acks=all idempotent (franz-go's default), acks=1 not idempotent, and
// four producers at once over four partitions, on a CreateTime topic; and
// acks=all on a LogAppendTime topic, where T is the produce answer's
// log_append_time read back from the record as consumed. Each answer must
// be Kafka's, the first offset whose timestamp is at least the time asked,
// computed from the partitions read back; the record just acknowledged
// qualifies, so "nothing" (-1) is always wrong.
//
// On the LogAppendTime topic franz-go leaves each record's Timestamp at
// the client's clock when Produce was called (it does not take the
// log_append_time of the answer): the record must be stamped at or after
// it, and a lookup by it must answer as Kafka, which stamps at append.
// Stele stamps with the clock of the broker that proposed the block, read
// as it built it (app version 2, which `stele serve`'s new chain runs;
// docs/kafka-api.md, "Read after an acknowledged write").
//
// -lot.rounds N sets the rounds of each configuration (default 100; the
// long run is 1000).
func TestServeListOffsetsByTimeAfterAck(t *testing.T) {
	addrs := [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
	kafkaAddr, httpAddr := addrs[0], addrs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srvCtx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() {
		done <- runCLI(srvCtx, "", "serve", "--data", t.TempDir(), "--kafka", kafkaAddr, "--http", httpAddr, "--p2p", addrs[2],
			"--log-level", "warn")
	}()
	defer func() {
		stop()
		if r := <-done; r.code != ExitOK {
			t.Errorf("serve: exit %d\n%s", r.code, r.stderr)
		}
	}()
	waitHealthy(t, ctx, httpAddr, done)

	asker := mustClient(t, kgo.SeedBrokers(kafkaAddr))
	adm := kadm.NewClient(asker)
	defer adm.Close()
	rounds := *lotRounds
	for _, c := range []struct {
		name             string
		lat              bool
		producers, parts int
		opts             []kgo.Opt
	}{
		{"create-time acks=all idempotent", false, 1, 1, nil},
		{"create-time acks=1", false, 1, 1, []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}},
		{"create-time 4 producers 4 partitions", false, 4, 4, nil},
		{"log-append-time acks=all idempotent", true, 1, 1, nil},
	} {
		topic := fmt.Sprintf("lot-ack-%d", time.Now().UnixNano())
		cfg := map[string]*string{}
		if c.lat {
			v := "LogAppendTime"
			cfg["message.timestamp.type"] = &v
		}
		if _, err := adm.CreateTopic(ctx, int32(c.parts), -1, cfg, topic); err != nil {
			t.Fatalf("%s: creating %s: %v", c.name, topic, err)
		}
		type query struct {
			part              int32
			asked, got, acked int64
		}
		var (
			mu      sync.Mutex
			queries []query
			wg      sync.WaitGroup
		)
		start := time.Now()
		for w := range c.producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := mustClient(t, append([]kgo.Opt{kgo.SeedBrokers(kafkaAddr), kgo.ProducerLinger(0),
					kgo.RecordPartitioner(kgo.ManualPartitioner())}, c.opts...)...)
				defer cl.Close()
				for i := range rounds / c.producers {
					r := &kgo.Record{Topic: topic, Partition: int32((i + w) % c.parts), Value: []byte{byte(i)}}
					if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
						t.Errorf("%s: produce: %v", c.name, err)
						return
					}
					ts := r.Timestamp.UnixMilli() // the client's clock at Produce
					asks := []int64{ts, ts - 1}
					for _, at := range asks {
						got, err := listOffsetAt(ctx, asker, topic, r.Partition, at)
						if err != nil {
							t.Errorf("%s: ListOffsets(%d): %v", c.name, at, err)
							return
						}
						mu.Lock()
						queries = append(queries, query{r.Partition, at, got, r.Offset})
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		stamps := readStamps(t, ctx, kafkaAddr, topic, c.parts)
		var wrong, nothing int
		for _, q := range queries {
			logTs := stampAt(stamps[q.part], q.acked)
			if c.lat && q.asked > logTs {
				wrong++
				t.Errorf("%s: partition %d: offset %d stamped %d, %d ms before the client's clock at Produce",
					c.name, q.part, q.acked, logTs, q.asked-logTs)
				continue
			}
			want := int64(-1)
			for _, s := range stamps[q.part] {
				if s.ts >= q.asked {
					want = s.off
					break
				}
			}
			if q.got != want {
				wrong++
				if q.got == -1 {
					nothing++
				}
				t.Errorf("%s: partition %d: ListOffsets(%d) right after the ack of offset %d (stamped %d) answered %d; Kafka answers %d",
					c.name, q.part, q.asked, q.acked, logTs, q.got, want)
			}
		}
		// A LogAppendTime topic asked by the log_append_time itself, as
		// consumed (the exact lookup docs/kafka-api.md gives): every
		// record's own offset.
		if c.lat {
			for p, ss := range stamps {
				for _, s := range ss {
					got, err := listOffsetAt(ctx, asker, topic, p, s.ts)
					if err != nil {
						t.Fatal(err)
					}
					want := s.off
					for _, e := range ss {
						if e.ts >= s.ts {
							want = e.off
							break
						}
					}
					if got != want {
						wrong++
						t.Errorf("%s: ListOffsets(%d), a record's own append time: offset %d, want %d", c.name, s.ts, got, want)
					}
				}
			}
		}
		t.Logf("%s: %d rounds in %v, %d lookups by T and T-1: %d wrong (%d nothing)",
			c.name, len(queries)/2, time.Since(start).Round(time.Millisecond), len(queries), wrong, nothing)
	}
}

// listOffsetAt asks ListOffsets (read_uncommitted) for the first offset of
// partition whose timestamp is at least ts, and returns the answer as
// sent: -1 for "nothing" (kadm's ListOffsetsAfterMilli would replace it
// with the end offset).
func listOffsetAt(ctx context.Context, cl *kgo.Client, topic string, partition int32, ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("ListOffsets answered %d topics", len(resp.Topics))
	}
	sp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
		return 0, err
	}
	return sp.Offset, nil
}

type stamp struct{ off, ts int64 }

// readStamps reads every partition of topic from the start to its end and
// returns each record's offset and timestamp.
func readStamps(t *testing.T, ctx context.Context, addr, topic string, parts int) map[int32][]stamp {
	t.Helper()
	adm := kadm.NewClient(mustClient(t, kgo.SeedBrokers(addr)))
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[int32]kgo.Offset{}
	left := 0
	for p := range int32(parts) {
		offsets[p] = kgo.NewOffset().AtStart()
		e, _ := ends.Lookup(topic, p)
		left += int(e.Offset)
	}
	cl := mustClient(t, kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	defer cl.Close()
	out := map[int32][]stamp{}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for left > 0 {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			t.Fatalf("reading %s back: %d records missing: %v", topic, left, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], stamp{r.Offset, r.Timestamp.UnixMilli()})
			left--
		})
	}
	return out
}

// stampAt is the timestamp of the record at off.
func stampAt(ss []stamp, off int64) int64 {
	for _, s := range ss {
		if s.off == off {
			return s.ts
		}
	}
	return -1
}

func mustClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitHealthy waits for serve's /healthz, failing if serve exits first.
func waitHealthy(t *testing.T, ctx context.Context, httpAddr string, done chan result) {
	t.Helper()
	for {
		if resp, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case r := <-done:
			done <- r
			t.Fatalf("serve exited before /healthz answered: %d\n%s", r.code, r.stderr)
		case <-ctx.Done():
			t.Fatal("serve: /healthz not ok in time")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
