package dataplane

import (
	"os"
	"syscall"
)

// openDirect opens path for writes that bypass the page cache (O_DIRECT):
// each must start at, and span, a multiple of the logical block size, from
// memory aligned the same way. Store writes whole storeAlign-aligned
// records. File systems without O_DIRECT (tmpfs) refuse it.
func openDirect(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|syscall.O_DIRECT, 0)
}
