//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 14 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 14 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(13) != core.DigestDomain || blockDigestDomain(14) == blockDigestDomain(13) {
		t.Fatalf("version 14 opens the block digest with %q, version 13 with %q", blockDigestDomain(14), blockDigestDomain(13))
	}
}
