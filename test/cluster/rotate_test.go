package cluster

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/test/harness"
)

// TestRotateKey (issue 19, stele cluster rotate-key): under continuous
// idempotent produce and consume, `stele cluster rotate-key N` replaces
// one running broker's validator key without a restart: every broker lists
// node N with its new key, its power and signing, and its old key as
// removed ("key-rotated"), and every broker's height; the broker's key file holds the new key and the
// next key's file is gone. Restarted, it signs with the new key. A second
// rotation of another broker then goes through too. Nothing acknowledged
// is lost or duplicated and the four end at one app hash with
// byte-identical logs.
func TestRotateKey(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "rotate", partitions: 3, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 60 * time.Second,
	})
	w.waitAcked(c, 30*time.Second, 300, "4 brokers")
	rotate := func(r int) {
		t.Helper()
		via := (r + 1) % len(c.Nodes)
		home := filepath.Join(c.Dir, "cluster", fmt.Sprintf("node%d", r), "cometbft")
		_, old, err := cometbft.ValidatorKey(home)
		if err != nil {
			t.Fatal(err)
		}
		oldAddr := strings.ToUpper(hex.EncodeToString(old[:]))
		out, err := exec.Command(harness.SteleBin, "cluster", "rotate-key", fmt.Sprint(c.Nodes[r].NodeID), "--dir", filepath.Join(c.Dir, "cluster"),
			"--http", c.Nodes[via].HTTP).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "applied at height") || !strings.Contains(string(out), "key") {
			t.Fatalf("stele cluster rotate-key %d: %v\n%s", c.Nodes[r].NodeID, err, out)
		}
		t.Logf("%s %s", harness.Clock(), out)
		var newAddr string
		c.Eventually(60*time.Second, fmt.Sprintf("node%d signs with its new key on every broker's status", r), func() error {
			for _, i := range c.All() {
				st, err := c.clusterStatus(i)
				if err != nil {
					return err
				}
				var listed, retired bool
				for _, v := range st.Validators {
					if v.NodeID != nil && (v.Height == nil || *v.Height <= 0) {
						return fmt.Errorf("node%d shows no height for broker %d", i, *v.NodeID)
					}
					switch {
					case v.NodeID != nil && *v.NodeID == c.Nodes[r].NodeID:
						if v.Address == oldAddr || v.KeyRotatedAt == 0 || v.Role != httpapi.RoleValidator || v.Power <= 0 || !v.Signing ||
							v.Height == nil || *v.Height <= v.KeyRotatedAt {
							return fmt.Errorf("node%d lists node%d as %+v", i, r, v)
						}
						listed, newAddr = true, v.Address
					case v.Address == oldAddr:
						if v.Role != httpapi.RoleRemoved || v.Removed == nil || v.Removed.Reason != "key-rotated" || v.Power != 0 {
							return fmt.Errorf("node%d lists the old key as %+v", i, v)
						}
						retired = true
					}
				}
				if !listed || !retired {
					return fmt.Errorf("node%d lists node%d: %t, its old key: %t", i, r, listed, retired)
				}
			}
			return nil
		})
		_, now, err := cometbft.ValidatorKey(home)
		if err != nil || !strings.EqualFold(hex.EncodeToString(now[:]), newAddr) {
			t.Fatalf("node%d's key file holds %X (%v), want the new key %s", r, now, err, newAddr)
		}
		if _, err := os.Stat(filepath.Join(home, cometbft.NextKeyFile)); !os.IsNotExist(err) {
			t.Fatalf("node%d's next key file after the switch: %v", r, err)
		}
		t.Logf("%s node%d's key %s replaced by %s; log: %q", harness.Clock(), r, oldAddr, newAddr,
			c.StartLines(r, "signs with its new validator key"))
	}
	r := 1 + c.Rng.IntN(len(c.Nodes)-1)
	rotate(r)
	w.waitAcked(c, 60*time.Second, 600, fmt.Sprintf("node%d's key rotated", r))

	// Restarted, it loads the new key and signs with it.
	c.Stop(r)
	c.Start(r)
	c.WaitCaughtUp(60*time.Second, r, without(c.All(), r)...)
	c.waitListed(60*time.Second, c.All(), r, "signing after its restart", func(v httpapi.ValidatorView) error {
		if v.Role != httpapi.RoleValidator || !v.Signing {
			return fmt.Errorf("not signing")
		}
		return nil
	})
	rotate((r + 1) % len(c.Nodes))
	w.waitAcked(c, 60*time.Second, 900, "two keys rotated")
	w.end(c, 60*time.Second)
}
