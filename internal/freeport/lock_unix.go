//go:build unix

package freeport

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on path and keeps it (and its
// descriptor) until the process exits; it reports false if another process
// holds it or it cannot be taken.
func lockFile(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	held = append(held, f) // the lock lives as long as the descriptor
	return true
}

// held keeps the locked files open. Guarded by mu.
var held []*os.File
