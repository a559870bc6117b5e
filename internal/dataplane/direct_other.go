//go:build !linux

package dataplane

import (
	"errors"
	"os"
)

// openDirect is Linux only; elsewhere the store writes through the page
// cache.
func openDirect(string) (*os.File, error) { return nil, errors.ErrUnsupported }
