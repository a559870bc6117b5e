//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 19 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 19 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(18) != core.DigestDomain || blockDigestDomain(19) == blockDigestDomain(18) {
		t.Fatalf("version 19 opens the block digest with %q, version 18 with %q", blockDigestDomain(19), blockDigestDomain(18))
	}
}
