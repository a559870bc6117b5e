package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

var (
	restartFill  = flag.Duration("restart.fill", 0, "TestRestartPhases: how long to produce before the power cuts (0: skip the test)")
	restartValue = flag.Int("restart.value", 100, "TestRestartPhases: bytes of each record's value")
	restartConns = flag.Int("restart.writers", 32, "TestRestartPhases: writers, each producing one record at a time")
	restartWipe  = flag.Bool("restart.rejoin", false, "TestRestartPhases: wipe node0 and let it rejoin before the power cuts, as the chaos run's corrupt and tamper faults do")
	restartKeep  = flag.String("restart.keep", "", "TestRestartPhases: copy node0's data directory here at the end (it must not exist)")
)

// TestRestartPhases measures where a broker's restart spends its time
// before /healthz answers, after the cluster has been filled the way a long
// chaos run fills it (docs/reliability.md, "Latest long run"): writers
// produce one small record at a time for -restart.fill, then every broker
// is power-cut (SIGKILL, then every write not fsynced is dropped:
// LoseUnsynced), restarted at once, and the same again for one broker
// alone. It prints each broker's time to /healthz, the sizes of its data
// directory's parts and the phase lines the broker logged at that start.
// It is a measurement, run by hand:
//
//	flock /tmp/stele-heavy.lock go test ./test/cluster -run TestRestartPhases -count=1 -v -restart.fill 2m
//
// It fails if a broker does not come back within the harness's 30 s, or
// logs no line for one of the phases.
func TestRestartPhases(t *testing.T) {
	if *restartFill == 0 {
		t.Skip("a measurement: give -restart.fill to run it")
	}
	c := newCluster(t, clusterOptions{SyncJournal: true})
	c.StartAll()
	const topic = "restart"
	harness.CreateTopic(t, c.KafkaAddrs(c.All()...), topic, 4, nil)
	acked := fill(t, c, topic, *restartFill, *restartValue, *restartConns)
	t.Logf("%s filled for %v: %d records of %d bytes acknowledged", harness.Clock(), *restartFill, acked, *restartValue)
	if *restartWipe {
		c.Kill9(0)
		c.Wipe(0)
		t0 := time.Now()
		c.Restart(0)
		c.WaitCaughtUp(3*time.Minute, 0, 1, 2, 3)
		t.Logf("%s node0 rejoined in %v", harness.Clock(), time.Since(t0))
	}
	for _, i := range c.All() {
		t.Logf("node%d holds %s", i, dirSizes(c.Nodes[i].Dir))
	}
	for _, i := range c.All() {
		c.Kill9(i)
	}
	for _, i := range c.All() {
		c.LoseUnsynced(i)
	}
	c.reportRestart("power cut of all four", c.All())
	c.WaitHeight(time.Minute, c.MaxHeight(c.All()...)+1, c.All()...)
	c.Kill9(1)
	c.LoseUnsynced(1)
	c.reportRestart("power cut of node1", []int{1})
	if *restartKeep != "" {
		c.Kill9(0)
		if err := copyTree(c.Nodes[0].Dir, *restartKeep); err != nil {
			t.Fatal(err)
		}
		t.Logf("node0's data directory copied to %s", *restartKeep)
	}
}

// fill produces records of size bytes through writers goroutines, each
// sending one record at a time and waiting for its acknowledgement, for d.
// It returns how many were acknowledged.
func fill(t *testing.T, c *cluster, topic string, d time.Duration, size, writers int) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs(c.All()...)...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]byte, size)
			for n := 0; ctx.Err() == nil; n++ {
				copy(v, fmt.Sprintf("w%d-%d ", w, n))
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err == nil {
					acked.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if acked.Load() == 0 {
		t.Fatal("no record was acknowledged while filling the cluster")
	}
	return acked.Load()
}

// reportRestart starts the nodes given at once, polls each one's /healthz
// every 10 ms, and logs how long each took and the phase lines it logged.
func (c *cluster) reportRestart(what string, idx []int) {
	c.T.Helper()
	t0 := time.Now()
	for _, i := range idx {
		c.Launch(i)
	}
	took := map[int]time.Duration{}
	deadline := t0.Add(30 * time.Second)
	for len(took) < len(idx) {
		if time.Now().After(deadline) {
			c.T.Fatalf("%s: not every node answered /healthz within 30 s (%v did)", what, took)
		}
		for _, i := range idx {
			if _, ok := took[i]; ok {
				continue
			}
			if err := c.Exited(i); err != nil {
				c.T.Fatal(err)
			}
			if _, err := c.Health(i); err == nil {
				took[i] = time.Since(t0)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, i := range idx {
		c.T.Logf("%s: node%d answered /healthz after %v", what, i, took[i].Round(time.Millisecond))
		for _, p := range harness.StartPhases {
			lines := c.StartLines(i, p)
			if len(lines) == 0 {
				c.T.Errorf("node%d logged no %q line at its start", i, p)
			}
			for _, l := range lines {
				c.T.Logf("    %s", l)
			}
		}
	}
}

// dirSizes sums the bytes of each top-level part of a data directory.
func dirSizes(dir string) string {
	entries, _ := os.ReadDir(dir)
	var parts []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		var n int64
		filepath.Walk(filepath.Join(dir, e.Name()), func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				n += fi.Size()
			}
			return nil
		})
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", e.Name(), float64(n)/(1<<20)))
	}
	return strings.Join(parts, ", ")
}
