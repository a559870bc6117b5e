//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 17 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 17 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(16) != core.DigestDomain || blockDigestDomain(17) == blockDigestDomain(16) {
		t.Fatalf("version 17 opens the block digest with %q, version 16 with %q", blockDigestDomain(17), blockDigestDomain(16))
	}
}
