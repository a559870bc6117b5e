//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 11 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 11 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(10) != core.DigestDomain || blockDigestDomain(11) == blockDigestDomain(10) {
		t.Fatalf("version 11 opens the block digest with %q, version 10 with %q", blockDigestDomain(11), blockDigestDomain(10))
	}
}
