//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 4 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 4 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(3) != core.DigestDomain || blockDigestDomain(4) == blockDigestDomain(3) {
		t.Fatalf("version 4 opens the block digest with %q, version 3 with %q", blockDigestDomain(4), blockDigestDomain(3))
	}
}
