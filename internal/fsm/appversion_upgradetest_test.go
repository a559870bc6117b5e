//go:build steleupgradetest

package fsm

import "testing"

// TestUpgradeTestVersionHashesDifferently: the test build's version 3 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 3 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(2) != digestDomain || blockDigestDomain(3) == blockDigestDomain(2) {
		t.Fatalf("version 3 opens the block digest with %q, version 2 with %q", blockDigestDomain(3), blockDigestDomain(2))
	}
}
