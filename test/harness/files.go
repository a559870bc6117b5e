package harness

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Damaging and rebuilding a broker's files: the segments of a partition
// and their batches, a start on damaged data, a wipe before state sync;
// and reading what a broker logged at its latest start (StartLines).

// BatchPos is one RecordBatch in a segment file: its position, size and
// base offset.
type BatchPos struct {
	Pos, Size int64
	Base      int64
}

// SegmentFiles returns the .log files of a partition directory, oldest first.
func SegmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("%s: no segments (%v)", dir, err)
	}
	slices.Sort(segs)
	return segs
}

// SegmentBatches lists the batches of a segment file from their headers.
func SegmentBatches(t *testing.T, path string) []BatchPos {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []BatchPos
	for pos := int64(0); pos+12 <= int64(len(data)); {
		size := 12 + int64(binary.BigEndian.Uint32(data[pos+8:]))
		if pos+size > int64(len(data)) {
			t.Fatalf("%s: batch at %d runs past the end", path, pos)
		}
		out = append(out, BatchPos{Pos: pos, Size: size, Base: int64(binary.BigEndian.Uint64(data[pos:]))})
		pos += size
	}
	return out
}

// WatchUntilExit polls node i's /healthz until its process exits, for at
// most d, and returns the exit status and whether /healthz ever answered.
// The node is forgotten afterwards.
func (c *Cluster) WatchUntilExit(i int, d time.Duration) (exitErr error, served bool) {
	c.T.Helper()
	p := c.Nodes[i].Proc
	deadline := time.Now().Add(d)
	for {
		select {
		case <-p.Done:
			c.Nodes[i].Proc = nil
			return p.Err, served
		default:
		}
		if _, err := c.Health(i); err == nil {
			served = true
		}
		if time.Now().After(deadline) {
			p.Cmd.Process.Signal(syscall.SIGKILL)
			<-p.Done
			c.Nodes[i].Proc = nil
			c.T.Fatalf("node%d still running %v after it was started on damaged data (served /healthz: %v)", i, d, served)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Wipe removes node i's state as docs/cluster.md says to rebuild a broker:
// DATA/meta, DATA/logs, DATA/snapshots and everything in DATA/cometbft/data
// but priv_validator_state.json; DATA/cometbft/config and DATA/stele.json
// stay. The node must be stopped.
func (c *Cluster) Wipe(i int) {
	c.T.Helper()
	n := c.Nodes[i]
	if n.Proc != nil {
		c.T.Fatalf("node%d is running: stop it before wiping it", i)
	}
	for _, d := range []string{"meta", "logs", "snapshots"} {
		if err := os.RemoveAll(filepath.Join(n.Dir, d)); err != nil {
			c.T.Fatal(err)
		}
	}
	data := filepath.Join(n.Dir, "cometbft", "data")
	entries, err := os.ReadDir(data)
	if err != nil {
		c.T.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "priv_validator_state.json" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(data, e.Name())); err != nil {
			c.T.Fatal(err)
		}
	}
	// The files the journal names are gone; new ones may reuse their
	// inodes.
	if err := os.Remove(c.syncJournalPath(i)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.T.Fatal(err)
	}
	c.T.Logf("%s node%d wiped (kept cometbft/config, stele.json, cometbft/data/priv_validator_state.json)", Clock(), i)
}

// StartPhases are the lines `stele serve` logs while it opens its state,
// before /healthz answers, each with how long the step took
// (internal/server.Start).
var StartPhases = []string{"opened the batch store", "opened the state", "opened the snapshots", "serving /healthz"}

// StartLines returns the lines node i logged in its latest run (after the
// harness's last start marker in its stderr) that contain one of substrs.
func (c *Cluster) StartLines(i int, substrs ...string) []string {
	c.T.Helper()
	data, err := ReadFileIfExists(c.Nodes[i].LogPath)
	if err != nil {
		c.T.Fatal(err)
	}
	text := string(data)
	if k := strings.LastIndex(text, "=== harness: start"); k >= 0 {
		text = text[k:]
	}
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		for _, s := range substrs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}
