package cluster

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
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
	byz := byzantineBin(t)
	c := newCluster(t, clusterOptions{})
	bad := c.rng.IntN(len(c.nodes))
	plain := (bad + 1 + c.rng.IntN(len(c.nodes)-1)) % len(c.nodes)
	c.nodes[bad].bin, c.nodes[bad].env = byz, []string{"STELE_BYZANTINE=malformed-proposals"}
	c.nodes[plain].bin = byz
	honest := without(c.all(), bad)
	vals := c.validatorAddrs()
	t.Logf("node%d proposes malformed transactions (validator %s); node%d runs the byzantine build without STELE_BYZANTINE",
		bad, vals[bad], plain)

	c.startAll()
	w := startWorkload(t, c.kafkaAddrs(c.all()...), workloadOptions{
		topic: "malformed", partitions: 3, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 45*time.Second, 800, "one malformed proposer among 4")

	// The bad node's turns came and went: every honest broker rejected
	// several of its proposals, and nobody else's.
	var rejected map[int]int
	c.eventually(30*time.Second, "every honest broker rejects at least 3 proposals", func() error {
		rejected = map[int]int{}
		for _, i := range honest {
			for _, line := range c.logLines(i, "rejecting proposal with an invalid transaction") {
				m := proposerRE.FindStringSubmatch(line)
				if m == nil || m[1] != vals[bad] {
					return giveUp(fmt.Errorf("node%d rejected a proposal that is not the malformed proposer's: %s", i, line))
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
	c.checkAppHashes(30*time.Second, c.all()...)
	top := c.maxHeight(honest...)
	byProposer, err := c.blockProposers(honest[0], top)
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
	w.checkBrokers(c, c.all()...)
	c.stopAll()
	t.Logf("%d files under logs/ are byte-identical on the 4 brokers", c.compareLogs(c.all()...))
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
	byz := byzantineBin(t)
	c := newCluster(t, clusterOptions{})
	bad := c.rng.IntN(len(c.nodes))
	honest := without(c.all(), bad)
	// A height some seconds into the workload: blocks come every few
	// hundred milliseconds under load, every 2 s when idle.
	divergeAt := int64(25 + c.rng.IntN(15))
	c.nodes[bad].bin = byz
	c.nodes[bad].env = []string{fmt.Sprintf("STELE_BYZANTINE=diverge-at=%d", divergeAt)}
	t.Logf("node%d reports a wrong app hash from height %d on", bad, divergeAt)

	c.startAll()
	w := startWorkload(t, c.kafkaAddrs(c.all()...), workloadOptions{
		topic: topic, partitions: parts, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})

	// Watch the bad node until it exits: the highest height it reports.
	var badTop int64
	var exitErr error
	c.eventually(60*time.Second, fmt.Sprintf("node%d exits on its own after height %d", bad, divergeAt), func() error {
		if h, err := c.health(bad); err == nil {
			badTop = max(badTop, h.Height)
		}
		select {
		case <-c.nodes[bad].proc.done:
			exitErr = c.nodes[bad].proc.err
			return nil
		default:
		}
		hs, err := c.heights(honest...)
		if err != nil {
			return err
		}
		if top := maxOf(hs); top > divergeAt+20 {
			return giveUp(fmt.Errorf("the honest brokers reached height %d, node%d (diverged at %d) is still running at height %d",
				top, bad, divergeAt, badTop))
		}
		return fmt.Errorf("node%d still running at height %d", bad, badTop)
	})
	c.nodes[bad].proc = nil
	exitedAt := c.maxHeight(honest...)
	t.Logf("%s node%d exited (%v) after reporting height %d; the honest brokers are at %d", clock(), bad, exitErr, badTop, exitedAt)
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
	c.waitHeight(60*time.Second, divergeAt+10, honest...)
	w.stopProducing(60 * time.Second)
	w.stopConsuming()
	t.Log(w.summary())
	c.checkAppHashes(30*time.Second, honest...)
	w.checkBrokers(c, honest...)
	c.stopAll()
	t.Logf("%d files under logs/ are byte-identical on the 3 honest brokers", c.compareLogs(honest...))
	for p := range int32(parts) {
		c.checkPrefix(bad, honest[0], topic, p)
	}
}

// checkPrefix requires partition p of topic on node i's disk to be a prefix
// of the same partition on node ref's disk; both must be stopped.
func (c *cluster) checkPrefix(i, ref int, topic string, p int32) {
	c.t.Helper()
	mine, err := c.diskLog(i, topic, p)
	if err != nil {
		c.t.Fatalf("node%d's %s-%d on disk: %v", i, topic, p, err)
	}
	theirs, err := c.diskLog(ref, topic, p)
	if err != nil {
		c.t.Fatalf("node%d's %s-%d on disk: %v", ref, topic, p, err)
	}
	if len(mine) > len(theirs) {
		c.t.Errorf("node%d holds %d records of %s-%d, more than the %d of node%d", i, len(mine), topic, p, len(theirs), ref)
		return
	}
	for k, r := range mine {
		if r != theirs[k] {
			c.t.Errorf("%s-%d offset %d: node%d holds %q, node%d %q", topic, p, r.Offset, i, r.Value, ref, theirs[k].Value)
			return
		}
	}
	c.t.Logf("node%d's %s-%d (%d records) is a prefix of node%d's (%d records)", i, topic, p, len(mine), ref, len(theirs))
}

// logLines returns the lines of node i's stderr (all its runs) that
// contain substr.
func (c *cluster) logLines(i int, substr string) []string {
	c.t.Helper()
	data, err := readFileIfExists(c.nodes[i].logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}
