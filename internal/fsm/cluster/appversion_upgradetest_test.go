//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 16 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 16 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(15) != core.DigestDomain || blockDigestDomain(16) == blockDigestDomain(15) {
		t.Fatalf("version 16 opens the block digest with %q, version 15 with %q", blockDigestDomain(16), blockDigestDomain(15))
	}
}
