//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 9 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 9 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(8) != core.DigestDomain || blockDigestDomain(9) == blockDigestDomain(8) {
		t.Fatalf("version 9 opens the block digest with %q, version 8 with %q", blockDigestDomain(9), blockDigestDomain(8))
	}
}
