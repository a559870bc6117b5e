package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"
)

// serveChildEnv carries the arguments of the `stele serve` that
// TestServeHelperProcess runs, one per line.
const serveChildEnv = "STELE_TEST_SERVE_CHILD"

// TestServeHelperProcess is not a test: it is the `stele serve` process
// TestServeOutOfFileDescriptors starts by running this test binary again.
func TestServeHelperProcess(t *testing.T) {
	args := os.Getenv(serveChildEnv)
	if args == "" {
		t.Skip("the broker process of TestServeOutOfFileDescriptors")
	}
	os.Exit(Main(strings.Split(args, "\n")...))
}

// TestServeOutOfFileDescriptors: a `stele serve` process whose file
// descriptor limit (RLIMIT_NOFILE, lowered with prlimit) is about to run
// out under a flood of connections keeps running: its Kafka listener stops
// accepting while one more connection would leave it fewer than its
// reserve (64 here), and logs that once, so that the rest of the broker
// still opens what it needs: a record produced meanwhile over a connection
// already open, to a topic created for it (new segment files), is
// committed through the blocks CometBFT goes on signing (each vote writes
// a new temporary file). Once the flood closes, new clients (franz-go) are
// served again without a restart, the wait is in /metrics, no accept
// failed, and the broker stops cleanly.
func TestServeOutOfFileDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker process")
	}
	addrs := [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
	kafkaAddr, httpAddr, p2pAddr := addrs[0], addrs[1], addrs[2]
	args := []string{"serve", "--data", t.TempDir(), "--kafka", kafkaAddr, "--http", httpAddr, "--p2p", p2pAddr, "--log-level", "info"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelperProcess$")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+strings.Join(args, "\n"))
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("stele serve output:\n%s", out.String())
		}
	}()
	alive := func() {
		t.Helper()
		select {
		case err := <-exited:
			t.Fatalf("stele serve exited: %v", err)
		default:
		}
	}
	ping := func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DialTimeout(2*time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	eventually(t, 60*time.Second, func() error { alive(); return ping() })

	early, err := net.Dial("tcp", kafkaAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if err := apiVersionsV0(early); err != nil {
		t.Fatalf("before the limit: %v", err)
	}
	// A producer whose connections are open before the limit is lowered.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(topic string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
	}
	if err := produce("before"); err != nil {
		t.Fatal(err)
	}

	// Leave the broker its reserve of 64 and 8 more.
	pid := cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: uint64(len(fds) + 64 + 8), Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("the broker holds %d file descriptors; its limit is now %d", len(fds), limit.Cur)

	// The kernel completes these connections, more than the broker has
	// descriptors left for; it accepts a few.
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 128 {
		c, err := net.DialTimeout("tcp", kafkaAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	eventually(t, 20*time.Second, func() error {
		alive()
		if !strings.Contains(out.String(), "few file descriptors are left") {
			return errors.New("the listener has not stopped accepting")
		}
		return nil
	})
	if err := produce("during"); err != nil {
		t.Fatalf("producing to a new topic while the listener waits: %v", err)
	}
	// Hold the flood for 5 s (not a wait for an event: the accept-blocked
	// metric below is checked to cover it), while CometBFT makes an empty
	// block every 2 s, each with votes that write files.
	time.Sleep(5 * time.Second)
	alive()
	if err := apiVersionsV0(early); err != nil {
		t.Fatalf("a connection served before the flood: %v", err)
	}

	for _, c := range flood {
		c.Close()
	}
	flood = nil
	eventually(t, 30*time.Second, func() error { alive(); return ping() })
	if s := metricValue(t, httpAddr, `stele_kafka_accept_blocked_seconds_total{reason="file_descriptors"}`); s < 4 {
		t.Errorf("the listener waited %v s for descriptors, want the 5 s of the flood", s)
	}
	if n := strings.Count(out.String(), "few file descriptors are left"); n != 1 {
		t.Errorf("the wait was logged %d times, want once", n)
	}
	if strings.Contains(out.String(), "cannot accept a connection") {
		t.Errorf("an accept failed: the reserve did not hold")
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("stele serve after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stele serve did not stop within 30 s of SIGTERM")
	}
}
