//go:build !linux

package cometbft

import "os"

// syncData waits until f is on disk.
func syncData(f *os.File) error { return f.Sync() }
