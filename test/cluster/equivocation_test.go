package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/p2p"
	"github.com/stele-io/stele/internal/freeport"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/test/harness"
)

// TestByzantineEquivocation: a second process runs with a copy of one
// broker's validator key (its "twin": the same key, its own node key, ports
// and data) and proposes empty blocks (test-only build,
// STELE_BYZANTINE=empty-proposals). Whenever that key's turn to propose
// comes, its two holders propose different blocks for one height and round
// and each prevotes its own: the key signs two conflicting votes. The
// honest brokers must keep committing and acknowledging under continuous
// produce and consume, CometBFT must commit the duplicate-vote evidence —
// every broker logs it, naming the copied key's validator and no other, and
// counts it in stele_evidence_committed_total — the copied key loses its
// power in the block that commits the evidence (app version 7: every
// broker's `stele cluster status` lists it as removed, at one height) and
// the three validators left keep committing, and `stele verify` proves
// records and state under the new set against the genesis — and all brokers, the twin
// included, must end at one app hash with byte-identical logs holding every
// acknowledged record. (Fault test 4, equivocation; docs/cluster.md.)
func TestByzantineEquivocation(t *testing.T) {
	const topic, parts = "equivocation", 3
	byz := harness.ByzantineBin(t)
	// A pause after each commit keeps the twin in step with the others at
	// every height: at full speed (a block every 60 ms) it can fall behind
	// and cast its votes for heights the others have left, where they are
	// ignored and no conflict is ever seen.
	c := newCluster(t, clusterOptions{ServeArgs: []string{"--timeout-commit", "300ms"}})
	vals := c.ValidatorAddrs()
	brokers := c.All()
	owner := c.Rng.IntN(len(brokers))
	twin := c.addTwin(owner)
	c.Nodes[twin].Bin, c.Nodes[twin].Env = byz, []string{"STELE_BYZANTINE=empty-proposals"}
	t.Logf("node%d (a second process holding node%d's validator key %s) proposes empty blocks",
		twin, owner, vals[owner])

	for _, i := range brokers {
		c.Start(i)
	}
	w := startWorkload(t, c.KafkaAddrs(brokers...), workloadOptions{
		topic: topic, partitions: parts, writers: 2, consumers: 2, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
	})
	w.waitAcked(c, 45*time.Second, 300, "4 brokers, before the twin starts")
	c.Start(twin)

	const logged = "evidence of validator misbehavior committed"
	c.Eventually(90*time.Second, "every broker logs committed duplicate-vote evidence", func() error {
		if err := c.Exited(twin); err != nil {
			return harness.GiveUp(err)
		}
		for _, i := range brokers {
			if len(c.logLines(i, logged)) == 0 {
				return fmt.Errorf("node%d has logged no evidence yet (heights %v)", i, c.MaxHeight(brokers...))
			}
		}
		return nil
	})
	// The offender voted out (app version 7, fsm/cluster's membership.go):
	// every broker's status lists the copied key as removed for a
	// duplicate vote, power 0, at one height, and the three left keep
	// committing (more than two thirds of their 30 is all three).
	removedAt := map[int]int64{}
	c.Eventually(60*time.Second, "every broker lists the copied key as removed", func() error {
		for _, i := range brokers {
			st, err := c.clusterStatus(i)
			if err != nil {
				return err
			}
			for _, v := range st.Validators {
				switch {
				case !strings.EqualFold(v.Address, vals[owner]):
					if v.Role != httpapi.RoleValidator || v.Power <= 0 || v.Removed != nil {
						return harness.GiveUp(fmt.Errorf("node%d: an honest validator is listed as %+v", i, v))
					}
				case v.Removed == nil:
					return fmt.Errorf("node%d: the offender is still a %s of power %d", i, v.Role, v.Power)
				case v.Role != httpapi.RoleRemoved || v.Power != 0 || v.Removed.Reason != "duplicate-vote" || v.Removed.EvidenceHeight <= 0:
					return harness.GiveUp(fmt.Errorf("node%d: the offender is listed as %+v, removed %+v", i, v, *v.Removed))
				default:
					removedAt[i] = v.Removed.Height
				}
			}
		}
		return nil
	})
	for _, i := range brokers {
		if removedAt[i] != removedAt[brokers[0]] {
			t.Fatalf("the brokers removed the offender at different heights: %v", removedAt)
		}
	}
	t.Logf("the offender's key was removed at height %d on every broker", removedAt[brokers[0]])
	c.WaitHeight(60*time.Second, removedAt[brokers[0]]+20, brokers...)
	w.waitAcked(c, 45*time.Second, 300, "after the evidence was committed, the offender removed, the twin still running")

	// Verified reads across the change: headers from two heights after
	// the removal name the set of three, which the proofs carry and the
	// genesis set vouches for (pkg/proof's VerifyHeaderWith).
	genesis := filepath.Join(c.Nodes[0].Dir, "cometbft", "config", "genesis.json")
	honest := brokers[(owner+1)%len(brokers)]
	out, err := exec.Command(harness.SteleBin, "verify", "--end", topic, "0", "--http", c.Nodes[honest].HTTP,
		"--genesis", genesis, "--timeout", "60s", "--output", "json").Output()
	if err != nil {
		t.Fatalf("stele verify --end after the removal: %v\n%s", err, out)
	}
	var end struct {
		Height        int64  `json:"height"`
		Validators    int    `json:"validators"`
		HighWatermark *int64 `json:"high_watermark"`
	}
	if err := json.Unmarshal(out, &end); err != nil || end.HighWatermark == nil || *end.HighWatermark == 0 {
		t.Fatalf("stele verify --end: %v: %s", err, out)
	}
	if end.Validators != 3 || end.Height < removedAt[brokers[0]]+2 {
		t.Fatalf("the end of %s-0 proven at height %d by a set of %d validators; want a header of the set of 3 after height %d", topic, end.Height, end.Validators, removedAt[brokers[0]]+2)
	}
	// A record appended after the change, from whichever partition has one.
	var proven bool
	for p := range parts {
		out, err := exec.Command(harness.SteleBin, "verify", "--end", topic, fmt.Sprint(p), "--http", c.Nodes[honest].HTTP,
			"--genesis", genesis, "--timeout", "60s", "--output", "json").Output()
		if err != nil || json.Unmarshal(out, &end) != nil || end.HighWatermark == nil || *end.HighWatermark == 0 {
			t.Fatalf("stele verify --end %s %d: %v\n%s", topic, p, err, out)
		}
		out, err = exec.Command(harness.SteleBin, "verify", topic, fmt.Sprint(p), fmt.Sprint(*end.HighWatermark-1), "--http", c.Nodes[honest].HTTP,
			"--genesis", genesis, "--timeout", "60s", "--output", "json").Output()
		var rec struct {
			Height     int64 `json:"height"`
			Validators int   `json:"validators"`
		}
		if err != nil || json.Unmarshal(out, &rec) != nil {
			t.Fatalf("stele verify of the last record of %s-%d after the removal: %v\n%s", topic, p, err, out)
		}
		if rec.Height+1 >= removedAt[brokers[0]]+2 {
			if rec.Validators != 3 {
				t.Fatalf("a record of height %d proven by a header of %d validators, want 3: %s", rec.Height, rec.Validators, out)
			}
			t.Logf("verified after the removal: %s", out)
			proven = true
			break
		}
	}
	if !proven {
		t.Fatalf("no partition of %s has a record appended after height %d", topic, removedAt[brokers[0]])
	}
	w.stopProducing(60 * time.Second)
	w.stopConsuming()
	t.Log(w.summary())
	everyone := append(brokers, twin)

	evidenceRE := regexp.MustCompile(`kind=(\S+) validator=([0-9A-F]+) at_height=(\d+) height=(\d+)`)
	for _, i := range brokers {
		lines := c.logLines(i, logged)
		for _, line := range lines {
			m := evidenceRE.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("node%d: cannot read the evidence line %q", i, line)
			}
			if m[1] != "duplicate-vote" || m[2] != vals[owner] {
				t.Errorf("node%d committed evidence of %s by %s; only duplicate votes by %s (node%d's key) were made: %s",
					i, m[1], m[2], vals[owner], owner, line)
			}
		}
		n, err := c.metricLabelled(i, "stele_evidence_committed_total", `kind="duplicate-vote"`)
		if err != nil {
			t.Fatal(err)
		}
		if int(n) != len(lines) {
			t.Errorf("node%d: stele_evidence_committed_total{kind=\"duplicate-vote\"} is %v, its log has %d evidence lines", i, n, len(lines))
		}
		t.Logf("node%d: %d pieces of evidence committed, the first: %s", i, len(lines), lines[0])
	}
	c.CheckAppHashes(30*time.Second, everyone...)
	w.checkBrokers(c, everyone...)
	c.StopAll()
	t.Logf("%d files under logs/ are byte-identical on the 4 brokers and the twin", c.CompareLogs(everyone...))
	for _, i := range everyone {
		w.checkDisk(c, i)
	}
}

// addTwin adds a node that holds a copy of node i's data directory as `stele
// cluster init` wrote it — genesis, validator key, peers — with a node key,
// listeners and (empty) data of its own, so that a second process signs
// with node i's validator key. Call it before node i first starts. It
// returns the twin's index; the twin is not among the genesis brokers, so
// c.validatorAddrs must be read before.
func (c *cluster) addTwin(i int) int {
	t := c.T
	t.Helper()
	orig := c.Nodes[i]
	if orig.Starts > 0 {
		t.Fatalf("addTwin(%d): node%d has run; its twin must copy the data directory as init wrote it", i, i)
	}
	idx := len(c.Nodes)
	dir := filepath.Join(c.Dir, "cluster", fmt.Sprintf("node%d-twin", i))
	if err := copyTree(orig.Dir, dir); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "cometbft", "config", "node_key.json")
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	key, err := p2p.LoadOrGenNodeKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	n := &harness.Node{Idx: idx, NodeID: orig.NodeID, Dir: dir, P2PID: string(key.ID()),
		LogPath: filepath.Join(c.Dir, fmt.Sprintf("node%d.stderr", idx))}
	var rpc string
	for _, addr := range []*string{&n.Kafka, &n.HTTP, &n.P2P, &rpc} {
		*addr = freeLoopbackAddr(t)
	}
	n.HTTPURL = "http://" + n.HTTP
	n.Args = []string{"--kafka", n.Kafka, "--http", n.HTTP, "--p2p", n.P2P, "--rpc", rpc}
	c.Nodes = append(c.Nodes, n)
	return idx
}

// freeLoopbackAddr returns a 127.0.0.1 address whose port was free a moment
// ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr() // below the ephemeral range: see package freeport
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("copyTree: %s is not a regular file", path)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		info, err := in.Stat()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// metricLabelled reads one sample of a labelled counter or gauge from node
// i's /metrics; labels is the text between the braces, e.g. `kind="x"`.
// A metric with no sample for those labels yet reads as 0.
func (c *cluster) metricLabelled(i int, name, labels string) (float64, error) {
	body, err := c.metricsText(i)
	if err != nil {
		return 0, err
	}
	prefix := name + "{" + labels + "} "
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			var f float64
			_, err := fmt.Sscanf(v, "%g", &f)
			return f, err
		}
	}
	return 0, nil
}
