package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// syncJournalPath is where node i's sync journal is kept: outside its data
// directory, so that the journal outlives what it describes.
func (c *Cluster) syncJournalPath(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("node%d.sync-journal", i))
}

// withSyncJournal adds sync-journal=path (and slow-fsync=slow, if not
// zero) to env's STELE_BYZANTINE, adding the variable if env has none.
func withSyncJournal(env []string, path string, slow time.Duration) []string {
	modes := "sync-journal=" + path
	if slow > 0 {
		modes += fmt.Sprintf(",slow-fsync=%v", slow)
	}
	out := slices.Clone(env)
	for k, kv := range out {
		if v, ok := strings.CutPrefix(kv, "STELE_BYZANTINE="); ok {
			out[k] = "STELE_BYZANTINE=" + v + "," + modes
			return out
		}
	}
	return append(out, "STELE_BYZANTINE="+modes)
}

// LoseUnsynced drops every append stopped node i had not fsynced to its
// partition logs, their indexes and its batch store, as a power cut
// would: each file its sync journal names (Options.SyncJournal) is cut to
// the size its last fsync covered. A file replaced since (another inode at
// the path) or gone is left alone. It returns the files cut and the bytes
// dropped.
func (c *Cluster) LoseUnsynced(i int) (files int, dropped int64) {
	c.T.Helper()
	if !c.syncJournal {
		c.T.Fatal("LoseUnsynced needs Options.SyncJournal")
	}
	if c.Nodes[i].Proc != nil {
		c.T.Fatalf("node%d is running: kill it before dropping its unsynced writes", i)
	}
	type entry struct {
		ino  uint64
		size int64
	}
	last := map[string]entry{}
	f, err := os.Open(c.syncJournalPath(i))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0
	}
	if err != nil {
		c.T.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// "inode size path"; a line torn by the SIGKILL (the journal's
		// last) is skipped: the fsync it would have recorded may not have
		// returned.
		fields := strings.SplitN(sc.Text(), " ", 3)
		if len(fields) != 3 || !filepath.IsAbs(fields[2]) {
			continue
		}
		ino, err1 := strconv.ParseUint(fields[0], 10, 64)
		size, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		last[fields[2]] = entry{ino: ino, size: size}
	}
	if err := sc.Err(); err != nil {
		c.T.Fatal(err)
	}
	paths := make([]string, 0, len(last))
	for p := range last {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		e := last[p]
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Ino != e.ino || fi.Size() <= e.size {
			continue
		}
		if err := os.Truncate(p, e.size); err != nil {
			c.T.Fatal(err)
		}
		files++
		dropped += fi.Size() - e.size
	}
	c.T.Logf("%s node%d lost its unsynced writes: %d bytes cut from %d files", Clock(), i, dropped, files)
	return files, dropped
}
