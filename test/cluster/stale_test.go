package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/test/harness"
)

// TestStaleBrokerReads: a broker cut off from the others holds a log that
// ends below what they have acknowledged, and for a few seconds does not
// know it (it saw its last block a moment ago). Asked about offsets past
// its end, it must not answer from that log: a fetch there is not
// OFFSET_OUT_OF_RANGE (a consumer that read further elsewhere would reset
// and read again what it had read), ListOffsets for the end and
// OffsetForLeaderEpoch do not report the lower end (a consumer validating
// its position would rewind to it). It answers the retriable
// NOT_LEADER_OR_FOLLOWER until it is back, then the records. The chaos
// suite found this as nonmonotonic polls (docs/reliability.md).
func TestStaleBrokerReads(t *testing.T) {
	const topic = "stale"
	c := newCluster(t, clusterOptions{Proxies: true})
	c.StartAll()
	harness.CreateTopic(t, c.KafkaAddrs(c.All()...), topic, 1, nil)
	perm := c.Rng.Perm(len(c.Nodes))
	cut, others := perm[0], perm[1:]
	produce := func(values ...string) int64 {
		t.Helper()
		code, off, err := c.RawProduce(others[0], topic, 0, 15*time.Second, values...)
		if err != nil || code != 0 {
			t.Fatalf("produce to node%d: %v %v", others[0], err, kerr.ErrorForCode(code))
		}
		return off
	}
	produce("a0", "a1", "a2", "a3", "a4")
	c.WaitCaughtUp(30*time.Second, cut, others...)
	// What it holds, read before the cut: once cut off for three
	// empty-block intervals it refuses every read (catching up), and the
	// produce below may take that long (a CI run saw it).
	held, err := c.HeldHighWatermarks(cut, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	if held[0] != 5 {
		t.Fatalf("node%d holds high watermark %d before the cut; the test needs 5", cut, held[0])
	}

	c.Partition(others, []int{cut})
	produce("b5", "b6", "b7", "b8", "b9")

	// Offset 7: past the cut-off broker's end, inside the others' log.
	fp, err := c.RawFetch(cut, topic, 0, 7)
	if code := fp.ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Errorf("node%d, cut off, Fetch@7: %v, want NOT_LEADER_OR_FOLLOWER", cut, err)
	}
	if hwm, err := c.HighWatermarks(cut, topic, 1); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Errorf("node%d, cut off, ListOffsets latest: %v %v, want NOT_LEADER_OR_FOLLOWER", cut, hwm, err)
	}
	if code, end := staleEpochEnd(t, c, cut, topic); code != kerr.NotLeaderForPartition.Code {
		t.Errorf("node%d, cut off, OffsetForLeaderEpoch: %v end %d, want NOT_LEADER_OR_FOLLOWER", cut, kerr.ErrorForCode(code), end)
	}
	// On the other side the same questions are answered.
	if fp, err := c.RawFetch(others[0], topic, 0, 7); err != nil || len(fp.RecordBatches) == 0 {
		t.Errorf("node%d Fetch@7: %v, %d bytes", others[0], err, len(fp.RecordBatches))
	}
	if code, end := staleEpochEnd(t, c, others[0], topic); code != 0 || end != 10 {
		t.Errorf("node%d OffsetForLeaderEpoch: %v end %d, want 10", others[0], kerr.ErrorForCode(code), end)
	}

	c.Heal()
	c.Eventually(60*time.Second, fmt.Sprintf("node%d serves offset 7 once healed", cut), func() error {
		fp, err := c.RawFetch(cut, topic, 0, 7)
		if err != nil {
			return err
		}
		recs, err := harness.DecodeBatches(topic, 0, 7, fp.RecordBatches)
		if err != nil {
			return harness.GiveUp(err)
		}
		if len(recs) == 0 || recs[0].Value != "b7" {
			return fmt.Errorf("records %v", recs)
		}
		return nil
	})
	if code, end := staleEpochEnd(t, c, cut, topic); code != 0 || end != 10 {
		t.Errorf("node%d healed, OffsetForLeaderEpoch: %v end %d, want 10", cut, kerr.ErrorForCode(code), end)
	}
	// A fetch past the end of the whole log is still out of range.
	if _, err := c.RawFetch(cut, topic, 0, 50); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Errorf("node%d healed, Fetch@50: %v, want OFFSET_OUT_OF_RANGE", cut, err)
	}
}

// staleEpochEnd asks node i's OffsetForLeaderEpoch for partition 0's end
// of epoch 0, as a consumer validating its position does.
func staleEpochEnd(t *testing.T, c *cluster, i int, topic string) (int16, int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = -1, 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kresp, err := c.Request(ctx, i, req)
	if err != nil {
		t.Fatalf("node%d OffsetForLeaderEpoch: %v", i, err)
	}
	p := kresp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	return p.ErrorCode, p.EndOffset
}
