package core

import (
	"fmt"
	"strings"
)

// Tenants' names in the state machine (issue 18, docs/tenants.md). The
// tenant is part of every name a tenant owns, so no front-end's view of
// who is asking decides which tenant a name belongs to:
//
//   - a topic, group id or transactional id of tenant acme is acme~NAME
//     in the state ("~" is not a character of Kafka's topic names, so a
//     tenant's topic can never be the default tenant's; a topic's
//     directory is logs/acme~NAME-<partition>);
//   - a user of tenant acme is NAME@acme, and so is its principal
//     (User:NAME@acme) and its producer key.
//
// A name without the separator, or whose part before it is not a valid
// tenant name, is the default tenant's: a cluster without tenants keeps
// every name it had. A group id, transactional id or user of the default
// tenant that reads as a tenant's (billing~x, alice@billing) stops a
// tenant of that name from being created while it exists (package
// tenants), so a name never changes hands.

// TenantSep separates a tenant from a topic, group id or transactional id.
const TenantSep = '~'

// TenantUserSep separates a user from its tenant.
const TenantUserSep = '@'

// MaxTenantName bounds a tenant's name.
const MaxTenantName = 63

// ValidTenantName says why s cannot name a tenant: 1 to 63 lowercase
// ASCII letters, digits and '-', starting with a letter or digit (a DNS
// label's rule, so a tenant's name fits in host names, paths and metric
// labels).
func ValidTenantName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("a tenant name cannot be empty")
	case len(s) > MaxTenantName:
		return fmt.Errorf("tenant name %.70q is longer than %d characters", s, MaxTenantName)
	case s[0] == '-':
		return fmt.Errorf("tenant name %q must start with a letter or a digit", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("tenant name %q may hold only lowercase ASCII letters, digits and '-'", s)
		}
	}
	return nil
}

// Qualify returns tenant's name for local in the state: local itself for
// the default tenant (""), tenant~local otherwise.
func Qualify(tenant, local string) string {
	if tenant == "" {
		return local
	}
	return tenant + string(TenantSep) + local
}

// SplitTenant returns the tenant a topic, group id or transactional id
// names and its name within it: ("", name) for the default tenant's.
func SplitTenant(name string) (tenant, local string) {
	t, rest, ok := strings.Cut(name, string(TenantSep))
	if !ok || ValidTenantName(t) != nil {
		return "", name
	}
	return t, rest
}

// QualifyUser returns tenant's user local as the state names it:
// local@tenant (local for the default tenant).
func QualifyUser(tenant, local string) string {
	if tenant == "" {
		return local
	}
	return local + string(TenantUserSep) + tenant
}

// SplitUser returns the tenant a user name reads as belonging to (its
// part after the last '@', when that is a valid tenant name) and the
// user's name within it; ("", user) otherwise.
func SplitUser(user string) (tenant, local string) {
	i := strings.LastIndexByte(user, TenantUserSep)
	if i <= 0 || ValidTenantName(user[i+1:]) != nil {
		return "", user
	}
	return user[i+1:], user[:i]
}
