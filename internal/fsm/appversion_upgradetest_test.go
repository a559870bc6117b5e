//go:build steleupgradetest

package fsm

import "testing"

// TestUpgradeTestVersionHashesDifferently: the test build's version 2 is a
// real change of what is hashed, so brokers applying a block under
// different versions would fork.
func TestUpgradeTestVersionHashesDifferently(t *testing.T) {
	if MaxAppVersion != 2 {
		t.Fatalf("MaxAppVersion %d in a steleupgradetest build", MaxAppVersion)
	}
	if blockDigestDomain(1) != digestDomain || blockDigestDomain(2) == blockDigestDomain(1) {
		t.Fatalf("version 2 opens the block digest with %q, version 1 with %q", blockDigestDomain(2), blockDigestDomain(1))
	}
}
