package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/server"
)

// Defaults of `stele cluster up`.
const (
	defaultReadyTimeout = 60 * time.Second
	defaultStopTimeout  = 30 * time.Second
	healthPollInterval  = 250 * time.Millisecond
	// maxLogLine bounds a child's output line held while waiting for its
	// newline; a longer line is passed on in pieces.
	maxLogLine = 64 << 10
)

// clusterUpOptions are the flags of `stele cluster up`.
type clusterUpOptions struct {
	dir          string
	bin          string
	readyTimeout time.Duration
	stopTimeout  time.Duration
	// serveArgs are the arguments after "--", passed to every serve.
	serveArgs []string
}

// upNode is one broker `cluster up` runs.
type upNode struct {
	name   string // "node3"
	dir    string
	health string // the /healthz URL
	// tls is how health is reached under http_tls (nil: plain http).
	tls   *tls.Config
	kafka string // the bootstrap address
	cmd   *exec.Cmd
	// stdout and stderr prefix the child's lines; flushed once it exits.
	stdout, stderr *linePrefixer
	exited         bool
}

// upEvent is what a node's watchers report to the supervisor.
type upEvent struct {
	node    int
	exited  bool  // the process ended; err is Wait's result
	err     error // for exited
	healthy bool  // /healthz answered; height is its height
	height  int64
}

func newClusterUpCmd() *cobra.Command {
	o := clusterUpOptions{readyTimeout: defaultReadyTimeout, stopTimeout: defaultStopTimeout}
	cmd := &cobra.Command{
		Use:   "up --dir DIR [--bin PATH] [-- SERVE-FLAGS...]",
		Short: "Run every broker of a cluster directory on this machine until Ctrl-C",
		Long: `Run 'stele serve --data DIR/nodeI' for every node directory 'stele cluster
init' wrote under DIR, as child processes of this one, each line of their
output prefixed with [nodeI]. Once every broker answers GET /healthz the
bootstrap brokers line is printed.

Ctrl-C (SIGINT) or SIGTERM stops them all: each gets SIGTERM and a clean
shutdown; one still running after --stop-timeout gets SIGKILL. A broker that
exits on its own (a crash, or a kill -9 while trying out faults) is reported
and the others keep running; restart it with 'stele serve --data DIR/nodeI'.
The exit code is 0 when every broker ended cleanly, 1 otherwise.

Arguments after -- are passed to every 'stele serve' (for example
-- --log-level debug). This is for trying a cluster out on one machine;
in production run each broker under a service manager (docs/cluster.md).`,
		Example: `  stele cluster init --nodes 4 --dir ./cluster
  stele cluster up --dir ./cluster
  stele cluster up --dir ./cluster -- --log-level warn --timeout-commit 10ms`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash < 0 && len(args) > 0 || dash > 0 {
				return usageErrorf("unexpected argument %q: flags for 'stele serve' go after --", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.serveArgs = args
			return runClusterUp(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "the directory 'stele cluster init' wrote (required)")
	f.StringVar(&o.bin, "bin", "", "the stele binary to run the brokers with (default: this one)")
	f.DurationVar(&o.readyTimeout, "ready-timeout", o.readyTimeout, "how long to wait for every broker's /healthz before saying which are missing")
	f.DurationVar(&o.stopTimeout, "stop-timeout", o.stopTimeout, "how long a broker may take to stop after SIGTERM before it gets SIGKILL")
	return cmd
}

func runClusterUp(cmd *cobra.Command, o clusterUpOptions) error {
	switch {
	case o.dir == "":
		return usageErrorf("--dir is required: the directory 'stele cluster init' wrote")
	case o.readyTimeout <= 0 || o.stopTimeout <= 0:
		return usageErrorf("--ready-timeout and --stop-timeout must be positive")
	}
	nodes, err := findClusterNodes(o.dir)
	if err != nil {
		return err
	}
	bin := o.bin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("cannot find this program's binary (give --bin): %w", err)
		}
	}
	out := &syncWriter{mu: new(sync.Mutex), w: cmd.OutOrStdout()}
	errOut := &syncWriter{mu: out.mu, w: cmd.ErrOrStderr()}
	sup := &supervisor{nodes: nodes, out: out, events: make(chan upEvent, 2*len(nodes)), stopHealth: make(chan struct{})}
	for i, n := range nodes {
		args := append([]string{"serve", "--data", n.dir}, o.serveArgs...)
		c := exec.Command(bin, args...)
		n.stdout = &linePrefixer{w: out, prefix: "[" + n.name + "] "}
		n.stderr = &linePrefixer{w: errOut, prefix: "[" + n.name + "] "}
		c.Stdout, c.Stderr = n.stdout, n.stderr
		c.SysProcAttr = childProcAttr()
		c.WaitDelay = 5 * time.Second // a grandchild holding the pipes
		if err := c.Start(); err != nil {
			sup.stop(o.stopTimeout)
			return fmt.Errorf("cannot start %s: %w", n.name, err)
		}
		n.cmd = c
		out.printf("[cluster] started %s (pid %d): %s %s\n", n.name, c.Process.Pid, bin, strings.Join(args, " "))
		sup.running++
		go sup.wait(i)
		go sup.pollHealth(cmd.Context(), i)
	}
	return sup.run(cmd.Context(), o)
}

// findClusterNodes lists DIR/node0, DIR/node1, ... in order with their
// node files. Empty node directories are skipped; one without stele.json
// is an error, since serve would run it on the default ports.
func findClusterNodes(dir string) ([]*upNode, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read the cluster directory (write it with 'stele cluster init --dir %s'): %w", dir, err)
	}
	type found struct {
		num  int
		node *upNode
	}
	var all []found
	for _, e := range ents {
		m := nodeDirPattern.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if sub, err := os.ReadDir(path); err == nil && len(sub) == 0 {
			continue
		}
		nf, ok, err := server.ReadNodeFile(path)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s has no %s: it was not written by 'stele cluster init'", path, server.NodeFileName)
		}
		num, err := strconv.Atoi(m[1])
		if err != nil {
			continue // more digits than an int holds: not ours
		}
		kafka := nf.AdvertiseKafka
		if kafka == "" {
			kafka = localAddr(nf.Kafka)
		}
		n := &upNode{name: e.Name(), dir: path, health: "http://" + localAddr(nf.HTTP) + "/healthz", kafka: kafka}
		if nf.HTTPTLS {
			// The node's own CA and certificate: it trusts the one and
			// presents the other if its HTTP port asks.
			var cfg server.Config
			cfg.DataDir = path
			cfg.ApplyNodeFile(nf)
			lt, err := listener.NewTLS(cfg.TLS, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: http_tls: %w", path, err)
			}
			n.health, n.tls = "https://"+localAddr(nf.HTTP)+"/healthz", lt.ClientConfig()
		}
		all = append(all, found{num, n})
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no node directories in %s: write them with 'stele cluster init --dir %s'", dir, dir)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].num < all[j].num })
	nodes := make([]*upNode, len(all))
	for i, f := range all {
		nodes[i] = f.node
	}
	return nodes, nil
}

// localAddr turns a listener address into one this machine can dial: a
// wildcard or empty host becomes the loopback address.
func localAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// supervisor owns the child processes of `cluster up`: it starts their
// watchers, reports their readiness and exits, and stops them.
type supervisor struct {
	nodes   []*upNode
	out     *syncWriter
	running int
	// events receives at most one exit and one health event per node, so
	// its capacity keeps every watcher from blocking.
	events     chan upEvent
	stopHealth chan struct{}
	// failures are the brokers that did not end cleanly.
	failures []string
}

// wait reports node i's exit once its output is copied.
func (s *supervisor) wait(i int) {
	n := s.nodes[i]
	err := n.cmd.Wait()
	n.stdout.flush()
	n.stderr.flush()
	s.events <- upEvent{node: i, exited: true, err: err}
}

// pollHealth reports node i healthy once its /healthz answers 200.
func (s *supervisor) pollHealth(ctx context.Context, i int) {
	client := &http.Client{Timeout: 2 * time.Second}
	if c := s.nodes[i].tls; c != nil {
		client.Transport = &http.Transport{TLSClientConfig: c}
	}
	tick := time.NewTicker(healthPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stopHealth:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h, err := getHealth(ctx, client, s.nodes[i].health)
		if err == nil {
			s.events <- upEvent{node: i, healthy: true, height: h}
			return
		}
	}
}

// getHealth fetches a /healthz URL and returns the height it reports.
func getHealth(ctx context.Context, client *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var h struct {
		Height int64 `json:"height"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h); err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	return h.Height, nil
}

// run reports readiness and exits until ctx ends or every broker has
// exited, then stops the brokers still running.
func (s *supervisor) run(ctx context.Context, o clusterUpOptions) error {
	healthy := make(map[int]int64)
	announced := false
	ready := time.NewTimer(o.readyTimeout)
	defer ready.Stop()
	for s.running > 0 {
		select {
		case <-ctx.Done():
			return s.stop(o.stopTimeout)
		case <-ready.C:
			if !announced {
				var missing []string
				for i, n := range s.nodes {
					if _, ok := healthy[i]; !ok && !n.exited {
						missing = append(missing, n.name+" ("+n.health+")")
					}
				}
				s.out.printf("[cluster] after %v still no answer from %s; waiting on\n", o.readyTimeout, strings.Join(missing, ", "))
			}
		case ev := <-s.events:
			n := s.nodes[ev.node]
			if ev.exited {
				n.exited = true
				s.running--
				status := "exited cleanly"
				if ev.err != nil {
					status = "exited: " + ev.err.Error()
					s.failures = append(s.failures, n.name+" "+status)
				}
				s.out.printf("[cluster] %s %s; the other brokers keep running (restart it with: stele serve --data %s)\n",
					n.name, status, n.dir)
			} else {
				healthy[ev.node] = ev.height
			}
			if !announced && s.allAccountedFor(healthy) {
				announced = true
				s.announce(healthy)
			}
		}
	}
	close(s.stopHealth)
	if len(s.failures) == 0 {
		return errors.New("every broker has exited")
	}
	return errors.New("every broker has exited: " + strings.Join(s.failures, "; "))
}

// allAccountedFor reports whether every broker is healthy or has exited,
// with at least one healthy.
func (s *supervisor) allAccountedFor(healthy map[int]int64) bool {
	for i, n := range s.nodes {
		if _, ok := healthy[i]; !ok && !n.exited {
			return false
		}
	}
	return len(healthy) > 0
}

// announce prints that the brokers are up and the bootstrap brokers line.
func (s *supervisor) announce(healthy map[int]int64) {
	var up, down, brokers []string
	for i, n := range s.nodes {
		if h, ok := healthy[i]; ok && !n.exited {
			up = append(up, fmt.Sprintf("%s at height %d", n.name, h))
			brokers = append(brokers, n.kafka)
		} else {
			down = append(down, n.name)
		}
	}
	if len(down) == 0 {
		s.out.printf("[cluster] all %s are up: %s\n", plural(int64(len(up)), "broker"), strings.Join(up, ", "))
	} else {
		s.out.printf("[cluster] %d of %d brokers are up (%s exited): %s\n", len(up), len(s.nodes), strings.Join(down, ", "), strings.Join(up, ", "))
	}
	s.out.printf("[cluster] bootstrap brokers: %s\n", strings.Join(brokers, ","))
	s.out.printf("[cluster] try: stele topic create orders --brokers %s\n", strings.Join(brokers, ","))
	s.out.printf("[cluster] Ctrl-C stops them all\n")
}

// stop sends SIGTERM to every running broker, SIGKILL to those still
// running after timeout, and waits for all of them. It returns an error
// naming every broker that did not end cleanly.
func (s *supervisor) stop(timeout time.Duration) error {
	select {
	case <-s.stopHealth:
	default:
		close(s.stopHealth)
	}
	if s.running > 0 {
		s.out.printf("[cluster] stopping %s (SIGTERM)\n", plural(int64(s.running), "broker"))
	}
	for _, n := range s.nodes {
		if n.cmd != nil && !n.exited {
			if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				_ = n.cmd.Process.Kill() // no SIGTERM on this platform
			}
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for s.running > 0 {
		select {
		case <-deadline.C:
			for _, n := range s.nodes {
				if n.cmd != nil && !n.exited {
					s.out.printf("[cluster] %s did not stop within %v: sending SIGKILL\n", n.name, timeout)
					s.failures = append(s.failures, n.name+" was killed after "+timeout.String())
					_ = n.cmd.Process.Kill()
				}
			}
		case ev := <-s.events:
			n := s.nodes[ev.node]
			if !ev.exited {
				continue
			}
			n.exited = true
			s.running--
			if ev.err != nil {
				s.failures = append(s.failures, n.name+" exited: "+ev.err.Error())
			}
		}
	}
	if len(s.failures) > 0 {
		return errors.New("not every broker ended cleanly: " + strings.Join(s.failures, "; "))
	}
	s.out.printf("[cluster] every broker stopped cleanly\n")
	return nil
}

// syncWriter serialises writes from the children's output and the
// supervisor's messages, so lines never interleave. The writers for stdout
// and stderr share one mutex: both are often the same terminal.
type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *syncWriter) write(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.w.Write(p)
}

func (w *syncWriter) printf(format string, args ...any) {
	w.write(fmt.Appendf(nil, format, args...))
}

// linePrefixer is an io.Writer that writes every line it is given to w
// with prefix before it. A line is held until its newline arrives; one
// longer than maxLogLine is passed on in pieces of that size. flush writes
// what is left.
type linePrefixer struct {
	w      *syncWriter
	prefix string
	// buf holds a partial line; exec's copying goroutine is the only
	// writer, flush runs after it is done.
	buf []byte
}

// Write implements io.Writer.
func (l *linePrefixer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			for len(l.buf) >= maxLogLine {
				l.w.write(append(append([]byte(l.prefix), l.buf[:maxLogLine]...), '\n'))
				l.buf = append(l.buf[:0], l.buf[maxLogLine:]...)
			}
			break
		}
		line := make([]byte, 0, len(l.prefix)+len(l.buf)+i+1)
		line = append(append(append(line, l.prefix...), l.buf...), p[:i+1]...)
		l.w.write(line)
		l.buf, p = l.buf[:0], p[i+1:]
	}
	return n, nil
}

// flush writes a held partial line, ending it with a newline.
func (l *linePrefixer) flush() {
	if len(l.buf) == 0 {
		return
	}
	line := append(append([]byte(l.prefix), l.buf...), '\n')
	l.w.write(line)
	l.buf = l.buf[:0]
}
