package cometbft

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData waits until f's data, and the metadata needed to read it back,
// is on disk (fdatasync: a file overwritten in place has none to write, so
// ext4 commits no journal transaction for it).
func syncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
