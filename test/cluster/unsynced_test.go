package cluster

import (
	"fmt"
	"testing"
	"time"
)

// TestLoseUnsyncedWrites: brokers killed while producing lose every append
// to their partition logs, indexes and batch store that they had not
// fsynced (the harness cuts each file back to what its last fsync covered,
// from the sync journal the stelebyzantine build keeps: internal/durable),
// as a power cut would; every fsync is made 20 ms slower first, as on a
// slow disk, so that kills find writes in flight. First one broker at a time, then all four at once,
// three times each. Each must start again on what is left (recovery cuts
// the torn tails; whatever the chain ordered beyond them is replayed), no
// acknowledged record may be missing, and all four must end with one app
// hash and byte-identical logs. Whatever a broker acknowledged or signed
// was therefore fsynced before it said so.
func TestLoseUnsyncedWrites(t *testing.T) {
	c := newCluster(t, clusterOptions{SyncJournal: true, SlowFsync: 20 * time.Millisecond})
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "unsynced", partitions: 3, writers: 2, consumers: 1, interval: 2 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 60 * time.Second,
	})
	w.waitAcked(c, 45*time.Second, 300, "connected")
	var files int
	var dropped int64
	for round := range 3 {
		i := c.Rng.IntN(len(c.Nodes))
		c.Kill9(i)
		f, d := c.LoseUnsynced(i)
		files, dropped = files+f, dropped+d
		c.Restart(i)
		c.WaitCaughtUp(time.Minute, i, without(c.All(), i)...)
		w.waitAcked(c, 45*time.Second, 200, fmt.Sprintf("node%d lost its unsynced writes (round %d)", i, round))
	}
	for round := range 3 {
		for _, i := range c.All() {
			c.Kill9(i)
		}
		for _, i := range c.All() {
			f, d := c.LoseUnsynced(i)
			files, dropped = files+f, dropped+d
		}
		c.StartNodes(c.All()...)
		w.waitAcked(c, 90*time.Second, 200, fmt.Sprintf("a power cut of all four (round %d)", round))
	}
	t.Logf("unsynced writes lost over 15 kills: %d bytes from %d files", dropped, files)
	if dropped == 0 {
		t.Errorf("no kill found an unsynced byte to drop: the test did not test anything")
	}
	w.end(c, 60*time.Second)
	for _, i := range c.All() {
		w.checkDisk(c, i)
	}
}
