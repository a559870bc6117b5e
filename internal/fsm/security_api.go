package fsm

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/security"
)

// The security module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	ACLBinding            = security.ACLBinding
	ACLFilter             = security.ACLFilter
	ACLs                  = security.ACLs
	AlterClientQuotas     = security.AlterClientQuotas
	AlterIPQuotas         = security.AlterIPQuotas
	AlterScramCredentials = security.AlterScramCredentials
	AuthorizeRequest      = security.AuthorizeRequest
	CreateACL             = security.CreateACL
	DeleteACLs            = security.DeleteACLs
	GenesisUser           = security.GenesisUser
	IPQuotas              = security.IPQuotas
	QuotaEntity           = security.QuotaEntity
	QuotaName             = security.QuotaName
	QuotaOp               = security.QuotaOp
	Quotas                = security.Quotas
	SignedAdmin           = security.SignedAdmin
	Users                 = security.Users
)

const (
	ACLOpAll                    = security.ACLOpAll
	ACLOpAlter                  = security.ACLOpAlter
	ACLOpAlterConfigs           = security.ACLOpAlterConfigs
	ACLOpAny                    = security.ACLOpAny
	ACLOpDelete                 = security.ACLOpDelete
	ACLOpDescribe               = security.ACLOpDescribe
	ACLOpDescribeConfigs        = security.ACLOpDescribeConfigs
	ACLOpDescribeTokens         = security.ACLOpDescribeTokens
	ACLOpRead                   = security.ACLOpRead
	ACLOpWrite                  = security.ACLOpWrite
	ACLPatternAny               = security.ACLPatternAny
	ACLPatternLiteral           = security.ACLPatternLiteral
	ACLPatternMatch             = security.ACLPatternMatch
	ACLPatternPrefixed          = security.ACLPatternPrefixed
	ACLPermissionAllow          = security.ACLPermissionAllow
	ACLPermissionAny            = security.ACLPermissionAny
	ACLPermissionDeny           = security.ACLPermissionDeny
	ACLResourceAny              = security.ACLResourceAny
	ACLResourceCluster          = security.ACLResourceCluster
	ACLResourceGroup            = security.ACLResourceGroup
	ACLResourceTopic            = security.ACLResourceTopic
	ACLResourceTransactionalID  = security.ACLResourceTransactionalID
	ACLResourceUser             = security.ACLResourceUser
	ACLWildcard                 = security.ACLWildcard
	ClusterResourceName         = security.ClusterResourceName
	QuotaConnectionCreationRate = security.QuotaConnectionCreationRate
	QuotaConsumerByteRate       = security.QuotaConsumerByteRate
	QuotaControllerMutationRate = security.QuotaControllerMutationRate
	QuotaProducerByteRate       = security.QuotaProducerByteRate
	QuotaRequestPercentage      = security.QuotaRequestPercentage
	SecurityVersion             = security.SecurityVersion
)

// EncodeCommand is security.EncodeCommand.
func EncodeCommand(c core.Command) []byte {
	return security.EncodeCommand(c)
}

// AdminGated reports whether stele.admin.signed gates c.
func AdminGated(c core.Command) bool {
	return assembled.AdminGates.Gated(c)
}

// CanonicalQuotaIP is security.CanonicalQuotaIP.
func CanonicalQuotaIP(s string) (string, error) {
	return security.CanonicalQuotaIP(s)
}

// QuotaKeys is security.QuotaKeys.
func QuotaKeys() []string {
	return security.QuotaKeys()
}

// CheckQuotaEntity is security.CheckQuotaEntity.
func CheckQuotaEntity(e security.QuotaEntity) error {
	return security.CheckQuotaEntity(e)
}
