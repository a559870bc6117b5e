//go:build !linux

package kafka

// fdLimit: descriptors are counted only on Linux (/proc/self/fd); other
// platforms have no budget.
func fdLimit() (int, bool) { return 0, false }

func fdsOpen(int) (int, bool) { return 0, false }
