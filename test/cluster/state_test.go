package cluster

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

// health asks node i's /healthz and records the answer in the history.
func (c *cluster) health(i int) (health, error) {
	var h health
	resp, err := c.httpc.Get("http://" + c.nodes[i].http + "/healthz")
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
	if h.Status != "ok" || h.NodeID != c.nodes[i].nodeID {
		return h, fmt.Errorf("node%d /healthz: %+v", i, h)
	}
	c.hist.record(i, h)
	return h, nil
}

// heights returns the heights of the nodes given, failing the poll (not
// the test) if one does not answer.
func (c *cluster) heights(idx ...int) (map[int]health, error) {
	out := map[int]health{}
	for _, i := range idx {
		if err := c.exited(i); err != nil {
			return nil, giveUp(err)
		}
		h, err := c.health(i)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// maxHeight returns the largest height among the nodes given, waiting up
// to 10 s for all of them to answer.
func (c *cluster) maxHeight(idx ...int) int64 {
	c.t.Helper()
	var top int64
	c.eventually(10*time.Second, "nodes answer /healthz", func() error {
		hs, err := c.heights(idx...)
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

// waitHeight waits up to d until every node given is at height h or above.
func (c *cluster) waitHeight(d time.Duration, h int64, idx ...int) {
	c.t.Helper()
	c.eventually(d, fmt.Sprintf("nodes %v reach height %d", idx, h), func() error {
		hs, err := c.heights(idx...)
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

// waitCaughtUp waits up to d until node i's height reaches the largest
// height of the others at the time of the call.
func (c *cluster) waitCaughtUp(d time.Duration, i int, others ...int) {
	c.t.Helper()
	target := c.maxHeight(others...)
	start := time.Now()
	c.eventually(d, fmt.Sprintf("node%d catches up to height %d, the others' height when it came back", i, target), func() error {
		hs, err := c.heights(append([]int{i}, others...)...)
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
	c.t.Logf("node%d caught up to height %d in %v", i, target, time.Since(start).Round(time.Millisecond))
}

// checkAppHashes polls the nodes given until all report the same height,
// then requires the same app hash. Blocks come at least every 2 s, so the
// heights meet between two blocks.
func (c *cluster) checkAppHashes(d time.Duration, idx ...int) {
	c.t.Helper()
	var agreed health
	c.eventually(d, fmt.Sprintf("nodes %v report one height", idx), func() error {
		hs, err := c.heights(idx...)
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
				return giveUp(fmt.Errorf("divergence at height %d: node%d app hash %s, node%d app hash %s",
					h.Height, idx[0], first.AppHash, i, h.AppHash))
			}
		}
		agreed = first
		return nil
	})
	c.t.Logf("nodes %v agree at height %d: app hash %s", idx, agreed.Height, agreed.AppHash)
	c.checkNoDivergence()
}

// checkNoDivergence fails the test if two nodes ever reported different
// app hashes for one height.
func (c *cluster) checkNoDivergence() {
	c.t.Helper()
	for _, msg := range c.hist.divergences() {
		c.t.Error(msg)
	}
}

// compareLogs requires every file under DATA/logs (segments, indexes,
// partition metadata) to be byte-identical on every node given; nodes must
// be stopped. It returns the number of files compared.
func (c *cluster) compareLogs(idx ...int) int {
	c.t.Helper()
	ref := c.logFiles(idx[0])
	for _, i := range idx[1:] {
		other := c.logFiles(i)
		for name, want := range ref {
			got, ok := other[name]
			switch {
			case !ok:
				c.t.Errorf("logs/%s exists on node%d but not on node%d", name, idx[0], i)
			case !bytes.Equal(got, want):
				at := 0
				for at < min(len(got), len(want)) && got[at] == want[at] {
					at++
				}
				c.t.Errorf("logs/%s differs: node%d has %d bytes, node%d %d bytes, first difference at byte %d",
					name, idx[0], len(want), i, len(got), at)
			}
		}
		for name := range other {
			if _, ok := ref[name]; !ok {
				c.t.Errorf("logs/%s exists on node%d but not on node%d", name, i, idx[0])
			}
		}
	}
	return len(ref)
}

// logFiles reads every file under node i's DATA/logs.
func (c *cluster) logFiles(i int) map[string][]byte {
	c.t.Helper()
	if c.nodes[i].proc != nil {
		c.t.Fatalf("node%d is running: stop it before reading its files", i)
	}
	root := filepath.Join(c.nodes[i].dir, "logs")
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
		c.t.Fatal(err)
	}
	return out
}

// diskLog decodes the records of one partition from node i's segment files
// (DATA/logs/TOPIC-P/*.log, in offset order); the node must be stopped.
func (c *cluster) diskLog(i int, topic string, partition int32) ([]logRecord, error) {
	dir := filepath.Join(c.nodes[i].dir, "logs", fmt.Sprintf("%s-%d", topic, partition))
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
	return decodeBatches(topic, partition, 0, data)
}

// errGiveUp marks a poll error that no retry can fix.
type errGiveUp struct{ err error }

func (e errGiveUp) Error() string { return e.err.Error() }

// giveUp makes eventually give up at once with err.
func giveUp(err error) error { return errGiveUp{err} }

// eventually calls f every 100 ms until it returns nil, failing the test
// with f's last error if d passes first or f returns giveUp(err).
func (c *cluster) eventually(d time.Duration, what string, f func() error) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		var s errGiveUp
		if errors.As(err, &s) {
			c.t.Fatalf("%s: %v", what, s.err)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v; last: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// observe calls f every 200 ms for the whole of d, an observation window
// over which something must not happen (a minority's height must not
// move); f's first error fails the test.
func (c *cluster) observe(d time.Duration, what string, f func() error) {
	c.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := f(); err != nil {
			c.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
