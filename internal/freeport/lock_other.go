//go:build !unix

package freeport

// lockFile: no advisory locks here; ports come from the whole range.
func lockFile(string) bool { return false }
