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

	"github.com/stele-io/stele/internal/freeport"
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
// descriptors run out (its RLIMIT_NOFILE lowered to what it has open plus a
// few) while clients keep connecting goes on running: the connections it
// already serves are still answered, its failed accepts are counted in
// stele_kafka_accept_errors_total{reason="emfile"} and logged once rather
// than once per attempt, and once the clients close, new ones (franz-go)
// are served again without a restart, and it stops cleanly.
func TestServeOutOfFileDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker process")
	}
	var addrs [3]string
	for i := range addrs {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
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

	// Leave the broker a few descriptors beyond those it holds now.
	pid := cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: uint64(len(fds) + 6), Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("the broker holds %d file descriptors; its limit is now %d", len(fds), limit.Cur)

	// The kernel completes these connections; the broker can accept only
	// a few of them.
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 64 {
		c, err := net.DialTimeout("tcp", kafkaAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	eventually(t, 20*time.Second, func() error {
		alive()
		if !strings.Contains(out.String(), "reason=emfile") {
			return errors.New("no failed accept logged yet")
		}
		return nil
	})
	time.Sleep(time.Second) // some more failed accepts, which must not be logged
	alive()
	if err := apiVersionsV0(early); err != nil {
		t.Fatalf("a connection served before the descriptors ran out: %v", err)
	}

	for _, c := range flood {
		c.Close()
	}
	flood = nil
	eventually(t, 30*time.Second, func() error { alive(); return ping() })
	failed := metricValue(t, httpAddr, `stele_kafka_accept_errors_total{reason="emfile"}`)
	logged := strings.Count(out.String(), "cannot accept a connection")
	t.Logf("%v failed accepts, %d log lines", failed, logged)
	if failed < 3 || logged != 1 {
		t.Errorf("%v failed accepts counted and %d logged, want several counted and 1 logged", failed, logged)
	}
	if !strings.Contains(out.String(), "accepts connections again") {
		t.Errorf("the end of the failures is not logged")
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
