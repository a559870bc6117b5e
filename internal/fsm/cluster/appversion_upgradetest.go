//go:build steleupgradetest

package cluster

import "github.com/stele-io/stele/internal/fsm/core"

// Test builds (-tags steleupgradetest) run app version 17, which differs
// from version 16 in what it hashes: its block digest opens with another
// domain. A broker applying a block under version 16 and one applying it
// under version 17 would fork, which is what the upgrade tests show never
// happens (test/cluster's TestUpgradeUnderLoad). Never ship such a build.
const MaxAppVersion uint32 = 17

// blockDigestDomain opens the block digest of blocks applied under app
// version v.
func blockDigestDomain(v uint32) string {
	if v >= 17 {
		return core.DigestDomain + "+app17-upgradetest"
	}
	return core.DigestDomain
}
