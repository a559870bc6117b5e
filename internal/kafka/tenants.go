package kafka

// Tenants at the Kafka front-end (issue 18, docs/tenants.md). A connection
// is a tenant's when its principal is one of the tenant's users
// (tenant_lens.go); every other connection is the default tenant's. A
// tenant's names (acme~orders, acme~billing, alice@acme:
// fsm/core/names.go) are not the default tenant's, so for a principal of
// the default tenant that is not a super user:
//   - authorize (authorized_ops.go), the one place every API's
//     authorization goes through, denies every operation on a topic, group
//     or transactional id whose name reads as an existing tenant's,
//     whatever the ACLs say: wildcards and prefixes of the default
//     tenant's ACLs never reach into a tenant. So Metadata, ListGroups,
//     DescribeGroups, ListTransactions, DescribeTransactions,
//     DescribeProducers, OffsetFetch and the rest answer as for a resource
//     the principal may not see, and a group id or transactional id that
//     reads as a tenant's is refused (GROUP_AUTHORIZATION_FAILED,
//     TRANSACTIONAL_ID_AUTHORIZATION_FAILED) instead of reaching the
//     tenant's;
//   - the listings that need DESCRIBE on the cluster leave a tenant's
//     entries out: ListGroups, DescribeLogDirs, DescribeAcls (a binding
//     on a tenant's resource or for a tenant's user),
//     DescribeUserScramCredentials and DescribeClientQuotas (a tenant's
//     users); DeleteAcls never matches a tenant's bindings.
// Super users (super.users, User:admin) administer the whole cluster,
// tenants included, and see everything.
//
// A name that reads as a tenant that does not exist is the default
// tenant's (a cluster without tenants is unchanged). So a client can tell
// that a tenant exists by being refused a group id named after it; it
// learns nothing else of it (docs/tenants.md).

import (
	"strings"

	"github.com/stele-io/stele/internal/fsm"
)

// tenantOwned reports whether name, a topic, group id or transactional id
// as the state has it, is an existing tenant's.
func (c *conn) tenantOwned(name string) bool {
	t, _ := fsm.SplitTenant(name)
	if t == "" {
		return false
	}
	_, ok := c.s.b.Tenants().Get(t)
	return ok
}

// tenantUser reports whether user is an existing tenant's (NAME@tenant).
func (c *conn) tenantUser(user string) bool {
	t, _ := fsm.SplitUser(user)
	if t == "" {
		return false
	}
	_, ok := c.s.b.Tenants().Get(t)
	return ok
}

// hidesTenants reports whether the listings leave some tenant's entries
// out for c: for every principal but the super users while tenants exist,
// and always for a tenant's connection (tenant_lens.go).
func (c *conn) hidesTenants() bool {
	return c.tenantNow() != "" || c.s.b.Tenants().Len() > 0 && !c.s.superUser(c.principalNow())
}

// foreign reports whether a topic, group id or transactional id is not
// c's to see in a listing: another tenant's, for a tenant's connection; an
// existing tenant's, for the default tenant's.
func (c *conn) foreign(name string) bool {
	if t := c.tenantNow(); t != "" {
		owner, _ := fsm.SplitTenant(name)
		return owner != t
	}
	return c.tenantOwned(name)
}

// foreignUser is foreign for a user name (NAME@tenant).
func (c *conn) foreignUser(user string) bool {
	if t := c.tenantNow(); t != "" {
		owner, _ := fsm.SplitUser(user)
		return owner != t
	}
	return c.tenantUser(user)
}

// tenantBinding reports whether an ACL binding is not c's to see: on a
// resource or for a user foreign to c.
// A tenant's own CLUSTER resource (acme~kafka-cluster) is the tenant's,
// Kafka's kafka-cluster the default tenant's; a binding for every user
// (User:*) on a resource c may see is c's to see.
func (c *conn) tenantBinding(b fsm.ACLBinding) bool {
	switch b.ResourceType {
	case fsm.ACLResourceTopic, fsm.ACLResourceGroup, fsm.ACLResourceTransactionalID, fsm.ACLResourceCluster:
		if c.foreign(b.ResourceName) {
			return true
		}
	default:
		if c.tenantNow() != "" {
			return true
		}
	}
	u, ok := strings.CutPrefix(b.Principal, "User:")
	switch {
	case !ok:
		return c.tenantNow() != ""
	case u == "*":
		return false
	}
	return c.foreignUser(u)
}
