package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/freeport"
	"github.com/stele-io/stele/internal/fsm"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr() // below the ephemeral range: see package freeport
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clusterNode is one broker of an in-process CometBFT cluster.
type clusterNode struct {
	*snapshotBroker
	o *cometbft.Orderer
}

func startClusterNode(t testing.TB, cfg cometbft.Config, opts SnapshotOptions) *clusterNode {
	t.Helper()
	n := &clusterNode{snapshotBroker: newSnapshotBroker(t, opts)}
	o, err := cometbft.New(cfg, n.snap, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Stop() }) // runs before the broker's cleanup
	n.o = o
	n.b.Start(o)
	return n
}

// TestBrokerJoinsClusterByStateSync is issue 3's "a new or wiped broker
// joins through state sync once older blocks are pruned", in one process:
// three of four brokers run with snapshots every 5 heights and prune
// blocks; the fourth starts with empty directories, restores a snapshot
// through CometBFT's state sync, catches up, and ends with logs
// byte-identical to the others' and the same app hash.
func TestBrokerJoinsClusterByStateSync(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four CometBFT nodes")
	}
	dir := t.TempDir()
	var cfgs []cometbft.Config
	for i := range 4 {
		c := cometbft.DefaultConfig(filepath.Join(dir, fmt.Sprintf("node%d", i)))
		c.P2PListen = "tcp://" + freeAddr(t)
		c.RPCListen = "tcp://" + freeAddr(t)
		c.CreateEmptyBlocksInterval = time.Second
		c.TimeoutPropose = time.Second
		cfgs = append(cfgs, c)
	}
	cfgs, err := cometbft.InitCluster(cfgs, cometbft.InitOptions{MaxTxBytes: 1 << 20, MaxBlockBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	opts := SnapshotOptions{Interval: 5, RetainBlocks: 12}
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, startClusterNode(t, cfgs[i], opts))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r, err := nodes[0].b.SubmitOne(ctx, fsm.CreateTopic{Name: "t", Partitions: 2, ReplicationFactor: -1}); err != nil || r.Code != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	for i := 0; i < 12; i++ {
		if r, err := nodes[i%3].b.SubmitOne(ctx, fsm.Produce{Topic: "t", Partition: int32(i % 2), Records: batch(t, 1+i%3)}); err != nil || r.Code != 0 {
			t.Fatalf("produce %d: %v %+v", i, err, r)
		}
	}
	eventually(t, 30*time.Second, func() error {
		if base := nodes[0].o.Node().BlockStore().Base(); base <= 1 {
			return fmt.Errorf("node 0 has pruned nothing (base %d)", base)
		}
		return nil
	})

	joiner := cfgs[3]
	joiner.StateSync = cometbft.StateSyncConfig{Mode: cometbft.StateSyncAuto, DiscoveryTime: 5 * time.Second}
	for _, c := range cfgs[:3] {
		joiner.StateSync.RPCServers = append(joiner.StateSync.RPCServers, strings.TrimPrefix(c.RPCListen, "tcp://"))
	}
	n3 := startClusterNode(t, joiner, opts)
	eventually(t, 60*time.Second, func() error {
		if h, _ := n3.f.Info(); h == 0 {
			return errors.New("node 3 has not restored a snapshot")
		}
		return nil
	})
	restored, _ := n3.f.Info()
	r, err := nodes[0].b.SubmitOne(ctx, fsm.Produce{Topic: "t", Partition: 1, Records: batch(t, 4)})
	if err != nil || r.Code != 0 {
		t.Fatalf("produce after the join: %v %+v", err, r)
	}
	eventually(t, 30*time.Second, func() error {
		p := n3.b.View().Partition("t", 1)
		if p == nil || p.HighWatermark() != r.BaseOffset+4 {
			return errors.New("node 3 has not applied the produce after its join")
		}
		return nil
	})
	h0, hash0 := nodes[0].f.Info()
	eventually(t, time.Minute, func() error {
		if h3, hash3 := n3.f.Info(); h3 < h0 || (h3 == h0 && string(hash3) != string(hash0)) {
			return fmt.Errorf("node 3 at %d, node 0 at %d", h3, h0)
		}
		return nil
	})
	if _, hash3 := n3.f.Info(); string(hash3) != string(hash0) {
		t.Fatalf("node 3 app hash %x, node 0 %x", hash3, hash0)
	}
	// Both brokers keep applying (empty) blocks while the files are read,
	// so compare until two reads agree rather than once.
	eventually(t, 30*time.Second, func() error {
		got, want := logTree(t, n3.dir), logTree(t, nodes[0].dir)
		for name, b := range want {
			if got[name] != b {
				return fmt.Errorf("node 3's %s differs from node 0's (%d bytes, node 0 %d)", name, len(got[name]), len(b))
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("node 3 has %d log files, node 0 %d", len(got), len(want))
		}
		return nil
	})
	if err := n3.o.Err(); err != nil {
		t.Fatalf("node 3: %v", err)
	}
	t.Logf("node 3 restored height %d and caught up to %d", restored, h0)
}
