//go:build steleupgradetest

package cluster

import "github.com/stele-io/stele/internal/fsm/core"

// Test builds (-tags steleupgradetest) run app version 6, which differs
// from version 5 in what it hashes: its block digest opens with another
// domain. A broker applying a block under version 5 and one applying it
// under version 6 would fork, which is what the upgrade tests show never
// happens (test/cluster's TestUpgradeUnderLoad). Never ship such a build.
const MaxAppVersion uint32 = 6

// blockDigestDomain opens the block digest of blocks applied under app
// version v.
func blockDigestDomain(v uint32) string {
	if v >= 6 {
		return core.DigestDomain + "+app6-upgradetest"
	}
	return core.DigestDomain
}
