package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// What the brokers report and store: /healthz, heights and app hashes, the
// files under DATA/logs; and the polling every wait is made of.

// Health asks node i's /healthz and records the answer in the history.
func (c *Cluster) Health(i int) (Health, error) {
	var h Health
	resp, err := c.HTTPC.Get(c.Nodes[i].HTTPURL + "/healthz")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("node%d /healthz: %s", i, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, fmt.Errorf("node%d /healthz: %v", i, err)
	}
	if h.Status != "ok" || h.NodeID != c.Nodes[i].NodeID {
		return h, fmt.Errorf("node%d /healthz: %+v", i, h)
	}
	c.hist.record(i, h)
	return h, nil
}

// Heights returns the heights of the nodes given, failing the poll (not
// the test) if one does not answer.
func (c *Cluster) Heights(idx ...int) (map[int]Health, error) {
	out := map[int]Health{}
	for _, i := range idx {
		if err := c.Exited(i); err != nil {
			return nil, GiveUp(err)
		}
		h, err := c.Health(i)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// MaxHeight returns the largest height among the nodes given, waiting up
// to 10 s for all of them to answer.
func (c *Cluster) MaxHeight(idx ...int) int64 {
	c.T.Helper()
	var top int64
	c.Eventually(10*time.Second, "nodes answer /healthz", func() error {
		hs, err := c.Heights(idx...)
		if err != nil {
			return err
		}
		top = 0
		for _, h := range hs {
			top = max(top, h.Height)
		}
		return nil
	})
	return top
}

// WaitHeight waits up to d until every node given is at height h or above.
func (c *Cluster) WaitHeight(d time.Duration, h int64, idx ...int) {
	c.T.Helper()
	c.Eventually(d, fmt.Sprintf("nodes %v reach height %d", idx, h), func() error {
		hs, err := c.Heights(idx...)
		if err != nil {
			return err
		}
		for i, got := range hs {
			if got.Height < h {
				return fmt.Errorf("node%d is at height %d", i, got.Height)
			}
		}
		return nil
	})
}

// WaitCaughtUp waits up to d until node i's height reaches the largest
// height of the others at the time of the call.
func (c *Cluster) WaitCaughtUp(d time.Duration, i int, others ...int) {
	c.T.Helper()
	target := c.MaxHeight(others...)
	start := time.Now()
	c.Eventually(d, fmt.Sprintf("node%d catches up to height %d, the others' height when it came back", i, target), func() error {
		hs, err := c.Heights(append([]int{i}, others...)...)
		if err != nil {
			return err
		}
		if hs[i].Height < target {
			var at []string
			for _, o := range others {
				at = append(at, fmt.Sprintf("node%d %d", o, hs[o].Height))
			}
			return fmt.Errorf("node%d is at height %d, the others at %s", i, hs[i].Height, strings.Join(at, ", "))
		}
		return nil
	})
	c.T.Logf("node%d caught up to height %d in %v", i, target, time.Since(start).Round(time.Millisecond))
}

// CheckAppHashes polls the nodes given until all report the same height,
// then requires the same app hash. Blocks come at least every 2 s, so the
// heights meet between two blocks.
func (c *Cluster) CheckAppHashes(d time.Duration, idx ...int) {
	c.T.Helper()
	var agreed Health
	c.Eventually(d, fmt.Sprintf("nodes %v report one height", idx), func() error {
		hs, err := c.Heights(idx...)
		if err != nil {
			return err
		}
		first := hs[idx[0]]
		for i, h := range hs {
			if h.Height != first.Height {
				return fmt.Errorf("node%d at %d, node%d at %d", idx[0], first.Height, i, h.Height)
			}
		}
		for i, h := range hs {
			if h.AppHash != first.AppHash {
				return GiveUp(fmt.Errorf("divergence at height %d: node%d app hash %s, node%d app hash %s",
					h.Height, idx[0], first.AppHash, i, h.AppHash))
			}
		}
		agreed = first
		return nil
	})
	c.T.Logf("nodes %v agree at height %d: app hash %s", idx, agreed.Height, agreed.AppHash)
	c.CheckNoDivergence()
}

// CheckNoDivergence fails the test if two nodes ever reported different
// app hashes for one height.
func (c *Cluster) CheckNoDivergence() {
	c.T.Helper()
	for _, msg := range c.hist.divergences() {
		c.T.Error(msg)
	}
}

// CompareLogs requires every file under DATA/logs (segments, indexes,
// partition metadata) to be byte-identical on every node given; nodes must
// be stopped. It returns the number of files compared.
func (c *Cluster) CompareLogs(idx ...int) int {
	c.T.Helper()
	ref := c.LogFiles(idx[0])
	for _, i := range idx[1:] {
		other := c.LogFiles(i)
		for name, want := range ref {
			got, ok := other[name]
			switch {
			case !ok:
				c.T.Errorf("logs/%s exists on node%d but not on node%d", name, idx[0], i)
			case !bytes.Equal(got, want):
				at := 0
				for at < min(len(got), len(want)) && got[at] == want[at] {
					at++
				}
				c.T.Errorf("logs/%s differs: node%d has %d bytes, node%d %d bytes, first difference at byte %d",
					name, idx[0], len(want), i, len(got), at)
			}
		}
		for name := range other {
			if _, ok := ref[name]; !ok {
				c.T.Errorf("logs/%s exists on node%d but not on node%d", name, i, idx[0])
			}
		}
	}
	return len(ref)
}

// LogFiles reads every file under node i's DATA/logs.
func (c *Cluster) LogFiles(i int) map[string][]byte {
	c.T.Helper()
	if c.Nodes[i].Proc != nil {
		c.T.Fatalf("node%d is running: stop it before reading its files", i)
	}
	root := filepath.Join(c.Nodes[i].Dir, "logs")
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		data, err := os.ReadFile(path)
		out[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		c.T.Fatal(err)
	}
	return out
}

// DiskLog decodes the records of one partition from node i's segment files
// (DATA/logs/TOPIC-P/*.log, in offset order); the node must be stopped.
func (c *Cluster) DiskLog(i int, topic string, partition int32) ([]LogRecord, error) {
	dir := filepath.Join(c.Nodes[i].Dir, "logs", fmt.Sprintf("%s-%d", topic, partition))
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	slices.Sort(segs) // 20-digit base offsets sort as numbers
	var data []byte
	for _, s := range segs {
		b, err := os.ReadFile(s)
		if err != nil {
			return nil, err
		}
		data = append(data, b...)
	}
	return DecodeBatches(topic, partition, 0, data)
}

// errGiveUp marks a poll error that no retry can fix.
type errGiveUp struct{ err error }

func (e errGiveUp) Error() string { return e.err.Error() }

// GiveUp makes eventually give up at once with err.
func GiveUp(err error) error { return errGiveUp{err} }

// Eventually calls f every 100 ms until it returns nil, failing the test
// with f's last error if d passes first or f returns giveUp(err).
func (c *Cluster) Eventually(d time.Duration, what string, f func() error) {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		var s errGiveUp
		if errors.As(err, &s) {
			c.T.Fatalf("%s: %v", what, s.err)
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("%s: not within %v; last: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Observe calls f every 200 ms for the whole of d, an observation window
// over which something must not happen (a minority's height must not
// move); f's first error fails the test.
func (c *Cluster) Observe(d time.Duration, what string, f func() error) {
	c.T.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := f(); err != nil {
			c.T.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
