//go:build !linux

package cli

import (
	"io"
	"os"
)

// isTerminal reports whether w is a character device. Outside Linux this is
// an approximation: a character device that is not a terminal (/dev/null)
// also counts, which only means a progress bar written where nobody sees it.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
