//go:build !steleupgradetest

package fsm

// MaxAppVersion is the highest app version this binary runs (upgrade.go).
// Version 1 stamps LogAppendTime topics with the block time; version 2
// with the proposer's clock, which opens each proposal (proposals.go,
// append_clock.go). New chains start at MaxAppVersion
// (Options.GenesisAppVersion); a chain started at 1 moves to 2 by an
// upgrade. Builds with the steleupgradetest tag add a version 3 that
// hashes differently, to test upgrades (appversion_upgradetest.go).
const MaxAppVersion uint32 = 2

// blockDigestDomain opens the block digest of blocks applied under app
// version v.
func blockDigestDomain(v uint32) string { return digestDomain }
