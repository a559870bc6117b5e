package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
)

// upgradeView is the part of GET /v1/cluster/upgrade the test reads.
type upgradeView struct {
	Height        int64  `json:"height"`
	AppVersion    uint32 `json:"app_version"`
	MaxAppVersion uint32 `json:"max_app_version"`
	Scheduled     *struct {
		Height  int64  `json:"height"`
		Version uint32 `json:"version"`
		Name    string `json:"name"`
	} `json:"scheduled"`
}

// exitUpgradeRequired is stele serve's exit status when it stops for an
// upgrade its binary cannot run (internal/cli.ExitUpgradeRequired).
const exitUpgradeRequired = 10

// TestUpgradeUnderLoad (issue 16 item 8, docs/cluster.md "Upgrades"): a
// running 4-broker cluster, under idempotent produce load, upgrades from
// the default build (app version 18, which a new chain starts at) to one
// built with -tags steleupgradetest, whose version 19 hashes blocks
// differently. `stele cluster upgrade` schedules version 19 a few dozen
// heights ahead with every
// validator's key, and the operator follows the documented procedure:
// restart each broker on the new binary as soon as it exits with status 10.
//
// One broker lags at the height, always (a flake of the first version of
// this test, fault seed 1796258605365182904, did this by chance: three
// brokers committed h-1 without node3 and stopped, and the test waited for
// node3 to stop too, with nobody left to give it h-1). Here node3 is frozen
// (SIGSTOP) well before the height; the three others commit h-1 without it,
// each stops with exit status 10 and is started on the new binary at once,
// and they go on under version 18. Thawed, node3, still on the old binary,
// takes the heights it lacks up to h-1 from the new-binary peers, stops
// with status 10 in turn, and is started on the new binary after the
// others have moved past h (a broker down across the height). Then two
// brokers are wiped and block-sync the chain from genesis: node1 on the old
// binary, which must stop with status 10 before h (block sync used to
// crash there with Go's status 2) and then runs the new one, and node2 on
// the new binary alone, applying version 18 below h and version 19 from h.
// Nothing acknowledged is lost, every broker ends at one app hash (no
// fork) with byte-identical logs.
func TestUpgradeUnderLoad(t *testing.T) {
	newBin := filepath.Join(harness.BinDir, "stele-upgradetest")
	if err := harness.GoBuild(newBin, "-tags", "steleupgradetest"); err != nil {
		t.Fatalf("go build -tags steleupgradetest ./cmd/stele: %v", err)
	}
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "upgrade", partitions: 3, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 2 * time.Minute,
	})
	w.waitAcked(c, 30*time.Second, 200, "old binary, 4 brokers")
	if v := c.upgradeState(0); v.AppVersion != 18 || v.MaxAppVersion != 18 || v.Scheduled != nil {
		t.Fatalf("before the upgrade: %+v", v)
	}

	v := c.scheduleUpgrade("+40", 19, "upgradetest")
	h := v.Scheduled.Height
	t.Logf("%s upgrade to app version 19 scheduled at height %d (committed at %d)", harness.Clock(), h, v.Height)

	// node3 lags: frozen more than a dozen heights before h-1.
	const laggard = 3
	c.WaitHeight(time.Minute, h-20, laggard)
	at, err := c.Health(laggard)
	if err != nil {
		t.Fatal(err)
	}
	c.Pause(laggard)
	if at.Height >= h-12 {
		t.Fatalf("node%d was at height %d when frozen, too close to the upgrade height %d to lag for sure", laggard, at.Height, h)
	}
	t.Logf("%s node%d frozen at height %d or just after", harness.Clock(), laggard, at.Height)

	// The three others stop by themselves, cleanly, before applying h,
	// and each runs the new binary as soon as it has stopped.
	c.upgradeAsTheyExit(2*time.Minute, h, newBin, 0, 1, 2)
	t.Logf("%s nodes 0-2 stopped with exit status %d and run the new binary; %d records acknowledged so far", harness.Clock(), exitUpgradeRequired, w.ackedCount())
	c.WaitHeight(2*time.Minute, h+3, 0, 1, 2)
	w.waitAcked(c, 2*time.Minute, 300, "new binary, 3 brokers, node3 frozen")

	// The laggard, on the old binary, catches up to h-1 from peers that run
	// the new one, and stops there.
	c.Resume(laggard)
	c.upgradeAsTheyExit(2*time.Minute, h, "", laggard)
	t.Logf("%s node%d caught up to height %d on the old binary and stopped with exit status %d", harness.Clock(), laggard, h-1, exitUpgradeRequired)
	// Down across the height, it is started on the new binary once the
	// others are well past h.
	c.WaitHeight(time.Minute, h+10, 0, 1, 2)
	c.Nodes[laggard].Bin = newBin
	c.Start(laggard)
	c.WaitCaughtUp(2*time.Minute, laggard, 0, 1, 2)
	w.waitAcked(c, 2*time.Minute, 500, "new binary, 4 brokers")
	for _, i := range c.All() {
		if v := c.upgradeState(i); v.AppVersion != 19 || v.MaxAppVersion != 19 || v.Scheduled != nil || v.Height < h {
			t.Fatalf("node%d after the upgrade: %+v", i, v)
		}
	}

	// A broker rebuilt from nothing block-syncs the chain. On the old
	// binary it stops with status 10 before h (block sync, unlike
	// consensus, would crash on the block it cannot apply; see
	// consensus/cometbft's stopBlockSync), and the new binary takes over
	// from there.
	const syncedOld = 1
	c.Stop(syncedOld)
	c.Wipe(syncedOld)
	c.Nodes[syncedOld].Bin = ""
	c.Launch(syncedOld)
	c.upgradeAsTheyExit(2*time.Minute, h, newBin, syncedOld)
	c.WaitCaughtUp(2*time.Minute, syncedOld, 0, 2, 3)
	// On the new binary it applies version 18 rules below h, version 19
	// from h.
	const syncedNew = 2
	c.Stop(syncedNew)
	c.Wipe(syncedNew)
	c.Start(syncedNew)
	c.WaitCaughtUp(2*time.Minute, syncedNew, 0, 1, 3)
	for _, i := range []int{syncedOld, syncedNew} {
		if v := c.upgradeState(i); v.AppVersion != 19 || v.Height < h {
			t.Fatalf("node%d rebuilt by block sync: %+v", i, v)
		}
	}

	w.end(c, time.Minute)
	for _, i := range c.All() {
		w.checkDisk(c, i)
	}
}

// upgradeAsTheyExit waits up to d for each of the nodes given, running a
// binary that cannot run the upgrade scheduled at h, to stop by itself
// with exit status 10 and last words naming the version and the height,
// and starts each on newBin as soon as it has stopped (docs/cluster.md
// "Upgrades": restart each broker as soon as it exits), without waiting
// for the others. Node 0, if given, is first started again on its old
// binary, which must refuse to run with the same status. An empty newBin
// leaves the nodes stopped.
func (c *cluster) upgradeAsTheyExit(d time.Duration, h int64, newBin string, idx ...int) {
	t := c.T
	t.Helper()
	// Each node's exit is reported on one channel, in the order they
	// exit, so a node is restarted the moment it stops.
	exited := make(chan int, len(idx))
	for _, i := range idx {
		done := c.Nodes[i].Proc.Done
		go func() { <-done; exited <- i }()
	}
	pending := slices.Clone(idx)
	timeout := time.After(d)
	for len(pending) > 0 {
		var i int
		select {
		case i = <-exited:
		case <-timeout:
			var at []string
			for _, i := range c.All() {
				if hl, err := c.Health(i); err == nil {
					at = append(at, fmt.Sprintf("node%d at %d", i, hl.Height))
				}
			}
			t.Fatalf("nodes %v did not exit within %v of the upgrade height %d (a hang); %s", pending, d, h, strings.Join(at, ", "))
		}
		pending = slices.DeleteFunc(pending, func(j int) bool { return j == i })
		err := c.Nodes[i].Proc.Err
		c.Nodes[i].Proc = nil
		if code := exitCode(err); code != exitUpgradeRequired {
			t.Fatalf("node%d exited with %v, want exit status %d", i, err, exitUpgradeRequired)
		}
		lines := c.logLines(i, "upgrade required")
		if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], fmt.Sprintf("from height %d", h)) || !strings.Contains(lines[len(lines)-1], "app version 19") {
			t.Fatalf("node%d's last words do not name the version and height: %q", i, lines)
		}
		t.Logf("%s node%d stopped with exit status %d before height %d", harness.Clock(), i, exitUpgradeRequired, h)
		if i == 0 {
			// An old binary started again refuses to run, with the
			// same status.
			c.Launch(0)
			if err, _ := c.WatchUntilExit(0, time.Minute); exitCode(err) != exitUpgradeRequired {
				t.Fatalf("old binary restarted at the upgrade: exit %v, want status %d", err, exitUpgradeRequired)
			}
		}
		if newBin != "" {
			c.Nodes[i].Bin = newBin
			c.Launch(i)
			t.Logf("%s node%d started on the new binary", harness.Clock(), i)
		}
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// scheduleUpgrade runs `stele cluster upgrade` with every validator's key
// (the cluster directory) through node 0, scheduling version at height
// (+N: N heights ahead), and returns what it answered.
func (c *cluster) scheduleUpgrade(height string, version uint32, name string) upgradeView {
	t := c.T
	t.Helper()
	out, err := exec.Command(harness.SteleBin, "cluster", "upgrade", "--http", c.Nodes[0].HTTP, "--dir", filepath.Dir(c.Nodes[0].Dir),
		"--height", height, "--version", fmt.Sprint(version), "--name", name, "--output", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("stele cluster upgrade: %v\n%s", err, out)
	}
	var v upgradeView
	if err := json.Unmarshal(out, &v); err != nil || v.Scheduled == nil || v.Scheduled.Version != version {
		t.Fatalf("stele cluster upgrade answered %s (%v): want version %d scheduled", out, err, version)
	}
	return v
}

// upgradeState reads node i's GET /v1/cluster/upgrade.
func (c *cluster) upgradeState(i int) upgradeView {
	c.T.Helper()
	var v upgradeView
	c.Eventually(10*time.Second, fmt.Sprintf("node%d's upgrade state", i), func() error {
		resp, err := c.HTTPC.Get(c.Nodes[i].HTTPURL + "/v1/cluster/upgrade")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(&v)
	})
	return v
}
