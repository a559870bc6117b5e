package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
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
// the default build (app version 1) to one built with -tags
// steleupgradetest, whose version 2 hashes blocks differently. `stele
// cluster upgrade` schedules version 2 a few dozen heights ahead with every
// validator's key; every old broker stops by itself at the height before
// with exit status 10; each is started again on the new binary and the
// chain goes on under version 2. Nothing acknowledged is lost, every broker
// ends at one app hash (no fork) with byte-identical logs.
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
	if v := c.upgradeState(0); v.AppVersion != 1 || v.MaxAppVersion != 1 || v.Scheduled != nil {
		t.Fatalf("before the upgrade: %+v", v)
	}

	clusterDir := filepath.Dir(c.Nodes[0].Dir)
	out, err := exec.Command(harness.SteleBin, "cluster", "upgrade", "--http", c.Nodes[0].HTTP, "--dir", clusterDir,
		"--height", "+40", "--version", "2", "--name", "upgradetest", "--output", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("stele cluster upgrade: %v\n%s", err, out)
	}
	var v upgradeView
	if err := json.Unmarshal(out, &v); err != nil || v.Scheduled == nil || v.Scheduled.Version != 2 {
		t.Fatalf("stele cluster upgrade answered %s (%v): want version 2 scheduled", out, err)
	}
	h := v.Scheduled.Height
	t.Logf("%s upgrade to app version 2 scheduled at height %d (committed at %d)", harness.Clock(), h, v.Height)

	// Every old broker stops by itself, cleanly, before applying h.
	for _, i := range c.All() {
		err := c.WaitExit(i, 2*time.Minute, fmt.Sprintf("the upgrade height %d", h))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUpgradeRequired {
			t.Fatalf("node%d exited with %v, want exit status %d", i, err, exitUpgradeRequired)
		}
		lines := c.logLines(i, "upgrade required")
		if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], fmt.Sprintf("from height %d", h)) || !strings.Contains(lines[len(lines)-1], "app version 2") {
			t.Fatalf("node%d's last words do not name the version and height: %q", i, lines)
		}
	}
	t.Logf("%s every old broker stopped with exit status %d; %d records acknowledged so far", harness.Clock(), exitUpgradeRequired, w.ackedCount())

	// An old binary started again refuses to run, with the same status.
	c.Launch(0)
	if err, _ := c.WatchUntilExit(0, time.Minute); exitCode(err) != exitUpgradeRequired {
		t.Fatalf("old binary restarted at the upgrade: exit %v, want status %d", err, exitUpgradeRequired)
	}

	for _, i := range c.All() {
		c.Nodes[i].Bin = newBin
	}
	c.StartAll()
	w.waitAcked(c, 2*time.Minute, 500, "new binary, 4 brokers")
	c.WaitHeight(time.Minute, h+5, c.All()...)
	for _, i := range c.All() {
		if v := c.upgradeState(i); v.AppVersion != 2 || v.MaxAppVersion != 2 || v.Scheduled != nil || v.Height < h {
			t.Fatalf("node%d after the upgrade: %+v", i, v)
		}
	}
	w.end(c, time.Minute)
	for _, i := range c.All() {
		w.checkDisk(c, i)
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

// upgradeState reads node i's GET /v1/cluster/upgrade.
func (c *cluster) upgradeState(i int) upgradeView {
	c.T.Helper()
	var v upgradeView
	c.Eventually(10*time.Second, fmt.Sprintf("node%d's upgrade state", i), func() error {
		resp, err := c.HTTPC.Get("http://" + c.Nodes[i].HTTP + "/v1/cluster/upgrade")
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
