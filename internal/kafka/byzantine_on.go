//go:build stelebyzantine

package kafka

import (
	"os"
	"sync"

	"github.com/stele-io/stele/internal/fsm"
)

// told are the lies to clients STELE_BYZANTINE names (lies.go), read once.
var told = sync.OnceValue(func() map[string]bool { return lies(os.Getenv("STELE_BYZANTINE")) })

// byzantineFetch applies the Fetch lies of the test-only stelebyzantine
// build to a partition's answer.
func byzantineFetch(data []byte, hwm int64) ([]byte, int64) {
	if set := told(); len(set) > 0 {
		return lieAboutFetch(set, data, hwm)
	}
	return data, hwm
}

// byzantineMetadata reports whether this broker claims to be the only
// broker and the leader of everything (lie-metadata).
func byzantineMetadata() bool { return told()[lieMetadata] }

// byzantineEndOffset forges ListOffsets' latest offset as forge-watermark
// forges Fetch's high watermark: 1000 above the truth.
func byzantineEndOffset(o int64) int64 {
	if told()[lieForgeWatermark] {
		return o + 1000
	}
	return o
}

// byzantineCommands applies rewrite-tenant and forge-admin to the
// commands a request submits.
func byzantineCommands(cmds []fsm.Command) []fsm.Command {
	set := told()
	if to := rewriteTarget(set); to != "" {
		cmds = rewriteTenant(cmds, to)
	}
	if set[lieForgeAdmin] {
		return forgeAdmin(cmds)
	}
	return cmds
}
