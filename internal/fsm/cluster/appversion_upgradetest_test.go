//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 12 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 12 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(11) != core.DigestDomain || blockDigestDomain(12) == blockDigestDomain(11) {
		t.Fatalf("version 12 opens the block digest with %q, version 11 with %q", blockDigestDomain(12), blockDigestDomain(11))
	}
}
