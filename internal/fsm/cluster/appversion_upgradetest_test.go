//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 8 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 8 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(7) != core.DigestDomain || blockDigestDomain(8) == blockDigestDomain(7) {
		t.Fatalf("version 8 opens the block digest with %q, version 7 with %q", blockDigestDomain(8), blockDigestDomain(7))
	}
}
