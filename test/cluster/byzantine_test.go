package cluster

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
)

// Fault test 4 of issue 3: Byzantine brokers, run from the test-only build
// (`go build -tags stelebyzantine`), whose misbehaviour is switched on per
// process by the environment variable STELE_BYZANTINE. DESIGN.md §4: with
// n = 3f+1 = 4 brokers, one arbitrary broker must neither halt nor fool the
// other three. Equivocation, a copied validator key, is in
// equivocation_test.go.

// TestByzantineMalformedProposer: one of four brokers proposes an
// undecodable transaction in every block it proposes
// (STELE_BYZANTINE=malformed-proposals). The honest brokers reject each of
// its proposals in ProcessProposal, the round fails, the next proposer takes
// over, and the chain keeps committing under continuous produce and consume.
// Every rejection the honest brokers log names the malformed proposer, no
// committed block was proposed by it, every acknowledged record is in place
// and all four brokers (the bad one applies the honest blocks too) end with
// one app hash and byte-identical logs. One honest broker runs the
// byzantine build without the variable, which must behave as the ordinary
// build. (Fault test 4, malformed proposals; DESIGN.md §4 "transactions are
// validated ... fully in ProcessProposal".)
func TestByzantineMalformedProposer(t *testing.T) {
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	bad := c.Rng.IntN(len(c.Nodes))
	plain := (bad + 1 + c.Rng.IntN(len(c.Nodes)-1)) % len(c.Nodes)
	c.Nodes[bad].Bin, c.Nodes[bad].Env = byz, []string{"STELE_BYZANTINE=malformed-proposals"}
	c.Nodes[plain].Bin = byz
	honest := without(c.All(), bad)
	vals := c.ValidatorAddrs()
	t.Logf("node%d proposes malformed transactions (validator %s); node%d runs the byzantine build without STELE_BYZANTINE",
		bad, vals[bad], plain)

	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "malformed", partitions: 3, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 45*time.Second, 800, "one malformed proposer among 4")

	// The bad node's turns came and went: every honest broker rejected
	// several of its proposals, and nobody else's.
	var rejected map[int]int
	c.Eventually(30*time.Second, "every honest broker rejects at least 3 proposals", func() error {
		rejected = map[int]int{}
		for _, i := range honest {
			for _, line := range c.logLines(i, "rejecting proposal with an invalid transaction") {
				m := proposerRE.FindStringSubmatch(line)
				if m == nil || m[1] != vals[bad] {
					return harness.GiveUp(fmt.Errorf("node%d rejected a proposal that is not the malformed proposer's: %s", i, line))
				}
				rejected[i]++
			}
		}
		for _, i := range honest {
			if rejected[i] < 3 {
				return fmt.Errorf("node%d rejected %d proposals so far", i, rejected[i])
			}
		}
		return nil
	})
	w.waitAcked(c, 30*time.Second, 300, "after the rejections were counted")

	w.stopProducing(60 * time.Second)
	w.stopConsuming()
	t.Log(w.summary())
	c.CheckAppHashes(30*time.Second, c.All()...)
	top := c.MaxHeight(honest...)
	byProposer, err := c.BlockProposers(honest[0], top)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for h, p := range byProposer {
		if p == vals[bad] {
			t.Errorf("block %d, proposed by the malformed proposer node%d, was committed", h, bad)
		}
		counts[p]++
	}
	t.Logf("heights 1-%d: honest brokers rejected %v proposals of node%d; committed blocks by proposer %v",
		top, rejected, bad, counts)
	w.checkBrokers(c, c.All()...)
	c.StopAll()
	t.Logf("%d files under logs/ are byte-identical on the 4 brokers", c.CompareLogs(c.All()...))
	w.checkDisk(c, bad)
}

// proposerRE finds the proposer of a "rejecting proposal" log line.
var proposerRE = regexp.MustCompile(`proposer=([0-9A-F]+)`)

// TestByzantineDivergingState: one of four brokers reports a wrong app hash
// from a height H on (STELE_BYZANTINE=diverge-at=H), as a broker whose
// stored state was tampered with would. At H+1 CometBFT finds that the
// block more than two thirds of the validators committed does not match its
// state ("wrong Block.Header.AppHash", then "CONSENSUS FAILURE!!!") and the
// broker exits on its own with a non-zero status instead of serving what it
// holds: it never reports a height above H, everything it ever reported
// matched the honest brokers' app hash at that height, every record a
// consumer read from it is the committed one, and its partition files are a
// prefix of the honest ones. The honest three keep committing and agree.
// (Fault test 4, tampered state; docs/cluster.md "What a cluster
// guarantees".)
func TestByzantineDivergingState(t *testing.T) {
	const topic, parts = "diverge", 3
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	bad := c.Rng.IntN(len(c.Nodes))
	honest := without(c.All(), bad)
	// A height some seconds into the workload: blocks come every few
	// hundred milliseconds under load, every 2 s when idle.
	divergeAt := int64(25 + c.Rng.IntN(15))
	c.Nodes[bad].Bin = byz
	c.Nodes[bad].Env = []string{fmt.Sprintf("STELE_BYZANTINE=diverge-at=%d", divergeAt)}
	t.Logf("node%d reports a wrong app hash from height %d on", bad, divergeAt)

	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: topic, partitions: parts, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})

	// Watch the bad node until it exits: the highest height it reports.
	var badTop int64
	var exitErr error
	c.Eventually(60*time.Second, fmt.Sprintf("node%d exits on its own after height %d", bad, divergeAt), func() error {
		if h, err := c.Health(bad); err == nil {
			badTop = max(badTop, h.Height)
		}
		select {
		case <-c.Nodes[bad].Proc.Done:
			exitErr = c.Nodes[bad].Proc.Err
			return nil
		default:
		}
		hs, err := c.Heights(honest...)
		if err != nil {
			return err
		}
		if top := maxOf(hs); top > divergeAt+20 {
			return harness.GiveUp(fmt.Errorf("the honest brokers reached height %d, node%d (diverged at %d) is still running at height %d",
				top, bad, divergeAt, badTop))
		}
		return fmt.Errorf("node%d still running at height %d", bad, badTop)
	})
	c.Nodes[bad].Proc = nil
	exitedAt := c.MaxHeight(honest...)
	t.Logf("%s node%d exited (%v) after reporting height %d; the honest brokers are at %d", harness.Clock(), bad, exitErr, badTop, exitedAt)
	if exitErr == nil {
		t.Errorf("node%d exited with status 0 after its state diverged; want a non-zero status", bad)
	}
	if badTop > divergeAt {
		t.Errorf("node%d reported height %d, above the height %d its state diverged at", bad, badTop, divergeAt)
	}
	for _, want := range []string{"wrong Block.Header.AppHash", "CONSENSUS FAILURE!!!", "consensus halted"} {
		if len(c.logLines(bad, want)) == 0 {
			t.Errorf("node%d's log does not say %q", bad, want)
		}
	}

	w.waitAcked(c, 45*time.Second, 500, fmt.Sprintf("3 honest brokers, node%d gone", bad))
	// The honest three go on committing well past the divergence.
	c.WaitHeight(60*time.Second, divergeAt+10, honest...)
	w.end(c, 60*time.Second, honest...)
	for p := range int32(parts) {
		c.checkPrefix(bad, honest[0], topic, p)
	}
}

// checkPrefix requires partition p of topic on node i's disk to be a prefix
// of the same partition on node ref's disk; both must be stopped.
func (c *cluster) checkPrefix(i, ref int, topic string, p int32) {
	c.T.Helper()
	mine, err := c.DiskLog(i, topic, p)
	if err != nil {
		c.T.Fatalf("node%d's %s-%d on disk: %v", i, topic, p, err)
	}
	theirs, err := c.DiskLog(ref, topic, p)
	if err != nil {
		c.T.Fatalf("node%d's %s-%d on disk: %v", ref, topic, p, err)
	}
	if len(mine) > len(theirs) {
		c.T.Errorf("node%d holds %d records of %s-%d, more than the %d of node%d", i, len(mine), topic, p, len(theirs), ref)
		return
	}
	for k, r := range mine {
		if r != theirs[k] {
			c.T.Errorf("%s-%d offset %d: node%d holds %q, node%d %q", topic, p, r.Offset, i, r.Value, ref, theirs[k].Value)
			return
		}
	}
	c.T.Logf("node%d's %s-%d (%d records) is a prefix of node%d's (%d records)", i, topic, p, len(mine), ref, len(theirs))
}

// logLines returns the lines of node i's stderr (all its runs) that
// contain substr.
func (c *cluster) logLines(i int, substr string) []string {
	c.T.Helper()
	data, err := harness.ReadFileIfExists(c.Nodes[i].LogPath)
	if err != nil {
		c.T.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}
