package cluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDiskFullFailStop: one broker's partition logs live on a small file
// system that fills up under produce load. That broker must stop with a
// non-zero exit and say why (a local storage fault is never hashed as a
// result: it would fork the broker off the chain, or be committed as a
// Kafka error on a single node); the other three keep committing and no
// acknowledged record is lost. With room again, the broker restarts,
// replays the block it failed on, catches up and holds the same state and
// byte-identical logs as the others.
// (Issue 16, "Fail-stop on local faults"; DESIGN.md §1.)
func TestDiskFullFailStop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root)")
	}
	c := newCluster(t, clusterOptions{})
	victim := c.Rng.IntN(len(c.Nodes))
	logs := filepath.Join(c.Nodes[victim].Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", logs).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs at %s: %v: %s", logs, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", logs).Run() })
	c.StartAll()

	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: "disk-full", partitions: 3, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 60 * time.Second,
	})
	w.waitAcked(c, 30*time.Second, 100, "4 brokers")

	// Large records fill the victim's 2 MiB quickly.
	others := without(c.All(), victim)
	filler, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs(others...)...), kgo.DefaultProduceTopic("disk-fill"),
		kgo.AllowAutoTopicCreation(), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	value := make([]byte, 64<<10) // incompressible
	for i := range value {
		value[i] = byte(c.Rng.Uint32())
	}
	proc := c.Nodes[victim].Proc
fill:
	for i := 0; ; i++ {
		select {
		case <-proc.Done:
			break fill
		default:
		}
		if i == 200 {
			t.Fatalf("node%d still running after 200 records of 64 KiB on a 2 MiB disk", victim)
		}
		if err := filler.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			t.Fatalf("filler record %d through the other brokers: %v", i, err)
		}
	}
	c.Nodes[victim].Proc = nil
	exitErr := proc.Err
	if exitErr == nil {
		t.Fatalf("node%d exited with status 0 on a full disk; want non-zero", victim)
	}
	if len(c.logLines(victim, "local storage fault")) == 0 || len(c.logLines(victim, "no space left on device")) == 0 {
		t.Errorf("node%d's log does not say it stopped on a local storage fault (no space left on device)", victim)
	}
	if p := c.logLines(victim, "panic:"); len(p) > 0 {
		t.Errorf("node%d stopped by panicking, not by failing: %q", victim, p)
	}
	t.Logf("node%d exited on its full disk: %v", victim, exitErr)

	// The others go on committing without it.
	w.waitAcked(c, 45*time.Second, 500, "3 brokers, one stopped on a full disk")

	// Room again (the file system grows, its contents stay): the broker
	// restarts from its committed state and catches up.
	if out, err := exec.Command("mount", "-o", "remount,size=256m", logs).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v: %s", logs, err, out)
	}
	c.Start(victim)
	c.WaitCaughtUp(60*time.Second, victim, others...)
	w.waitAcked(c, 30*time.Second, 200, "4 brokers again")
	w.end(c, 60*time.Second)
	for _, i := range c.All() {
		w.checkDisk(c, i)
	}
}

// TestDiskFullDuringBlockSync: a broker that was stopped while the others
// went on restarts behind them, so CometBFT catches it up by block sync,
// not consensus; its partition logs' file system is full. Block sync
// panics on any error the application returns, so a local fault there
// used to end the process with Go's status 2 and a stack trace. It must
// stop as in consensus: status 1, "local storage fault" in its log, no
// panic; with room again it restarts and catches up.
// (Issue 16, "Fail-stop on local faults"; docs/running.md.)
func TestDiskFullDuringBlockSync(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root)")
	}
	c := newCluster(t, clusterOptions{})
	victim := c.Rng.IntN(len(c.Nodes))
	logs := filepath.Join(c.Nodes[victim].Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", logs).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs at %s: %v: %s", logs, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", logs).Run() })
	c.StartAll()
	others := without(c.All(), victim)

	filler, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs(others...)...), kgo.DefaultProduceTopic("disk-fill"),
		kgo.AllowAutoTopicCreation(), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produce := func(n int) {
		t.Helper()
		value := make([]byte, 64<<10) // incompressible
		for i := range n {
			for j := range value {
				value[j] = byte(c.Rng.Uint32())
			}
			if err := filler.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				t.Fatalf("filler record %d through the other brokers: %v", i, err)
			}
		}
	}
	produce(4) // the topic exists on every broker, the victim included
	c.WaitCaughtUp(60*time.Second, victim, others...)

	// Stopped cleanly, so nothing waits to be replayed from its own block
	// store: what it lacks on restart comes by block sync. Its disk is
	// then all but full.
	c.Stop(victim)
	var st syscall.Statfs_t
	if err := syscall.Statfs(logs, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	hog := filepath.Join(logs, "hog")
	if err := os.WriteFile(hog, make([]byte, max(free-256<<10, 0)), 0o644); err != nil {
		t.Fatalf("filling node%d's logs: %v", victim, err)
	}
	produce(40) // 2.5 MiB the victim has no room for

	c.Launch(victim)
	exitErr, _ := c.WatchUntilExit(victim, 2*time.Minute)
	var ee *exec.ExitError
	if !errors.As(exitErr, &ee) || ee.ExitCode() != 1 {
		t.Errorf("node%d block-syncing onto a full disk exited with %v; want status 1", victim, exitErr)
	}
	if len(c.StartLines(victim, "local storage fault")) == 0 || len(c.StartLines(victim, "no space left on device")) == 0 {
		t.Errorf("node%d's log does not say it stopped on a local storage fault (no space left on device)", victim)
	}
	if p := c.StartLines(victim, "panic:", "goroutine "); len(p) > 0 {
		t.Errorf("node%d stopped by panicking, not by failing: %q", victim, p[:min(len(p), 3)])
	}
	if len(c.StartLines(victim, "block sync stops")) == 0 {
		t.Errorf("node%d's log does not show the fault stopped block sync (the test meant to fail it there)", victim)
	}
	t.Logf("node%d exited on its full disk during block sync: %v", victim, exitErr)

	if err := os.Remove(hog); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	c.WaitCaughtUp(90*time.Second, victim, others...)
}
