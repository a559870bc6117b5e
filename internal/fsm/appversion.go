//go:build !steleupgradetest

package fsm

// MaxAppVersion is the highest app version this binary runs (upgrade.go).
// Version 1 is the only one there is; builds with the steleupgradetest tag
// add a version 2 that hashes differently, to test upgrades
// (appversion_upgradetest.go).
const MaxAppVersion uint32 = 1

// blockDigestDomain opens the block digest of blocks applied under app
// version v.
func blockDigestDomain(v uint32) string { return digestDomain }
