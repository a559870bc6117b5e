//go:build steleupgradetest

package cluster

import (
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
)

// TestUpgradeTestVersionHashesDifferently: the test build's version 13 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 13 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(12) != core.DigestDomain || blockDigestDomain(13) == blockDigestDomain(12) {
		t.Fatalf("version 13 opens the block digest with %q, version 12 with %q", blockDigestDomain(13), blockDigestDomain(12))
	}
}
