package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/test/harness"
)

// TestClockOffset: a broker whose clock is an hour off (the stelebyzantine
// build's STELE_BYZANTINE=clock-offset: every vote and proposal its
// validator signs carries the wrong time, and its own time-of-day reads
// are off) cannot move block time, the median of the validators' vote
// timestamps, and so cannot make the state machine's timers (group
// sessions, transaction timeouts, retention) fire early or late. With one
// clock an hour ahead, then another an hour behind, under produce and
// consume: the skewed validator's precommits carry its time, every block
// committed meanwhile is stamped within a few seconds of the harness's
// clock, nothing acknowledged is lost, and the brokers end with one app
// hash and byte-identical logs. Nor can it move the stamps of a
// LogAppendTime topic, the proposer's clock from app version 2: its
// proposals an hour ahead are refused by the others (at most
// fsm.MaxAppendTimeAheadMs ahead of a validator's clock), and an hour
// behind they stamp no earlier than the block time; a record produced
// through any broker is stamped no later than the harness's clock plus
// that bound, and no earlier than a few seconds before it was sent.
func TestClockOffset(t *testing.T) {
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "clock", partitions: 3, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 45*time.Second, 200, "connected")
	lat := "LogAppendTime"
	harness.CreateTopic(t, c.KafkaAddrs(c.All()...), "clock-lat", 1, map[string]*string{"message.timestamp.type": &lat})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	round := 0
	vals := c.ValidatorAddrs()
	perm := c.Rng.Perm(len(c.Nodes))
	for k, off := range []time.Duration{time.Hour, -time.Hour} {
		bad := perm[k]
		honest := without(c.All(), bad)
		c.Kill9(bad)
		c.Nodes[bad].Bin, c.Nodes[bad].Env = byz, []string{fmt.Sprintf("STELE_BYZANTINE=clock-offset=%v", off)}
		c.Restart(bad)
		c.WaitCaughtUp(time.Minute, bad, honest...)
		t0 := time.Now()
		from := c.MaxHeight(c.All()...) + 1
		w.waitAcked(c, 45*time.Second, 300, fmt.Sprintf("node%d's clock %v off", bad, off))
		// Until the skewed validator has signed a few commits.
		var skewed int
		var to int64
		c.Eventually(30*time.Second, fmt.Sprintf("node%d's precommits in 3 commits", bad), func() error {
			to = c.MaxHeight(honest...)
			skewed = 0
			for h := from; h <= to; h++ {
				times, err := c.CommitTimes(honest[0], h)
				if err != nil {
					return err
				}
				ts, ok := times[vals[bad]]
				if !ok {
					continue
				}
				if d := ts.Sub(time.Now()); d < off-time.Minute || d > off+time.Minute {
					return harness.GiveUp(fmt.Errorf("height %d: node%d's precommit is stamped %v, %v from now; want about %v", h, bad, ts, d, off))
				}
				skewed++
			}
			if skewed < 3 {
				return fmt.Errorf("%d of heights %d-%d", skewed, from, to)
			}
			return nil
		})
		t1 := time.Now()
		headers, err := c.BlockHeaders(honest[0], from, to)
		if err != nil {
			t.Fatal(err)
		}
		last := time.Time{}
		for h := from; h <= to; h++ {
			bt := headers[h].Time
			// A block carries its predecessor's commit time (BFT time):
			// the first one of the span may predate it.
			if (h > from && bt.Before(t0.Add(-5*time.Second))) || bt.After(t1.Add(5*time.Second)) {
				t.Errorf("height %d: block time %v, outside the %v-%v the heights were committed in (node%d's clock %v off)",
					h, bt.Format(time.RFC3339Nano), t0.Format(time.StampMilli), t1.Format(time.StampMilli), bad, off)
			}
			if !bt.After(last) {
				t.Errorf("height %d: block time %v not after the previous block's %v", h, bt, last)
			}
			last = bt
		}
		for range 3 {
			for _, i := range c.All() {
				round++
				var sent, at int64
				// Retried: the first request to a broker just restarted
				// meets the connection its kill closed.
				c.Eventually(30*time.Second, fmt.Sprintf("a produce to the LogAppendTime topic through node%d", i), func() (err error) {
					sent = time.Now().UnixMilli()
					_, at, err = produceStamped(ctx, c, i, "clock-lat", -1, []int64{sent}, round)
					return err
				})
				if now := time.Now().UnixMilli(); at > now+fsm.MaxAppendTimeAheadMs || at < sent-5000 {
					t.Errorf("node%d's clock %v off: a record produced through node%d at %d, answered at %d, was stamped %d",
						bad, off, i, sent, now, at)
				}
			}
		}
		t.Logf("node%d with its clock %v off: heights %d-%d, its precommit in %d commits, block times within the harness's clock ±5 s, LogAppendTime stamps too",
			bad, off, from, to, skewed)
		c.Kill9(bad)
		c.Nodes[bad].Bin, c.Nodes[bad].Env = "", nil
		c.Restart(bad)
		c.WaitCaughtUp(time.Minute, bad, honest...)
	}
	w.end(c, 60*time.Second)
}
