package fsm

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/shares"
	"github.com/stele-io/stele/internal/fsm/tenants"
)

// The share groups module's names the broker uses, under the package it
// imports (core_api.go says why).

type (
	ShareGroupHeartbeat  = shares.ShareGroupHeartbeat
	ShareAcquire         = shares.ShareAcquire
	SharePart            = shares.SharePart
	ShareAckBatch        = shares.AckBatch
	SetShareGroupConfigs = shares.SetShareGroupConfigs
	DeleteShareGroup     = shares.DeleteShareGroup
	AlterShareOffsets    = shares.AlterShareOffsets
	ShareOffset          = shares.ShareOffset
	DeleteShareOffsets   = shares.DeleteShareOffsets
	ShareConfigEntry     = shares.ConfigEntry
	ShareFilter          = shares.Filter
	FilteredShareAcquire = shares.FilteredAcquire
	ShareGroupsView      = shares.View
	ShareGroupView       = shares.GroupView
	ShareMemberView      = shares.MemberView
	SharePartView        = shares.PartView
	ShareResult          = core.ShareResult
	SharePartResult      = core.SharePartResult
)

// ShareGroupsVersion is the app version from which share groups exist.
const ShareGroupsVersion = shares.Version

// ShareFilterVersion is the app version from which an acquisition takes a
// filter.
const ShareFilterVersion = shares.FilterVersion

// ShareGroupsQuotaVersion is the app version from which a tenant's share
// groups count against its groups quota.
const ShareGroupsQuotaVersion = tenants.ShareGroupsQuotaVersion

// Share groups' defaults (Kafka's group.share.* broker configs).
const (
	ShareHeartbeatIntervalMs = shares.DefaultHeartbeatIntervalMs
	ShareRecordLockMs        = shares.DefaultRecordLockMs
)

// ShareBrokerDefaults are Kafka's group.share.* broker configs, fixed.
func ShareBrokerDefaults() []shares.BrokerDefault { return shares.BrokerDefaults() }

// ShareGroupConfigNames are the share.* group configs, sorted.
func ShareGroupConfigNames() []string { return shares.ConfigNames() }

// ShareGroupConfigDefault is a share group config's default.
func ShareGroupConfigDefault(name string) (string, bool) { return shares.ConfigDefault(name) }
