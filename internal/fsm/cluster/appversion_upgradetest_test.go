//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 18 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 18 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(17) != core.DigestDomain || blockDigestDomain(18) == blockDigestDomain(17) {
		t.Fatalf("version 18 opens the block digest with %q, version 17 with %q", blockDigestDomain(18), blockDigestDomain(17))
	}
}
