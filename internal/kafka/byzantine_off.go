//go:build !stelebyzantine

package kafka

import "github.com/stele-io/stele/internal/fsm"

// byzantineFetch returns a partition's answer unchanged: only the
// test-only stelebyzantine build lies to clients (byzantine_on.go).
func byzantineFetch(data []byte, hwm int64) ([]byte, int64) { return data, hwm }

// byzantineMetadata is false: this build tells clients the truth.
func byzantineMetadata() bool { return false }

// byzantineEndOffset returns ListOffsets' latest offset unchanged.
func byzantineEndOffset(o int64) int64 { return o }

// byzantineCommands returns the commands unchanged.
func byzantineCommands(cmds []fsm.Command) []fsm.Command { return cmds }
