package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestWipeRejoinsByStateSync: four brokers snapshot every 5 heights and keep
// 5 blocks (`--snapshot-interval 5 --retain-blocks 5`). One is stopped and
// its data directory wiped as docs/cluster.md ("Catching up and joining")
// says, everything but its keys, node file and priv_validator_state.json;
// the others go on committing until the blocks it would need are pruned.
// Restarted, it sees that its peers no longer hold block 1, joins by state
// sync from their snapshots (its log says so, and that the snapshot was
// restored), catches up by blocks, serves every acknowledged record, and
// ends with the others' app hash and byte-identical partition files.
//
// The cluster is idle while the victim joins. CometBFT collects snapshot
// offers for 10 s before it restores one, and needs the blocks just above
// the chosen snapshot (light blocks S, S+1, S+2, then S+1... by block sync);
// the brokers keep blocks from min(height - 5, latest snapshot) on. Idle
// (one empty block every 2 s) those blocks usually survive the 10 s, and a
// snapshot rejected because they did not is followed by the next offer 10 s
// later (the test allows 60 s). Under load (a block a second or more) they
// are pruned first, every snapshot is rejected ("light block not found")
// and the broker never joins: run with STELE_STATESYNC_UNDER_LOAD=1 to see
// it. The default 10,000 retained blocks leave ample time. (Fault test 5.)
func TestWipeRejoinsByStateSync(t *testing.T) {
	const topic, parts = "statesync", 3
	c := newCluster(t, clusterOptions{ServeArgs: []string{"--snapshot-interval", "5", "--retain-blocks", "5"}})
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: topic, partitions: parts, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 30*time.Second, 500, "4 brokers")

	victim := c.Rng.IntN(len(c.Nodes))
	others := without(c.All(), victim)
	c.Stop(victim)
	c.Wipe(victim)
	stoppedAt := c.MaxHeight(others...)
	w.waitAcked(c, 45*time.Second, 1000, fmt.Sprintf("3 brokers, node%d wiped", victim))
	// Well past one snapshot interval plus the retained blocks, and past
	// the height the victim stopped at: it can no longer catch up by
	// blocks alone.
	c.WaitHeight(45*time.Second, stoppedAt+12, others...)
	for _, o := range others {
		if base := c.earliestBlock(o); base <= stoppedAt {
			t.Fatalf("node%d still holds blocks from height %d; the victim stopped at %d: nothing was pruned", o, base, stoppedAt)
		}
	}
	t.Logf("node%d stopped at height %d; the others are at %d and hold blocks from %d on",
		victim, stoppedAt, c.MaxHeight(others...), c.earliestBlock(others[0]))

	// The cluster idles (an empty block every 2 s) while the victim joins;
	// the consumer keeps reading. Under load the victim cannot join with
	// these settings (see the test's comment); STELE_STATESYNC_UNDER_LOAD=1
	// keeps producing to show it.
	underLoad := os.Getenv("STELE_STATESYNC_UNDER_LOAD") == "1"
	if !underLoad {
		w.stopProducing(30 * time.Second)
	}
	c.Restart(victim)
	c.Eventually(60*time.Second, fmt.Sprintf("node%d restores a snapshot", victim), func() error {
		if err := c.Exited(victim); err != nil {
			return harness.GiveUp(err)
		}
		if len(c.logLines(victim, "snapshot restored")) > 0 {
			return nil
		}
		// CometBFT logs why it rejects a snapshot only at debug level;
		// what the peers hold tells it too.
		o := others[0]
		h, err := c.Health(o)
		if err != nil {
			return err
		}
		snaps := c.logLines(o, "snapshot taken")
		return fmt.Errorf("no snapshot restored yet; node%d is at height %d, holds blocks from %d on, its last snapshot: %s",
			o, h.Height, c.earliestBlock(o), snaps[len(snaps)-1])
	})
	for _, want := range []string{"state sync: peers have pruned blocks; syncing from a snapshot", "snapshot restored"} {
		t.Logf("node%d: %s", victim, c.logLines(victim, want)[0])
	}
	c.WaitCaughtUp(30*time.Second, victim, others...)
	if underLoad {
		w.stopProducing(30 * time.Second)
	}

	// The rejoined broker takes a produce and serves everything.
	raw := []string{"raw-after-state-sync-0", "raw-after-state-sync-1"}
	w.registerRaw(0, raw...)
	code, off, err := c.RawProduce(victim, topic, 0, 10*time.Second, raw...)
	if err != nil || code != 0 {
		t.Fatalf("produce to node%d after it rejoined: %v %v", victim, err, kerr.ErrorForCode(code))
	}
	w.ackRaw(0, off, raw...)
	c.Eventually(30*time.Second, "the consumer reads the records produced after the rejoin", func() error {
		if !w.consumed(raw...) {
			return fmt.Errorf("not all of %q consumed yet", raw)
		}
		return nil
	})
	w.stopConsuming()
	t.Log(w.summary())
	c.CheckAppHashes(30*time.Second, c.All()...)
	w.checkBrokers(c, c.All()...)
	c.StopAll()
	t.Logf("%d files under logs/ are byte-identical on the 4 brokers", c.CompareLogs(c.All()...))
	w.checkDisk(c, victim)
}

// consumed reports whether a consumer has read every one of values.
func (w *workload) consumed(values ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range w.mu.consumed {
		seen[r.Value] = true
	}
	for _, v := range values {
		if !seen[v] {
			return false
		}
	}
	return true
}

// earliestBlock asks node i's RPC (/status) for the lowest height its block
// store still holds.
func (c *cluster) earliestBlock(i int) int64 {
	c.T.Helper()
	resp, err := c.HTTPC.Get("http://" + c.RPCAddr(i) + "/status")
	if err != nil {
		c.T.Fatalf("node%d RPC /status: %v", i, err)
	}
	defer resp.Body.Close()
	var body struct {
		Result struct {
			SyncInfo struct {
				Earliest string `json:"earliest_block_height"`
			} `json:"sync_info"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		c.T.Fatalf("node%d RPC /status: %v", i, err)
	}
	h, err := strconv.ParseInt(body.Result.SyncInfo.Earliest, 10, 64)
	if err != nil {
		c.T.Fatalf("node%d RPC /status: earliest_block_height %q", i, body.Result.SyncInfo.Earliest)
	}
	return h
}

// TestStrandedBrokerExits: a broker killed while its peers go on and prune
// the blocks it would need (--retain-blocks 5) cannot catch up by block
// sync. Restarted, it must exit non-zero saying so, not sit at its old
// height answering /healthz (found by test/chaos's recovery figures); wiped,
// it rejoins by state sync.
func TestStrandedBrokerExits(t *testing.T) {
	c := newCluster(t, clusterOptions{ServeArgs: []string{"--snapshot-interval", "5", "--retain-blocks", "5"}})
	c.StartAll()
	victim := c.Rng.IntN(len(c.Nodes))
	others := without(c.All(), victim)
	c.WaitHeight(30*time.Second, 3, c.All()...)
	c.Kill9(victim)
	stoppedAt := c.MaxHeight(others...)
	c.Eventually(90*time.Second, "the others prune past the victim's height", func() error {
		for _, o := range others {
			if base := c.earliestBlock(o); base <= stoppedAt+1 {
				return fmt.Errorf("node%d keeps blocks from %d on; the victim stopped at about %d", o, base, stoppedAt)
			}
		}
		return nil
	})
	c.Launch(victim)
	if exitErr, _ := c.WatchUntilExit(victim, time.Minute); exitErr == nil {
		t.Fatalf("node%d exited with status 0; want an error", victim)
	}
	if len(c.logLines(victim, "the broker is behind every block its peers keep")) == 0 {
		t.Fatalf("node%d's log does not say why it cannot start", victim)
	}
	c.Wipe(victim)
	c.Restart(victim)
	c.WaitCaughtUp(time.Minute, victim, others...)
	c.CheckAppHashes(30*time.Second, c.All()...)
}

// TestReplayFetchesFromPeersStartingToo: a broker whose state is gone but
// whose block store is whole replays every block when it starts, and needs
// every batch from its peers. With all brokers down, it must serve its HTTP
// endpoints (/healthz, and the batches peers replaying may need from it)
// while it waits, and finish once they are up. Found by test/chaos: after a
// whole-cluster crash a broker started alone hung before serving HTTP, and
// one needing a batch from another starting broker could wait forever.
func TestReplayFetchesFromPeersStartingToo(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "replay", partitions: 2, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 30*time.Second, 300, "4 brokers")
	w.stopProducing(30 * time.Second)
	w.stopConsuming()
	c.StopAll()

	victim := c.Rng.IntN(len(c.Nodes))
	for _, d := range []string{"meta", "logs", "snapshots", "batches"} {
		if err := os.RemoveAll(filepath.Join(c.Nodes[victim].Dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("node%d's state and batches removed, its block store kept", victim)
	c.Start(victim) // answers /healthz while it replays, alone
	time.Sleep(2 * time.Second)
	if err := c.Exited(victim); err != nil {
		t.Fatalf("node%d gave up waiting for its peers: %v", victim, err)
	}
	if h, err := c.Health(victim); err != nil || h.Height != 0 {
		t.Fatalf("node%d alone: /healthz %+v %v; want height 0, still replaying", victim, h, err)
	}
	others := without(c.All(), victim)
	c.StartNodes(others...)
	c.WaitCaughtUp(time.Minute, victim, others...)
	c.CheckAppHashes(30*time.Second, c.All()...)
	c.StopAll()
	t.Logf("%d files under logs/ are byte-identical on the 4 brokers", c.CompareLogs(c.All()...))
	w.checkDisk(c, victim)
}

// TestStateSyncRefusesForgedSnapshot: one broker is Byzantine about its
// snapshots (STELE_BYZANTINE=forge-snapshots: it alters one committed
// offset, or a partition's offsets, in every snapshot it builds, keeping
// the honest proofs and the true app hash, with chunk hashes that match)
// and takes one every height (keeping 40), so its snapshot is usually the
// newest on offer and the one a joining broker tries first. A wiped broker joining by
// state sync must refuse the forged snapshot at the chunk that carries the
// altered value ("refusing a snapshot whose state is not the one the
// validators signed"), reject the liar, restore an honest snapshot, and
// end with everyone's app hash and every acknowledged record. When the
// honest snapshot happened to rank first (a tie of heights), the victim is
// wiped and joins again, up to four times, until it has met the lie.
// (Issue 16, "State sync that trusts no peer".)
func TestStateSyncRefusesForgedSnapshot(t *testing.T) {
	const topic, parts = "forged-statesync", 2
	c := newCluster(t, clusterOptions{ServeArgs: []string{"--snapshot-interval", "7", "--retain-blocks", "10"}})
	liar := c.Rng.IntN(len(c.Nodes))
	victim := (liar + 1 + c.Rng.IntN(len(c.Nodes)-1)) % len(c.Nodes)
	c.Nodes[liar].Bin = harness.ByzantineBin(t)
	c.Nodes[liar].Env = []string{"STELE_BYZANTINE=forge-snapshots"}
	c.Nodes[liar].Args = []string{"--snapshot-interval", "1", "--snapshot-keep", "40"}
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: topic, partitions: parts, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 30*time.Second, 300, "4 brokers")
	// The cluster idles while the victim joins: with 10 retained blocks,
	// the blocks just above a restored snapshot must outlive its restore
	// (see TestWipeRejoinsByStateSync).
	w.stopProducing(30 * time.Second)
	w.stopConsuming()
	others := without(c.All(), victim)

	// An attempt counts when the victim met the forged snapshot and then
	// caught up. One that restored an honest snapshot first, or restored one
	// whose next blocks its peers had already pruned (a liveness limit of
	// short retention, not what this test is about), is tried again.
	met := false
	for attempt := 1; attempt <= 4 && !met; attempt++ {
		c.Stop(victim)
		c.Wipe(victim)
		stoppedAt := c.MaxHeight(others...)
		c.WaitHeight(60*time.Second, stoppedAt+14, others...)
		before := len(c.logLines(victim, "snapshot restored"))
		refusedBefore := len(c.logLines(victim, "refusing a snapshot whose state is not the one the validators signed"))
		c.Restart(victim)
		c.Eventually(90*time.Second, fmt.Sprintf("node%d restores a snapshot", victim), func() error {
			if err := c.Exited(victim); err != nil {
				return harness.GiveUp(err)
			}
			if len(c.logLines(victim, "snapshot restored")) > before {
				return nil
			}
			return fmt.Errorf("no snapshot restored yet (attempt %d)", attempt)
		})
		refused := len(c.logLines(victim, "refusing a snapshot whose state is not the one the validators signed")) > refusedBefore
		caughtUp := c.caughtUp(45*time.Second, victim, others...)
		t.Logf("attempt %d: node%d restored a snapshot; met the forged one: %v; caught up: %v", attempt, victim, refused, caughtUp)
		met = refused && caughtUp
	}
	if !met {
		t.Fatalf("node%d never met node%d's forged snapshot and then caught up, in four joins", victim, liar)
	}
	for _, l := range c.logLines(victim, "refusing a snapshot whose state is not the one the validators signed")[:1] {
		t.Logf("node%d: %s", victim, l)
	}
	// Nothing of the lie reached the restored broker: it agrees with the
	// others, and serves every acknowledged record.
	c.CheckAppHashes(30*time.Second, c.All()...)
	w.checkBrokers(c, c.All()...)
	c.StopAll()
	c.CompareLogs(c.All()...)
}

// caughtUp reports whether node i reaches, within d, the height the
// others are at now.
func (c *cluster) caughtUp(d time.Duration, i int, others ...int) bool {
	target := c.MaxHeight(others...)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if h, err := c.Health(i); err == nil && h.Height >= target {
			return true
		}
	}
	return false
}
