package fsm

import (
	"crypto/ed25519"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// The cluster module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	AlterBrokerConfigs = cluster.AlterBrokerConfigs
	ChangeMembership   = cluster.ChangeMembership
	ReplicaAlive       = cluster.ReplicaAlive
	MembershipChange   = cluster.MembershipChange
	MembershipStatus   = cluster.MembershipStatus
	MembershipVote     = cluster.MembershipVote
	AppendTime         = cluster.AppendTime
	BrokerConfigs      = cluster.BrokerConfigs
	ScheduleUpgrade    = cluster.ScheduleUpgrade
	UpgradePlan        = cluster.UpgradePlan
	UpgradeStatus      = cluster.UpgradeStatus
	ValidatorRecord    = cluster.ValidatorRecord
	BrokerEntry        = cluster.BrokerEntry
	DirectoryBroker    = cluster.DirectoryBroker
	Members            = cluster.Members
)

const (
	MaxAppVersion                      = cluster.MaxAppVersion
	MembershipVersion                  = cluster.MembershipVersion
	DirectoryVersion                   = cluster.DirectoryVersion
	RotationVersion                    = cluster.RotationVersion
	AliveVersion                       = cluster.AliveVersion
	MaxAliveLag                        = cluster.MaxAliveLag
	ReasonRotatedOut                   = cluster.ReasonRotatedOut
	ReasonRotatedIn                    = cluster.ReasonRotatedIn
	ReasonRemoved                      = cluster.ReasonRemoved
	ReasonAdded                        = cluster.ReasonAdded
	MaxAppendTimeAheadMs               = cluster.MaxAppendTimeAheadMs
	MaxConnectionCreationRateConfig    = cluster.MaxConnectionCreationRateConfig
	MaxConnectionsConfig               = cluster.MaxConnectionsConfig
	MaxConnectionsPerIPConfig          = cluster.MaxConnectionsPerIPConfig
	MaxConnectionsPerIPOverridesConfig = cluster.MaxConnectionsPerIPOverridesConfig
)

// The cluster module's errors (the same values).
var (
	ErrUpgradeRequired = cluster.ErrUpgradeRequired
)

// ApplyBrokerConfigChanges is cluster.ApplyBrokerConfigChanges.
func ApplyBrokerConfigChanges(current *cluster.BrokerConfigs, c cluster.AlterBrokerConfigs) (map[string]string, error) {
	return cluster.ApplyBrokerConfigChanges(current, c)
}

// BrokerConfigDefs is cluster.BrokerConfigDefs.
func BrokerConfigDefs() []topics.ConfigDef { return cluster.BrokerConfigDefs() }

// LookupBrokerConfig is cluster.LookupBrokerConfig.
func LookupBrokerConfig(name string) (topics.ConfigDef, bool) {
	return cluster.LookupBrokerConfig(name)
}

// ParseConnectionOverrides is cluster.ParseConnectionOverrides.
func ParseConnectionOverrides(s string) (map[string]int, error) {
	return cluster.ParseConnectionOverrides(s)
}

// SignUpgrade is cluster.SignUpgrade.
func SignUpgrade(chainID string, p cluster.UpgradePlan, addr [20]byte, key ed25519.PrivateKey) trust.CertSig {
	return cluster.SignUpgrade(chainID, p, addr, key)
}

// SignAlive is cluster.SignAlive.
func SignAlive(chainID string, nodeID int32, height int64, key ed25519.PrivateKey) cluster.ReplicaAlive {
	return cluster.SignAlive(chainID, nodeID, height, key)
}

// MembershipStatement is cluster.MembershipStatement.
func MembershipStatement(chainID string, ch cluster.MembershipChange) []byte {
	return cluster.MembershipStatement(chainID, ch)
}

// SignMembership is cluster.SignMembership.
func SignMembership(chainID string, ch cluster.MembershipChange, addr [20]byte, key ed25519.PrivateKey) trust.CertSig {
	return cluster.SignMembership(chainID, ch, addr, key)
}

// UpgradeStatement is cluster.UpgradeStatement.
func UpgradeStatement(chainID string, p cluster.UpgradePlan) []byte {
	return cluster.UpgradeStatement(chainID, p)
}

// ValidatorAddress is cluster.ValidatorAddress: CometBFT's address of an
// ed25519 key.
func ValidatorAddress(pub []byte) [20]byte { return cluster.ValidatorAddress(pub) }
