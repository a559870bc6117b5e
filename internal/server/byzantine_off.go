//go:build !stelebyzantine

package server

import "github.com/stele-io/stele/internal/consensus"

// byzantineMembership returns app unchanged: Byzantine behaviours exist
// only in the test-only `stelebyzantine` build (byzantine_on.go).
func byzantineMembership(app prefetchingApp, _ *Node, _ string) consensus.Application { return app }
