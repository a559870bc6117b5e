//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 6 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 6 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(5) != core.DigestDomain || blockDigestDomain(6) == blockDigestDomain(5) {
		t.Fatalf("version 6 opens the block digest with %q, version 5 with %q", blockDigestDomain(6), blockDigestDomain(5))
	}
}
