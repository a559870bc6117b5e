package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/test/harness"
)

// TestListOffsetsByTimeRightAfterAck (issue 27: "ListOffsets by timestamp
// right after an acknowledged produce sometimes finds nothing", never
// reproduced on a single node). Four brokers with certified batches (the
// data plane, as a cluster runs by default); each of 300 rounds produces
// one record with acks=all to one broker itself (each in turn), with a
// CreateTime timestamp above every earlier one, and as soon as the produce
// is answered asks ListOffsets for exactly that timestamp: first the broker
// that acknowledged it, then the three others at once. Kafka answers the
// record's own offset and timestamp on each; an answer of -1 ("nothing")
// or any other offset is counted, and every one is reported before the
// test fails.
func TestListOffsetsByTimeRightAfterAck(t *testing.T) {
	const rounds = 300
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	const topic = "lot-ack"
	harness.CreateTopic(t, c.KafkaAddrs(c.All()...), topic, 1, nil)
	// Every broker serves reads of the topic (a read barrier, the same as
	// ListOffsets' own) before the rounds: a broker still joining the
	// chain when the cluster starts answers NOT_LEADER_OR_FOLLOWER, which
	// is not what the rounds look for.
	c.Eventually(time.Minute, "every broker serves "+topic, func() error {
		for _, i := range c.All() {
			if _, err := c.HighWatermarks(i, topic, 1); err != nil {
				return fmt.Errorf("node%d: %w", i, err)
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	type miss struct {
		round, producer, asked int
		ts, want, off, rts     int64
		code                   int16
		err                    error
		after                  time.Duration
	}
	var (
		misses            []miss
		nothing, same     int
		produceTime, last time.Duration
		prev              int64
	)
	start := time.Now()
	for r := range rounds {
		node := r % len(c.Nodes)
		ts := max(time.Now().UnixMilli(), prev+1)
		prev = ts
		t0 := time.Now()
		off, _, err := produceStamped(ctx, c, node, topic, -1, []int64{ts}, r)
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		acked := time.Now()
		produceTime += acked.Sub(t0)
		check := func(asked int) {
			o, rts, code, err := listOffset(ctx, c, asked, topic, ts)
			if err == nil && code == 0 && o == off && rts == ts {
				return
			}
			m := miss{round: r, producer: node, asked: asked, ts: ts, want: off, off: o, rts: rts, code: code, err: err, after: time.Since(acked)}
			misses = append(misses, m)
			if err == nil && code == 0 && o == -1 {
				nothing++
				if asked == node {
					same++
				}
			}
		}
		check(node)
		last = time.Since(acked)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, other := range c.All() {
			if other == node {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, rts, code, err := listOffset(ctx, c, other, topic, ts)
				if err == nil && code == 0 && o == off && rts == ts {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				misses = append(misses, miss{round: r, producer: node, asked: other, ts: ts, want: off, off: o, rts: rts, code: code, err: err, after: time.Since(acked)})
				if err == nil && code == 0 && o == -1 {
					nothing++
				}
			}()
		}
		wg.Wait()
	}
	t.Logf("%d rounds in %v (produce with acks=all %v on average; last same-broker ListOffsets answered %v after the ack); "+
		"%d wrong answers, %d of them \"nothing\" (offset -1), %d of those from the broker that acknowledged",
		rounds, time.Since(start).Round(time.Millisecond), (produceTime / rounds).Round(time.Microsecond), last.Round(time.Microsecond),
		len(misses), nothing, same)
	for _, m := range misses {
		t.Errorf("round %d, produced to node%d at offset %d with timestamp %d: node%d ListOffsets(%d) %v after the ack = offset %d timestamp %d (error %v %v)",
			m.round, m.producer, m.want, m.ts, m.asked, m.ts, m.after.Round(time.Microsecond), m.off, m.rts, kerr.ErrorForCode(m.code), m.err)
	}
}
