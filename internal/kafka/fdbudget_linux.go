package kafka

import (
	"errors"
	"os"
	"syscall"
)

// fdLimit is RLIMIT_NOFILE's soft limit; false when it is unlimited.
func fdLimit() (int, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0, false
	}
	return int(r.Cur), true
}

// fdsOpen counts this process's open file descriptors in /proc/self/fd;
// when even that cannot be opened for want of descriptors, all are open.
func fdsOpen(limit int) (int, bool) {
	d, err := os.Open("/proc/self/fd")
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return limit, true
	}
	if err != nil {
		return 0, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	return len(names) - 1, true // less the directory's own
}
