package cluster

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The port layout of `stele cluster init` (issue 3): node i listens for
// Kafka on base+i, HTTP on base+100+i, CometBFT P2P on base+200+i and
// CometBFT RPC (read by brokers joining by state sync) on base+300+i.
const (
	httpPortOffset = 100
	p2pPortOffset  = 200
	rpcPortOffset  = 300
	portSpan       = rpcPortOffset + 4 // base .. base+303 must be free
)

// clusterOptions configures newCluster.
type clusterOptions struct {
	// nodes is the number of brokers (default 4).
	nodes int
	// proxies puts a linkProxy on every directed peer link, so that the
	// test can split the network (cluster.partition).
	proxies bool
	// serveArgs are extra `stele serve` flags given to every node
	// (e.g. --snapshot-interval 5).
	serveArgs []string
}

// cluster is a set of `stele serve` processes made by `stele cluster init`.
// Its methods are called from the test's goroutine only; a method that
// cannot do its job fails the test.
type cluster struct {
	t     *testing.T
	dir   string
	seed  uint64
	rng   *rand.Rand
	nodes []*node
	// proxies[[2]int{i, j}] carries node i's connections to node j.
	proxies map[[2]int]*linkProxy
	httpc   *http.Client
	hist    *history
	// serveArgs: clusterOptions.serveArgs.
	serveArgs []string
}

// node is one broker of the cluster.
type node struct {
	idx     int
	nodeID  int32 // Kafka node id
	dir     string
	kafka   string
	http    string
	p2p     string
	p2pID   string // CometBFT node id
	logPath string
	starts  int
	proc    *process // nil while not running
	direct  *kgo.Client
	// bin is the binary this node runs (default steleBin); env is added
	// to its environment (e.g. STELE_BYZANTINE=...). Both are read at
	// each start, so a test may change them between runs.
	bin string
	env []string
	// args are extra `stele serve` flags for this node alone, after the
	// cluster's (e.g. the listeners of a twin, see addTwin).
	args []string
}

// process is one run of `stele serve`.
type process struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, set before done closes
	paused bool
}

// health is the body of GET /healthz.
type health struct {
	Status  string `json:"status"`
	NodeID  int32  `json:"node_id"`
	Height  int64  `json:"height"`
	AppHash string `json:"app_hash"`
}

// newCluster writes a cluster with `stele cluster init` into a temporary
// directory on free ports and registers its cleanup: every process started
// is killed when the test ends, and the brokers' logs are printed if it
// failed. No broker is started yet.
func newCluster(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("fault tests start real brokers; skipped with -short")
	}
	if opts.nodes == 0 {
		opts.nodes = 4
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STELE_FAULT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STELE_FAULT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("fault seed %d (rerun with STELE_FAULT_SEED=%d)", seed, seed)
	dir, err := os.MkdirTemp("", "stele-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		t: t, dir: dir, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		proxies:   map[[2]int]*linkProxy{},
		httpc:     &http.Client{Timeout: time.Second},
		hist:      newHistory(),
		serveArgs: opts.serveArgs,
	}
	t.Cleanup(c.cleanup)

	base := freeBasePort(t, c.rng)
	cdir := filepath.Join(dir, "cluster")
	out, err := exec.Command(steleBin, "cluster", "init", "--nodes", strconv.Itoa(opts.nodes),
		"--dir", cdir, "--base-port", strconv.Itoa(base)).CombinedOutput()
	if err != nil {
		t.Fatalf("stele cluster init: %v\n%s", err, out)
	}
	for i := range opts.nodes {
		n := &node{idx: i, dir: filepath.Join(cdir, fmt.Sprintf("node%d", i)),
			logPath: filepath.Join(dir, fmt.Sprintf("node%d.stderr", i))}
		nf := readNodeFile(t, n.dir)
		n.nodeID, n.kafka, n.http, n.p2p = nf.NodeID, nf.Kafka, nf.HTTP, nf.P2P
		want := []string{
			net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)),
			net.JoinHostPort("127.0.0.1", strconv.Itoa(base+httpPortOffset+i)),
			net.JoinHostPort("127.0.0.1", strconv.Itoa(base+p2pPortOffset+i)),
		}
		if got := []string{n.kafka, n.http, n.p2p}; !slices.Equal(got, want) {
			t.Fatalf("node%d/stele.json: listeners %v, want %v (the documented port layout)", i, got, want)
		}
		c.nodes = append(c.nodes, n)
	}
	// Each node's peers name the others' CometBFT node ids.
	ids := map[string]string{}
	for _, n := range c.nodes {
		for _, p := range readNodeFile(t, n.dir).Peers {
			id, addr, _ := strings.Cut(p, "@")
			ids[addr] = id
		}
	}
	for _, n := range c.nodes {
		if n.p2pID = ids[n.p2p]; n.p2pID == "" {
			t.Fatalf("no node's peers name node%d's P2P address %s", n.idx, n.p2p)
		}
	}
	if opts.proxies {
		c.installProxies()
	}
	return c
}

// nodeFile is the part of DATA/stele.json the harness reads.
type nodeFile struct {
	NodeID int32    `json:"node_id"`
	Kafka  string   `json:"kafka"`
	HTTP   string   `json:"http"`
	P2P    string   `json:"p2p"`
	Peers  []string `json:"peers"`
}

func readNodeFile(t *testing.T, dir string) nodeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "stele.json"))
	if err != nil {
		t.Fatal(err)
	}
	var nf nodeFile
	if err := json.Unmarshal(data, &nf); err != nil {
		t.Fatalf("%s/stele.json: %v", dir, err)
	}
	return nf
}

// installProxies starts a linkProxy for every directed pair and rewrites
// each node's peers (stele.json's "peers") to dial the others through them.
// Every other key of the node file is kept as `cluster init` wrote it.
func (c *cluster) installProxies() {
	t := c.t
	for _, from := range c.nodes {
		var peers []string
		for _, to := range c.nodes {
			if from == to {
				continue
			}
			p, err := newLinkProxy(to.p2p)
			if err != nil {
				t.Fatal(err)
			}
			c.proxies[[2]int{from.idx, to.idx}] = p
			peers = append(peers, to.p2pID+"@"+p.Addr())
		}
		path := filepath.Join(from.dir, "stele.json")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if raw["peers"], err = json.Marshal(peers); err != nil {
			t.Fatal(err)
		}
		if data, err = json.MarshalIndent(raw, "", "  "); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// freeBasePort picks a base port P such that every port of P..P+303 can be
// bound on 127.0.0.1 now.
func freeBasePort(t *testing.T, rng *rand.Rand) int {
	t.Helper()
	for range 50 {
		base := 20000 + rng.IntN(40000)
		ok := true
		for off := range portSpan {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off)))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free range of ports on 127.0.0.1 after 50 tries")
	return 0
}

// cleanup kills every broker still running, closes the proxies and the
// direct clients, prints the brokers' logs when the test failed and removes
// the cluster directory (kept with STELE_FAULT_KEEP=1 on failure).
func (c *cluster) cleanup() {
	if c.t.Failed() {
		for _, n := range c.nodes {
			state := "not running"
			if p := n.proc; p != nil && p.paused {
				state = "frozen (SIGSTOP)"
			} else if p != nil {
				h, err := c.health(n.idx)
				state = fmt.Sprintf("/healthz %+v %v", h, err)
			}
			c.t.Logf("at the end node%d is %s", n.idx, state)
		}
	}
	for _, n := range c.nodes {
		if n.direct != nil {
			n.direct.Close()
		}
		if p := n.proc; p != nil {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.done
			n.proc = nil
		}
	}
	for _, p := range c.proxies {
		p.Close()
	}
	if c.t.Failed() {
		for _, n := range c.nodes {
			data, _ := os.ReadFile(n.logPath)
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > 80 {
				lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-80)}, lines[len(lines)-80:]...)
			}
			c.t.Logf("----- node%d (%s) stderr -----\n%s\n----- end of node%d -----",
				n.idx, n.dir, strings.Join(lines, "\n"), n.idx)
		}
		if os.Getenv("STELE_FAULT_KEEP") == "1" {
			c.t.Logf("kept %s", c.dir)
			return
		}
	}
	os.RemoveAll(c.dir)
}

// all returns the indexes of every node.
func (c *cluster) all() []int {
	idx := make([]int, len(c.nodes))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// kafkaAddrs returns the Kafka addresses of the nodes given.
func (c *cluster) kafkaAddrs(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.nodes[i].kafka)
	}
	return out
}

// start starts node i (`stele serve --data DIR/nodeI`), its stderr appended
// to a per-node file, and waits until /healthz answers.
func (c *cluster) start(i int) {
	c.t.Helper()
	c.launch(i)
	c.eventually(30*time.Second, fmt.Sprintf("node%d answers /healthz", i), func() error {
		if err := c.exited(i); err != nil {
			return giveUp(err)
		}
		_, err := c.health(i)
		return err
	})
}

// launch starts node i's process (its binary, environment and the
// cluster's extra serve flags) without waiting for it to answer.
func (c *cluster) launch(i int) {
	t := c.t
	t.Helper()
	n := c.nodes[i]
	if n.proc != nil {
		t.Fatalf("node%d is already running", i)
	}
	n.starts++
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	bin := steleBin
	if n.bin != "" {
		bin = n.bin
	}
	args := append(append([]string{"serve", "--data", n.dir}, c.serveArgs...), n.args...)
	fmt.Fprintf(f, "=== harness: start #%d of node%d at %s: %s %s %s\n", n.starts, i,
		time.Now().Format(time.RFC3339Nano), strings.Join(n.env, " "), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a terminal's Ctrl-C goes to the test only;
	// and killed with the test binary if that dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close()
	if err != nil {
		t.Fatalf("starting node%d: %v", i, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	n.proc = p
}

// startAll starts every node: all processes first, then the health waits,
// since a node waits for its peers before making blocks.
func (c *cluster) startAll() {
	for _, i := range c.all() {
		c.start(i)
	}
}

// exited returns an error if node i was started and has exited since.
func (c *cluster) exited(i int) error {
	p := c.nodes[i].proc
	if p == nil {
		return fmt.Errorf("node%d is not running", i)
	}
	select {
	case <-p.done:
		return fmt.Errorf("node%d exited unexpectedly: %v", i, p.err)
	default:
		return nil
	}
}

// signal sends sig to node i's process.
func (c *cluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	p := c.nodes[i].proc
	if p == nil {
		c.t.Fatalf("node%d is not running", i)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signalling node%d with %v: %v", i, sig, err)
	}
}

// waitExit waits up to d for node i's process to exit and forgets it.
func (c *cluster) waitExit(i int, d time.Duration, why string) error {
	p := c.nodes[i].proc
	select {
	case <-p.done:
		c.nodes[i].proc = nil
		return p.err
	case <-time.After(d):
		c.t.Fatalf("node%d did not exit within %v of %s (a hang)", i, d, why)
		return nil
	}
}

// kill9 crashes node i (SIGKILL) and waits for it to be gone.
func (c *cluster) kill9(i int) {
	c.t.Helper()
	c.signal(i, syscall.SIGKILL)
	c.waitExit(i, 10*time.Second, "SIGKILL")
	c.t.Logf("%s node%d killed with SIGKILL", clock(), i)
}

// stop shuts node i down with SIGTERM and requires a clean exit (status 0)
// within 30 s.
func (c *cluster) stop(i int) {
	c.t.Helper()
	if c.nodes[i].proc == nil {
		c.t.Fatalf("node%d is not running", i)
	}
	if c.nodes[i].proc.paused {
		c.resume(i)
	}
	c.signal(i, syscall.SIGTERM)
	if err := c.waitExit(i, 30*time.Second, "SIGTERM"); err != nil {
		c.t.Errorf("node%d did not exit cleanly after SIGTERM: %v", i, err)
	}
}

// stopAll stops every running node with SIGTERM, all at once, and requires
// each to exit cleanly.
func (c *cluster) stopAll() {
	c.t.Helper()
	var running []int
	for _, n := range c.nodes {
		if n.proc != nil {
			if n.proc.paused {
				c.resume(n.idx)
			}
			c.signal(n.idx, syscall.SIGTERM)
			running = append(running, n.idx)
		}
	}
	for _, i := range running {
		if err := c.waitExit(i, 30*time.Second, "SIGTERM"); err != nil {
			c.t.Errorf("node%d did not exit cleanly after SIGTERM: %v", i, err)
		}
	}
}

// pause freezes node i (SIGSTOP): its connections stay open, it answers
// nothing.
func (c *cluster) pause(i int) {
	c.t.Helper()
	c.signal(i, syscall.SIGSTOP)
	c.nodes[i].proc.paused = true
	c.t.Logf("%s node%d frozen with SIGSTOP", clock(), i)
}

// resume thaws node i (SIGCONT).
func (c *cluster) resume(i int) {
	c.t.Helper()
	c.signal(i, syscall.SIGCONT)
	c.nodes[i].proc.paused = false
	c.t.Logf("%s node%d thawed with SIGCONT", clock(), i)
}

// restart starts node i again on the same data directory.
func (c *cluster) restart(i int) {
	c.t.Helper()
	c.start(i)
	c.t.Logf("%s node%d restarted", clock(), i)
}
