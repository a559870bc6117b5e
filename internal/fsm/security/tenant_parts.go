package security

import (
	"slices"
	"strings"

	"github.com/stele-io/stele/internal/fsm/core"
)

// What the security module keeps of a tenant (issue 18, docs/tenants.md),
// for the tenants module above it: the users whose names read as the
// tenant's (NAME@tenant, core/names.go), the ACLs on the tenant's
// resources or for its users, and its users' client quotas. A tenant
// cannot be created while users that read as its own exist (they were the
// default tenant's), and deleting a tenant removes all of it.

// UsersReadingAs returns the users whose names read as tenant's, sorted.
func (f *Security) UsersReadingAs(tenant string) []string {
	var out []string
	for u := range f.users {
		if t, _ := core.SplitUser(u); t == tenant {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// FirstUserReadingAs returns the first, by name, of the users whose names
// read as tenant's, or "": one pass, without sorting every user.
func (f *Security) FirstUserReadingAs(tenant string) string {
	first := ""
	for u := range f.users {
		if t, _ := core.SplitUser(u); t == tenant && (first == "" || u < first) {
			first = u
		}
	}
	return first
}

// TenantPrincipal reports whether principal is User:NAME@tenant.
func TenantPrincipal(principal, tenant string) bool {
	u, ok := strings.CutPrefix(principal, "User:")
	if !ok {
		return false
	}
	t, _ := core.SplitUser(u)
	return t == tenant
}

// TenantResource reports whether an ACL's resource (its type and its name
// or prefix) is tenant's: a topic, group or transactional id whose name
// is tenant~..., or the tenant's own CLUSTER resource.
func TenantResource(resourceType int8, name, tenant string) bool {
	switch resourceType {
	case ACLResourceTopic, ACLResourceGroup, ACLResourceTransactionalID:
		t, _ := core.SplitTenant(name)
		return t == tenant
	case ACLResourceCluster:
		return name == TenantCluster(tenant)
	}
	return false
}

// RemoveTenant removes what tenant owns in the security module: its users
// and their credentials, the ACLs on its resources and those for its
// users' principals, and its users' client quotas. It returns how many
// users, ACL entries and quota entities it removed.
func (f *Security) RemoveTenant(tenant string) (users, acls, quotas int) {
	for _, u := range f.UsersReadingAs(tenant) {
		delete(f.users, u)
		f.usersDirty[u], f.usersNew = true, true
		users++
	}
	for r, es := range f.acls {
		own := TenantResource(r.typ, r.name, tenant)
		for e := range es {
			if own || TenantPrincipal(e.principal, tenant) {
				delete(es, e)
				f.aclsDirty[r], f.aclsNew = true, true
				acls++
			}
		}
		if len(es) == 0 {
			delete(f.acls, r)
		}
	}
	for e := range f.quotas {
		if t, _ := core.SplitUser(e.User.Name); e.User.Set && !e.User.Default && t == tenant {
			delete(f.quotas, e)
			f.quotasDirty[e], f.quotasNew = true, true
			quotas++
		}
	}
	return users, acls, quotas
}
