//go:build steleupgradetest

package cluster

import "github.com/stele-io/stele/internal/fsm/core"

// Test builds (-tags steleupgradetest) run app version 19, which differs
// from version 18 in what it hashes: its block digest opens with another
// domain. A broker applying a block under version 18 and one applying it
// under version 19 would fork, which is what the upgrade tests show never
// happens (test/cluster's TestUpgradeUnderLoad). Never ship such a build.
const MaxAppVersion uint32 = 19

// blockDigestDomain opens the block digest of blocks applied under app
// version v.
func blockDigestDomain(v uint32) string {
	if v >= 19 {
		return core.DigestDomain + "+app19-upgradetest"
	}
	return core.DigestDomain
}
