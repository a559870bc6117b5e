package cluster

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
)

// TestByzantineDataPlane: one of four brokers signs batches it never
// stores and serves corrupted bytes for the batches it does hold
// (STELE_BYZANTINE=sign-without-storing,corrupt-batches). An honest broker
// is killed while the workload runs, so the batches certified meanwhile
// reach it only by fetching them from their signers after its restart;
// where the Byzantine broker is a signer it has nothing or wrong bytes to
// give. The honest broker must fetch from an honest signer and catch up:
// the honest three end at one app hash with byte-identical logs and every
// acknowledged record. (Issue 4: "a Byzantine broker that signs without
// storing, or sends bytes that do not match a digest, cannot stall or
// corrupt honest brokers".)
func TestByzantineDataPlane(t *testing.T) {
	byz := harness.ByzantineBin(t)
	c := newCluster(t, clusterOptions{})
	bad := c.Rng.IntN(len(c.Nodes))
	honest := without(c.All(), bad)
	victim := honest[c.Rng.IntN(len(honest))]
	others := without(honest, victim)
	c.Nodes[bad].Bin = byz
	c.Nodes[bad].Env = []string{"STELE_BYZANTINE=sign-without-storing,corrupt-batches"}
	t.Logf("node%d signs without storing and corrupts what it serves; node%d will be killed and must fetch", bad, victim)

	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "dataplane", partitions: 3, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 30*time.Second, 200, "4 brokers")
	// With the victim down and one broker Byzantine the cluster has two
	// faults, more than f = 1: progress meanwhile is not promised (a
	// batch certified by the victim and the liar alone, whose push to the
	// others the kill cut short, cannot be applied until the victim is
	// back). So the downtime is bounded by time, not by progress.
	before := w.ackedCount()
	c.Kill9(victim)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && w.ackedCount() < before+500 {
		time.Sleep(100 * time.Millisecond)
	}
	during := w.ackedCount() - before
	t.Logf("%s %d records acknowledged while node%d was down", harness.Clock(), during, victim)
	c.Restart(victim)
	c.WaitCaughtUp(60*time.Second, victim, others...)
	w.waitAcked(c, 45*time.Second, 300, fmt.Sprintf("node%d back", victim))

	fetched, err := c.metric(victim, "stele_dataplane_fetched_total")
	if err != nil {
		t.Fatal(err)
	}
	// Records acknowledged while the victim was down were certified
	// without it (but for the few in flight at the kill), so it can only
	// have applied them by fetching.
	if during >= 50 && fetched == 0 {
		t.Errorf("%d records were acknowledged while node%d was down, yet it fetched no batch after its restart", during, victim)
	}
	t.Logf("node%d fetched %v batches after its restart", victim, fetched)

	w.end(c, 60*time.Second, honest...)
	for _, i := range honest {
		w.checkDisk(c, i)
	}
}

// metric reads one unlabelled counter or gauge from node i's /metrics.
func (c *cluster) metric(i int, name string) (float64, error) {
	body, err := c.metricsText(i)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("node%d's /metrics has no %s", i, name)
	}
	return strconv.ParseFloat(m[1], 64)
}

// metricsText returns node i's /metrics page.
func (c *cluster) metricsText(i int) (string, error) {
	resp, err := c.HTTPC.Get(c.Nodes[i].HTTPURL + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
