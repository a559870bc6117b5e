//go:build !(linux || darwin || freebsd)

package kafka

// diskSpace reports -1, -1 (unknown) where statfs is not available.
func diskSpace(string) (total, usable int64) { return -1, -1 }
