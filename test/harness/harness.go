package harness

import (
	"crypto/tls"
	"crypto/x509"
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

	"github.com/stele-io/stele/internal/freeport"
)

// The port layout of `stele cluster init` (issue 3): node i listens for
// Kafka on base+i, HTTP on base+100+i, CometBFT P2P on base+200+i and
// CometBFT RPC (read by brokers joining by state sync) on base+300+i.
const (
	httpPortOffset = 100
	p2pPortOffset  = 200
	rpcPortOffset  = 300
	// portSpan: base .. base+307 must be free, for the brokers of a
	// cluster with node ids up to MaxNodeID, counting those AddNode adds.
	portSpan = rpcPortOffset + MaxNodeID + 1
	// MaxNodeID is the highest node id a cluster's ports are reserved for.
	MaxNodeID = 7
)

// Options configures New.
type Options struct {
	// Nodes is the number of brokers (default 4).
	Nodes int
	// Proxies puts a linkProxy on every directed peer link, so that the
	// test can split the network (cluster.partition).
	Proxies bool
	// ServeArgs are extra `stele serve` flags given to every node
	// (e.g. --snapshot-interval 5).
	ServeArgs []string
	// SyncJournal runs every node from the stelebyzantine build keeping a
	// sync journal (internal/durable), so that LoseUnsynced can drop what
	// a killed node had not fsynced. Lies a test gives a node in
	// STELE_BYZANTINE are kept.
	SyncJournal bool
	// SlowFsync, with SyncJournal, makes every fsync of those files wait
	// this long first, as on a slow disk, so that a SIGKILL finds more
	// writes unsynced.
	SlowFsync time.Duration
	// InitArgs are extra `stele cluster init` flags (e.g. --tls).
	InitArgs []string
}

// Cluster is a set of `stele serve` processes made by `stele cluster init`.
// Its methods are called from the test's goroutine only; a method that
// cannot do its job fails the test.
type Cluster struct {
	T *testing.T
	// Dir holds the cluster (Dir/cluster/nodeI) and the brokers' stderr.
	Dir string
	// Seed seeds Rng, which tests use to choose which brokers fail.
	Seed  uint64
	Rng   *rand.Rand
	Nodes []*Node
	// Proxies[[2]int{i, j}] carries node i's connections to node j.
	Proxies map[[2]int]*linkProxy
	// HTTPC is the client for the brokers' HTTP endpoints (1 s timeout).
	HTTPC *http.Client
	// ClientOpts are added to the Kafka clients the harness makes
	// (DirectClient): TLS and SASL for a cluster that needs them.
	ClientOpts []kgo.Opt
	hist       *history
	// ServeArgs: Options.ServeArgs.
	ServeArgs   []string
	syncJournal bool
	slowFsync   time.Duration
}

// Node is one broker of the cluster.
type Node struct {
	Idx    int
	NodeID int32 // Kafka node id
	Dir    string
	Kafka  string
	HTTP   string
	// HTTPURL is HTTP's base URL: https:// when the node serves its HTTP
	// API over TLS (cluster init --http-tls), else http://. A node a test
	// makes itself sets it too.
	HTTPURL string
	P2P     string
	P2PID   string // CometBFT node id
	LogPath string
	Starts  int
	Proc    *Process // nil while not running
	direct  *kgo.Client
	// Bin is the binary this node runs (default SteleBin); Env is added
	// to its environment (e.g. STELE_BYZANTINE=...). Both are read at
	// each start, so a test may change them between runs.
	Bin string
	Env []string
	// Args are extra `stele serve` flags for this node alone, after the
	// cluster's (e.g. the listeners of a twin, see addTwin).
	Args []string
}

// Process is one run of `stele serve`.
type Process struct {
	Cmd    *exec.Cmd
	Done   chan struct{} // closed when the process has exited
	Err    error         // cmd.Wait's result, set before done closes
	Paused bool
}

// Health is the body of GET /healthz.
type Health struct {
	Status  string `json:"status"`
	NodeID  int32  `json:"node_id"`
	Height  int64  `json:"height"`
	AppHash string `json:"app_hash"`
}

// New writes a cluster with `stele cluster init` into a temporary
// directory on free ports and registers its cleanup: every process started
// is killed when the test ends, and the brokers' logs are printed if it
// failed. No broker is started yet.
func New(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("fault tests start real brokers; skipped with -short")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 4
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
	dir, err := os.MkdirTemp("", "stele-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{
		T: t, Dir: dir, Seed: seed, Rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		Proxies:     map[[2]int]*linkProxy{},
		HTTPC:       &http.Client{Timeout: time.Second},
		hist:        newHistory(),
		ServeArgs:   opts.ServeArgs,
		syncJournal: opts.SyncJournal,
		slowFsync:   opts.SlowFsync,
	}
	t.Cleanup(c.cleanup)

	base := freeBasePort(t, c.Rng)
	cdir := filepath.Join(dir, "cluster")
	out, err := exec.Command(SteleBin, append([]string{"cluster", "init", "--nodes", strconv.Itoa(opts.Nodes),
		"--dir", cdir, "--base-port", strconv.Itoa(base)}, opts.InitArgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("stele cluster init: %v\n%s", err, out)
	}
	for i := range opts.Nodes {
		n := &Node{Idx: i, Dir: filepath.Join(cdir, fmt.Sprintf("node%d", i)),
			LogPath: filepath.Join(dir, fmt.Sprintf("node%d.stderr", i))}
		nf := readNodeFile(t, n.Dir)
		n.NodeID, n.Kafka, n.HTTP, n.P2P = nf.NodeID, nf.Kafka, nf.HTTP, nf.P2P
		n.HTTPURL = "http://" + n.HTTP
		if nf.HTTPTLS {
			n.HTTPURL = "https://" + n.HTTP
			c.HTTPC = clusterHTTPSClient(t, cdir)
		}
		want := []string{
			net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)),
			net.JoinHostPort("127.0.0.1", strconv.Itoa(base+httpPortOffset+i)),
			net.JoinHostPort("127.0.0.1", strconv.Itoa(base+p2pPortOffset+i)),
		}
		if got := []string{n.Kafka, n.HTTP, n.P2P}; !slices.Equal(got, want) {
			t.Fatalf("node%d/stele.json: listeners %v, want %v (the documented port layout)", i, got, want)
		}
		c.Nodes = append(c.Nodes, n)
	}
	// Each node's peers name the others' CometBFT node ids.
	ids := map[string]string{}
	for _, n := range c.Nodes {
		for _, p := range readNodeFile(t, n.Dir).Peers {
			id, addr, _ := strings.Cut(p, "@")
			ids[addr] = id
		}
	}
	for _, n := range c.Nodes {
		if n.P2PID = ids[n.P2P]; n.P2PID == "" {
			t.Fatalf("no node's peers name node%d's P2P address %s", n.Idx, n.P2P)
		}
	}
	if opts.Proxies {
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
	// HTTPTLS: the node serves its HTTP API over TLS.
	HTTPTLS bool `json:"http_tls"`
}

// clusterHTTPSClient is the client of HTTP APIs served over TLS by a
// cluster made with --tls --http-tls: it trusts the cluster's CA and
// presents the client certificate init wrote.
func clusterHTTPSClient(t *testing.T, cdir string) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(cdir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(filepath.Join(cdir, "client", "client.crt"), filepath.Join(cdir, "client", "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
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

// AddNode runs `stele cluster add --dir DIR` with args (against node
// via's HTTP API), which writes the next broker's directory and adds it to
// the chain's directory as a replica, and returns the new node (not
// started) with the command's output.
func (c *Cluster) AddNode(via int, args ...string) (*Node, string) {
	t := c.T
	t.Helper()
	cdir := filepath.Join(c.Dir, "cluster")
	out, err := exec.Command(SteleBin, append([]string{"cluster", "add", "--dir", cdir, "--http", c.Nodes[via].HTTPURL}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("stele cluster add: %v\n%s", err, out)
	}
	// The directory `cluster add` wrote: the next node id after every
	// node directory under the cluster's, those of brokers added and
	// removed since included.
	i := c.NextNodeID() - 1
	dir := filepath.Join(cdir, fmt.Sprintf("node%d", i))
	nf := readNodeFile(t, dir)
	n := &Node{Idx: len(c.Nodes), NodeID: nf.NodeID, Dir: dir, Kafka: nf.Kafka, HTTP: nf.HTTP, P2P: nf.P2P,
		LogPath: filepath.Join(c.Dir, fmt.Sprintf("node%d.stderr", i))}
	n.HTTPURL = "http://" + n.HTTP
	if nf.HTTPTLS {
		n.HTTPURL = "https://" + n.HTTP
	}
	if n.NodeID != int32(i) {
		t.Fatalf("stele cluster add wrote node id %d into %s", n.NodeID, dir)
	}
	c.Nodes = append(c.Nodes, n)
	return n, string(out)
}

// NextNodeID is the node id `stele cluster add` gives the next broker: one
// more than the highest of the node directories under the cluster's.
// Node ids up to MaxNodeID have ports reserved.
func (c *Cluster) NextNodeID() int {
	c.T.Helper()
	ents, err := os.ReadDir(filepath.Join(c.Dir, "cluster"))
	if err != nil {
		c.T.Fatal(err)
	}
	next := 0
	for _, e := range ents {
		var id int
		if _, err := fmt.Sscanf(e.Name(), "node%d", &id); err == nil && e.IsDir() && id >= next {
			next = id + 1
		}
	}
	return next
}

// installProxies starts a linkProxy for every directed pair and rewrites
// each node's peers (stele.json's "peers") to dial the others through them.
// Every other key of the node file is kept as `cluster init` wrote it.
func (c *Cluster) installProxies() {
	t := c.T
	for _, from := range c.Nodes {
		var peers []string
		for _, to := range c.Nodes {
			if from == to {
				continue
			}
			p, err := NewLinkProxy(to.P2P)
			if err != nil {
				t.Fatal(err)
			}
			c.Proxies[[2]int{from.Idx, to.Idx}] = p
			peers = append(peers, to.P2PID+"@"+p.Addr())
		}
		path := filepath.Join(from.Dir, "stele.json")
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
// bound on 127.0.0.1 now and lies below the kernel's ephemeral range (see
// package freeport: a broker restarted on its ports must find them free).
func freeBasePort(t *testing.T, rng *rand.Rand) int {
	t.Helper()
	base, err := freeport.Span(rng, portSpan)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// cleanup kills every broker still running, closes the proxies and the
// direct clients, prints the brokers' logs when the test failed and removes
// the cluster directory (kept with STELE_FAULT_KEEP=1 on failure).
func (c *Cluster) cleanup() {
	if c.T.Failed() {
		for _, n := range c.Nodes {
			state := "not running"
			if p := n.Proc; p != nil && p.Paused {
				state = "frozen (SIGSTOP)"
			} else if p != nil {
				h, err := c.Health(n.Idx)
				state = fmt.Sprintf("/healthz %+v %v", h, err)
			}
			c.T.Logf("at the end node%d is %s", n.Idx, state)
		}
	}
	for _, n := range c.Nodes {
		if n.direct != nil {
			n.direct.Close()
		}
		if p := n.Proc; p != nil {
			p.Cmd.Process.Signal(syscall.SIGCONT)
			p.Cmd.Process.Kill()
			<-p.Done
			n.Proc = nil
		}
	}
	for _, p := range c.Proxies {
		p.Close()
	}
	if c.T.Failed() {
		for _, n := range c.Nodes {
			data, _ := os.ReadFile(n.LogPath)
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > 80 {
				lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-80)}, lines[len(lines)-80:]...)
			}
			c.T.Logf("----- node%d (%s) stderr -----\n%s\n----- end of node%d -----",
				n.Idx, n.Dir, strings.Join(lines, "\n"), n.Idx)
		}
		if os.Getenv("STELE_FAULT_KEEP") == "1" {
			c.T.Logf("kept %s", c.Dir)
			return
		}
	}
	os.RemoveAll(c.Dir)
}

// All returns the indexes of every node.
func (c *Cluster) All() []int {
	idx := make([]int, len(c.Nodes))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// KafkaAddrs returns the Kafka addresses of the nodes given.
func (c *Cluster) KafkaAddrs(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.Nodes[i].Kafka)
	}
	return out
}

// Start starts node i (`stele serve --data DIR/nodeI`), its stderr appended
// to a per-node file, and waits until /healthz answers.
func (c *Cluster) Start(i int) {
	c.T.Helper()
	c.Launch(i)
	c.waitHealthy(i)
}

// waitHealthy waits up to 30 s for node i to answer /healthz, failing the
// test if it exits first.
func (c *Cluster) waitHealthy(i int) {
	c.T.Helper()
	c.Eventually(30*time.Second, fmt.Sprintf("node%d answers /healthz", i), func() error {
		if err := c.Exited(i); err != nil {
			return GiveUp(err)
		}
		_, err := c.Health(i)
		return err
	})
}

// Launch starts node i's process (its binary, environment and the
// cluster's extra serve flags) without waiting for it to answer.
func (c *Cluster) Launch(i int) {
	t := c.T
	t.Helper()
	n := c.Nodes[i]
	if n.Proc != nil {
		t.Fatalf("node%d is already running", i)
	}
	n.Starts++
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	bin := SteleBin
	if n.Bin != "" {
		bin = n.Bin
	}
	env := n.Env
	if c.syncJournal {
		if n.Bin == "" {
			bin = ByzantineBin(t)
		}
		env = withSyncJournal(env, c.syncJournalPath(i), c.slowFsync)
	}
	args := append(append([]string{"serve", "--data", n.Dir}, c.ServeArgs...), n.Args...)
	fmt.Fprintf(f, "=== harness: start #%d of node%d at %s: %s %s %s\n", n.Starts, i,
		time.Now().Format(time.RFC3339Nano), strings.Join(env, " "), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a terminal's Ctrl-C goes to the test only;
	// and killed with the test binary if that dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close()
	if err != nil {
		t.Fatalf("starting node%d: %v", i, err)
	}
	p := &Process{Cmd: cmd, Done: make(chan struct{})}
	go func() { p.Err = cmd.Wait(); close(p.Done) }()
	n.Proc = p
}

// StartAll starts every node: all processes first, then the health waits,
// since a broker may need its peers while it starts (a block it replays
// may need a batch only they hold).
func (c *Cluster) StartAll() {
	c.T.Helper()
	c.StartNodes(c.All()...)
}

// StartNodes launches the nodes given, then waits for each to answer
// /healthz.
func (c *Cluster) StartNodes(idx ...int) {
	c.T.Helper()
	for _, i := range idx {
		c.Launch(i)
	}
	for _, i := range idx {
		c.waitHealthy(i)
	}
}

// Exited returns an error if node i was started and has exited since.
func (c *Cluster) Exited(i int) error {
	p := c.Nodes[i].Proc
	if p == nil {
		return fmt.Errorf("node%d is not running", i)
	}
	select {
	case <-p.Done:
		return fmt.Errorf("node%d exited unexpectedly: %v", i, p.Err)
	default:
		return nil
	}
}

// Signal sends sig to node i's process.
func (c *Cluster) Signal(i int, sig syscall.Signal) {
	c.T.Helper()
	p := c.Nodes[i].Proc
	if p == nil {
		c.T.Fatalf("node%d is not running", i)
	}
	if err := p.Cmd.Process.Signal(sig); err != nil {
		c.T.Fatalf("signalling node%d with %v: %v", i, sig, err)
	}
}

// WaitExit waits up to d for node i's process to exit and forgets it.
func (c *Cluster) WaitExit(i int, d time.Duration, why string) error {
	p := c.Nodes[i].Proc
	select {
	case <-p.Done:
		c.Nodes[i].Proc = nil
		return p.Err
	case <-time.After(d):
		c.T.Fatalf("node%d did not exit within %v of %s (a hang)", i, d, why)
		return nil
	}
}

// Kill9 crashes node i (SIGKILL) and waits for it to be gone.
func (c *Cluster) Kill9(i int) {
	c.T.Helper()
	c.Signal(i, syscall.SIGKILL)
	c.WaitExit(i, 10*time.Second, "SIGKILL")
	c.T.Logf("%s node%d killed with SIGKILL", Clock(), i)
}

// Stop shuts node i down with SIGTERM and requires a clean exit (status 0)
// within 30 s.
func (c *Cluster) Stop(i int) {
	c.T.Helper()
	if c.Nodes[i].Proc == nil {
		c.T.Fatalf("node%d is not running", i)
	}
	if c.Nodes[i].Proc.Paused {
		c.Resume(i)
	}
	c.Signal(i, syscall.SIGTERM)
	if err := c.WaitExit(i, 30*time.Second, "SIGTERM"); err != nil {
		c.T.Errorf("node%d did not exit cleanly after SIGTERM: %v", i, err)
	}
}

// StopAll stops every running node with SIGTERM, all at once, and requires
// each to exit cleanly.
func (c *Cluster) StopAll() {
	c.T.Helper()
	var running []int
	for _, n := range c.Nodes {
		if n.Proc != nil {
			if n.Proc.Paused {
				c.Resume(n.Idx)
			}
			c.Signal(n.Idx, syscall.SIGTERM)
			running = append(running, n.Idx)
		}
	}
	for _, i := range running {
		if err := c.WaitExit(i, 30*time.Second, "SIGTERM"); err != nil {
			c.T.Errorf("node%d did not exit cleanly after SIGTERM: %v", i, err)
		}
	}
}

// Pause freezes node i (SIGSTOP): its connections stay open, it answers
// nothing.
func (c *Cluster) Pause(i int) {
	c.T.Helper()
	c.Signal(i, syscall.SIGSTOP)
	c.Nodes[i].Proc.Paused = true
	c.T.Logf("%s node%d frozen with SIGSTOP", Clock(), i)
}

// Resume thaws node i (SIGCONT).
func (c *Cluster) Resume(i int) {
	c.T.Helper()
	c.Signal(i, syscall.SIGCONT)
	c.Nodes[i].Proc.Paused = false
	c.T.Logf("%s node%d thawed with SIGCONT", Clock(), i)
}

// Restart starts node i again on the same data directory.
func (c *Cluster) Restart(i int) {
	c.T.Helper()
	c.Start(i)
	c.T.Logf("%s node%d restarted", Clock(), i)
}
