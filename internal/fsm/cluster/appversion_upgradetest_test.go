//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 5 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 5 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(4) != core.DigestDomain || blockDigestDomain(5) == blockDigestDomain(4) {
		t.Fatalf("version 5 opens the block digest with %q, version 4 with %q", blockDigestDomain(5), blockDigestDomain(4))
	}
}
