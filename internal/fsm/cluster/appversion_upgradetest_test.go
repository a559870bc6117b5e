//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 10 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 10 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(9) != core.DigestDomain || blockDigestDomain(10) == blockDigestDomain(9) {
		t.Fatalf("version 10 opens the block digest with %q, version 9 with %q", blockDigestDomain(10), blockDigestDomain(9))
	}
}
