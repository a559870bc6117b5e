//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 15 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 15 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(14) != core.DigestDomain || blockDigestDomain(15) == blockDigestDomain(14) {
		t.Fatalf("version 15 opens the block digest with %q, version 14 with %q", blockDigestDomain(15), blockDigestDomain(14))
	}
}
