package cli

// A tenant's administrator signs (docs/tenants.md, "Signed
// administration"): when --principal is a tenant's user (root@acme), the
// names a signed command takes are the tenant's, as that user's Kafka
// clients name them: topic orders is acme~orders in the state, group
// billing acme~billing, user bob bob@acme, principal User:bob
// User:bob@acme, the CLUSTER resource kafka-cluster the tenant's own
// acme~kafka-cluster, and an ACL on every topic (*) one on the prefix
// acme~. So the command signed is the one the tenant's front-end would
// have ordered for the same request over Kafka. A name that is already
// the tenant's (acme~orders, bob@acme: what a listing made with a cluster
// administrator's login answers) is left as it is.

import (
	"strings"

	"github.com/stele-io/stele/internal/fsm"
)

// signerTenant is the tenant principal reads as a user of ("" for the
// default tenant's).
func signerTenant(principal string) string {
	t, _ := fsm.SplitUser(principal)
	return t
}

// asTenant returns c with the names it takes qualified as tenant's
// (c itself for the default tenant, or a command that names nothing of a
// tenant's: a broker's configs, an IP's quotas, tenants).
func asTenant(tenant string, c fsm.Command) fsm.Command {
	if tenant == "" {
		return c
	}
	name := func(n string) string {
		if t, _ := fsm.SplitTenant(n); t == tenant {
			return n
		}
		return fsm.Qualify(tenant, n)
	}
	user := func(u string) string {
		if t, _ := fsm.SplitUser(u); t == tenant {
			return u
		}
		return fsm.QualifyUser(tenant, u)
	}
	acl := func(b fsm.ACLBinding) fsm.ACLBinding {
		switch b.ResourceType {
		case fsm.ACLResourceTopic, fsm.ACLResourceGroup, fsm.ACLResourceTransactionalID:
			if b.ResourceName == fsm.ACLWildcard {
				b.ResourceName, b.PatternType = tenant+string(fsm.TenantSep), fsm.ACLPatternPrefixed
			} else {
				b.ResourceName = name(b.ResourceName)
			}
		case fsm.ACLResourceCluster:
			b.ResourceName = name(b.ResourceName)
		}
		if u, ok := strings.CutPrefix(b.Principal, "User:"); ok && u != fsm.ACLWildcard {
			b.Principal = "User:" + user(u)
		}
		return b
	}
	switch c := c.(type) {
	case fsm.DeleteTopic:
		c.Name = name(c.Name)
		return c
	case fsm.DeleteRecords:
		c.Topic = name(c.Topic)
		return c
	case fsm.AlterConfigs:
		c.Topic = name(c.Topic)
		return c
	case fsm.DeleteGroup:
		c.Group = name(c.Group)
		return c
	case fsm.OffsetDelete:
		c.Group, c.Topic = name(c.Group), name(c.Topic)
		return c
	case fsm.OffsetCommit:
		c.Group, c.Topic = name(c.Group), name(c.Topic)
		return c
	case fsm.AlterScramCredentials:
		c.User = user(c.User)
		return c
	case fsm.CreateACL:
		c.ACL = acl(c.ACL)
		return c
	case fsm.DeleteACLs:
		bs := make([]fsm.ACLBinding, len(c.ACLs))
		for i, b := range c.ACLs {
			bs[i] = acl(b)
		}
		c.ACLs = bs
		return c
	case fsm.AlterClientQuotas:
		if c.Entity.User.Set && !c.Entity.User.Default {
			c.Entity.User.Name = user(c.Entity.User.Name)
		}
		return c
	case fsm.DeployPlugin:
		c.Name, c.Topic = name(c.Name), name(c.Topic)
		return c
	case fsm.PluginChunk:
		c.Name, c.Topic = name(c.Name), name(c.Topic)
		return c
	case fsm.RemovePlugin:
		c.Name, c.Topic = name(c.Name), name(c.Topic)
		return c
	}
	return c
}
