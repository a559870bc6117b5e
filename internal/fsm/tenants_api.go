package fsm

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/fsm/tenants"
)

// The tenants module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	AlterTenantQuotas = tenants.AlterTenantQuotas
	CreateTenant      = tenants.CreateTenant
	DeleteTenant      = tenants.DeleteTenant
	TenantInfo        = tenants.TenantInfo
	TenantQuota       = tenants.TenantQuota
	TenantQuotaOp     = tenants.TenantQuotaOp
	TenantsView       = tenants.View
)

const (
	QuotaGroups     = tenants.QuotaGroups
	QuotaPartitions = tenants.QuotaPartitions
	QuotaTopics     = tenants.QuotaTopics

	QuotaTenantConnections      = tenants.QuotaConnections
	QuotaTenantProducerByteRate = tenants.QuotaProducerByteRate
	QuotaTenantConsumerByteRate = tenants.QuotaConsumerByteRate
	QuotaStoredBytesKey         = tenants.QuotaStoredBytes
	TenantSep                   = core.TenantSep
)

// TenantQuotaKeys are the quota keys a tenant may have, sorted.
func TenantQuotaKeys() []string { return append([]string(nil), tenants.QuotaKeys...) }

// CheckTenantQuota is tenants.CheckQuota.
func CheckTenantQuota(key string, v int64) error { return tenants.CheckQuota(key, v) }

// TenantCluster is security.TenantCluster: tenant's own CLUSTER resource.
func TenantCluster(tenant string) string { return security.TenantCluster(tenant) }

// ValidTenantName is core.ValidTenantName.
func ValidTenantName(s string) error { return core.ValidTenantName(s) }

// Qualify is core.Qualify: tenant's topic, group id or transactional id
// local as the state names it.
func Qualify(tenant, local string) string { return core.Qualify(tenant, local) }

// QualifyUser is core.QualifyUser: tenant's user local as the state names it.
func QualifyUser(tenant, local string) string { return core.QualifyUser(tenant, local) }

// SplitUser is core.SplitUser.
func SplitUser(user string) (tenant, local string) { return core.SplitUser(user) }

// SplitTenant is core.SplitTenant.
func SplitTenant(name string) (tenant, local string) { return core.SplitTenant(name) }
