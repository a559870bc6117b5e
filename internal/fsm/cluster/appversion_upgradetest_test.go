//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 7 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 7 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(6) != core.DigestDomain || blockDigestDomain(7) == blockDigestDomain(6) {
		t.Fatalf("version 7 opens the block digest with %q, version 6 with %q", blockDigestDomain(7), blockDigestDomain(6))
	}
}
