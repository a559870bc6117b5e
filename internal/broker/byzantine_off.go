//go:build !stelebyzantine

package broker

import "github.com/stele-io/stele/internal/fsm"

// byzantineAppHash returns hash unchanged: Byzantine behaviours exist only
// in the test-only `stelebyzantine` build (byzantine_on.go).
func byzantineAppHash(hash []byte, _ int64) []byte { return hash }

// byzantineSnapshot returns s unchanged (see byzantine_on.go).
func byzantineSnapshot(s *fsm.Snapshot) (*fsm.Snapshot, error) { return s, nil }
