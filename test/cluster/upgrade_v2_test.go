package cluster

import (
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/test/harness"
)

// TestUpgradeToVersion2 (issues 16 and 27, docs/cluster.md "The app
// version"): a 4-broker chain made by a release before app versions (its
// genesis sets none: version 1), under idempotent produce load, is
// upgraded in place to version 2 by `stele cluster upgrade`: the binary
// runs both, so no broker stops. Every block from the upgrade's height on
// that carries anything opens with the proposer's AppendTime and none
// before it does, every batch certificate below the height names no chain
// and every one from it names this chain (a batch certified across the
// height is refused, retried by its producer, and certified anew). Nothing
// acknowledged is lost or doubled, and the brokers end at one app hash
// with the same logs.
func TestUpgradeToVersion2(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	c.SetGenesisAppVersion(0)
	c.StartAll()
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "upgrade2", partitions: 3, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 2 * time.Minute,
	})
	w.waitAcked(c, 30*time.Second, 200, "app version 1")
	if v := c.upgradeState(0); v.AppVersion != 1 || v.MaxAppVersion != fsm.MaxAppVersion || v.Scheduled != nil {
		t.Fatalf("before the upgrade: %+v", v)
	}

	v := c.scheduleUpgrade("+30", 2, "v2")
	h := v.Scheduled.Height
	t.Logf("%s upgrade to app version 2 scheduled at height %d (committed at %d)", harness.Clock(), h, v.Height)
	c.WaitHeight(2*time.Minute, h+5, c.All()...)
	w.waitAcked(c, 2*time.Minute, 300, "app version 2")
	for _, i := range c.All() {
		if err := c.Exited(i); err != nil {
			t.Fatalf("node%d exited across an upgrade its binary runs: %v", i, err)
		}
		if v := c.upgradeState(i); v.AppVersion != 2 || v.Scheduled != nil || v.Height < h {
			t.Fatalf("node%d after the upgrade: %+v", i, v)
		}
	}

	// What the chain holds, block by block.
	chain := c.ChainID()
	top := c.MaxHeight(0)
	var unboundBefore, boundFrom, openedFrom, nonEmptyFrom int
	for height := int64(1); height <= top; height++ {
		txs, err := c.BlockTxs(0, height)
		if err != nil {
			t.Fatal(err)
		}
		for j, raw := range txs {
			if fsm.IsCertifiedTx(raw) {
				cert, err := fsm.DecodeCertifiedTx(raw)
				if err != nil {
					t.Fatalf("height %d tx %d: %v", height, j, err)
				}
				switch {
				case height < h && cert.Chain != "":
					t.Fatalf("height %d, below the upgrade's %d: a certificate bound to %q", height, h, cert.Chain)
				case height < h:
					unboundBefore++
				case cert.Chain == chain:
					boundFrom++
				case cert.Chain != "":
					t.Fatalf("height %d: a certificate bound to %q, this chain is %q", height, cert.Chain, chain)
				}
				continue
			}
			tx, err := fsm.DecodeTx(raw)
			if err != nil {
				t.Fatalf("height %d tx %d does not decode: %v", height, j, err)
			}
			opening := false
			if len(tx.Commands) > 0 {
				_, opening = tx.Commands[0].(fsm.AppendTime)
			}
			switch {
			case opening && (height < h || j != 0):
				t.Fatalf("height %d (upgrade at %d): an AppendTime at position %d", height, h, j)
			case opening:
				openedFrom++
			}
		}
		if height >= h && len(txs) > 0 {
			nonEmptyFrom++
			if tx, err := fsm.DecodeTx(txs[0]); err != nil || len(tx.Commands) != 1 {
				t.Fatalf("height %d, from the upgrade: the block does not open with the proposer's AppendTime", height)
			} else if _, ok := tx.Commands[0].(fsm.AppendTime); !ok {
				t.Fatalf("height %d, from the upgrade: the block opens with %s", height, fsm.KindName(tx.Commands[0].Kind()))
			}
		}
	}
	t.Logf("below height %d: %d certificates naming no chain; from it: %d bound to %q, %d of %d non-empty blocks opened by AppendTime",
		h, unboundBefore, boundFrom, chain, openedFrom, nonEmptyFrom)
	if unboundBefore == 0 || boundFrom == 0 || nonEmptyFrom == 0 {
		t.Fatal("the load did not reach both sides of the upgrade")
	}
	w.end(c, time.Minute)
	for _, i := range c.All() {
		w.checkDisk(c, i)
	}
}
