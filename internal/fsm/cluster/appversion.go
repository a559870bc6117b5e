//go:build !steleupgradetest

package cluster

import "github.com/stele-io/stele/internal/fsm/core"

// MaxAppVersion is the highest app version this binary runs (upgrade.go).
// Version 1 stamps LogAppendTime topics with the block time; version 2
// with the proposer's clock, which opens each proposal (proposals.go,
// append_clock.go). Version 3 adds the security module's commands (users,
// security/users.go), which older versions refuse as the binaries that predate
// them do; version 4 the tenants module's (tenants/tenants.go), and
// topic names with a tenant; version 5 the tenant quotas each broker
// enforces (connections, byte rates: tenants.Version5); version 6 lets a
// tenant's user sign administration inside its tenant (tenants.Version6);
// version 7 removes the power of a validator that committed evidence proves
// misbehaved (MembershipVersion, membership.go); version 8 lets a
// membership change add a broker to the directory (DirectoryVersion,
// directory.go); version 9 lets one replace a broker's key (RotationVersion,
// directory.go); version 10 lets a replica say it is caught up, so it
// leads partitions (AliveVersion, alive.go); version 11 gives records
// subjects (topics.SubjectsVersion: the stele.subject.* topic configs and
// a produce's check of each record's subject); version 12 views
// (topics.ViewsVersion: the stele.view.* topic configs, and the views
// module's copies of their sources' matching records); version 13 the
// schema registry (schemas.SchemasVersion: the schemas module's
// commands); version 14 its Protobuf schemas (schemas.ProtobufVersion)
// and subjects from a schema field (topics.SubjectFieldVersion), which
// version 13 refuses as its binaries do; version 15 share groups (shares.Version:
// the shares module's commands); version 16 acquisitions that take only
// the records a filter of key prefix or subject matches
// (shares.FilterVersion: the command FilteredAcquire), and a tenant's
// share groups counted against its groups quota
// (tenants.ShareGroupsQuotaVersion); version 17 plugins (plugins.Version:
// the plugins module's commands, and produce plugins rewriting a topic's
// batches); version 18 fetch plugins (plugins.FetchVersion: a deployment
// to the fetch hook, which version 17 refuses) and a produce plugin's
// block time and state (plugins.HostVersion: modules that import the host
// functions, which version 17 refuses). New chains
// start at MaxAppVersion (Options.GenesisAppVersion); an older chain moves
// up by an upgrade. Builds with the steleupgradetest tag add a version 19
// that hashes differently, to test upgrades (appversion_upgradetest.go).
const MaxAppVersion uint32 = 18

// blockDigestDomain opens the block digest of blocks applied under app
// version v.
func blockDigestDomain(v uint32) string { return core.DigestDomain }
