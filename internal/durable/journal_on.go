//go:build stelebyzantine

package durable

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// journal is the sync journal STELE_BYZANTINE's sync-journal=PATH names,
// opened once (nil without one).
var journal = sync.OnceValue(func() *os.File {
	for _, mode := range strings.Split(os.Getenv("STELE_BYZANTINE"), ",") {
		if path, ok := strings.CutPrefix(mode, "sync-journal="); ok {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				panic("stelebyzantine: sync journal: " + err.Error())
			}
			return f
		}
	}
	return nil
})

var journalMu sync.Mutex

// slowness is STELE_BYZANTINE's slow-fsync=DURATION (zero without one):
// every fsync first waits that long, as on a slow disk, so that a test's
// SIGKILL finds writes not yet fsynced more often.
var slowness = sync.OnceValue(func() time.Duration {
	for _, mode := range strings.Split(os.Getenv("STELE_BYZANTINE"), ",") {
		if v, ok := strings.CutPrefix(mode, "slow-fsync="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				panic("stelebyzantine: STELE_BYZANTINE slow-fsync=" + v + ": " + err.Error())
			}
			return d
		}
	}
	return 0
})

// syncFile notes f's size before the fsync: the fsync covers at least
// that much, and appends made while it runs may not be covered.
func syncFile(f *os.File) error {
	if d := slowness(); d > 0 {
		time.Sleep(d)
	}
	j := journal()
	if j == nil {
		return f.Sync()
	}
	fi, statErr := f.Stat()
	if err := f.Sync(); err != nil {
		return err
	}
	if statErr == nil {
		note(j, f.Name(), fi)
	}
	return nil
}

func created(f *os.File) {
	if j := journal(); j != nil {
		if fi, err := f.Stat(); err == nil {
			note(j, f.Name(), fi)
		}
	}
}

// note appends "inode size path". The journal is not fsynced: it only has
// to survive SIGKILL, which the page cache does.
func note(j *os.File, name string, fi os.FileInfo) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	if abs, err := filepath.Abs(name); err == nil {
		name = abs
	}
	journalMu.Lock()
	defer journalMu.Unlock()
	fmt.Fprintf(j, "%d %d %s\n", st.Ino, fi.Size(), name)
}
