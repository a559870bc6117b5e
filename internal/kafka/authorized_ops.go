package kafka

// Authorized operations (KIP-430), answered by Metadata v8+ (topics; the
// cluster in v8-10 only), DescribeCluster, DescribeGroups v3+ and
// ConsumerGroupDescribe when the request asks for them.
// Behavior:
//  * The answer is the bit field Kafka's AuthHelper.authorizedOperations
//    builds: bit n set for each AclOperation code n the principal may
//    perform on the resource, among the operations Kafka supports for its
//    type (AclEntry.supportedOperations):
//      topic   READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
//              DESCRIBE_CONFIGS, ALTER_CONFIGS        = 3576
//      group   READ, DELETE, DESCRIBE                 = 328
//      cluster CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
//              ALTER_CONFIGS, IDEMPOTENT_WRITE         = 8096
//  * Each operation is decided by the ACLs (acls.go, fsm/security's acls_view.go):
//    the bits are what the principal, from its address, may do.
//  * Not asked for, the field is -2147483648 (INT32_MIN), as in Kafka.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// authorizedOpsUnknown is Kafka's answer when authorized operations were
// not requested.
const authorizedOpsUnknown = -2147483648

// supportedOps are the operations Kafka supports per resource type
// (AclEntry.supportedOperations).
var supportedOps = map[kmsg.ACLResourceType][]kmsg.ACLOperation{
	kmsg.ACLResourceTypeTopic: {
		kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate, kmsg.ACLOperationDelete,
		kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs,
	},
	kmsg.ACLResourceTypeGroup: {kmsg.ACLOperationRead, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe},
	kmsg.ACLResourceTypeCluster: {
		kmsg.ACLOperationCreate, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe, kmsg.ACLOperationClusterAction,
		kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationIdempotentWrite,
	},
}

// clusterResourceName is the name of Kafka's one cluster resource.
const clusterResourceName = "kafka-cluster"

// authorizedOps returns the bit field of the operations the principal of c
// may perform on the resource (rt, name). It is the one place that decides
// them: an authorizer (issue 17) plugs in at allowed.
func (c *conn) authorizedOps(rt kmsg.ACLResourceType, name string) int32 {
	var bits int32
	for _, op := range supportedOps[rt] {
		if c.allowed(rt, name, op) {
			bits |= 1 << op
		}
	}
	return bits
}

// allowed reports whether the principal of c may perform op on the
// resource (rt, name).
func (c *conn) allowed(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) bool {
	return c.authorize(op, rt, name)
}

// authorize reports whether the principal of c, from its address, may
// perform op on the resource (rt, name), by the committed ACLs, super.users
// and allow.everyone.if.no.acl.found (acls.go), never a tenant's topic,
// group or transactional id but to a super user (tenants.go). It is the
// one place every API's authorization goes through.
func (c *conn) authorize(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	p := c.principalNow()
	if t := c.tenantNow(); t != "" {
		// A tenant's connection: its own tenant's names only, and on the
		// cluster only what creating its topics and idempotent producing
		// need (tenant_lens.go).
		switch rt {
		case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId:
			if owner, _ := fsm.SplitTenant(name); owner != t {
				return false
			}
		case kmsg.ACLResourceTypeCluster:
			if op != kmsg.ACLOperationCreate && op != kmsg.ACLOperationIdempotentWrite {
				return false
			}
		default:
			return false
		}
	} else {
		switch rt {
		case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId:
			if c.tenantOwned(name) && !c.s.superUser(p) {
				return false // a tenant's, never the default tenant's (tenants.go)
			}
		}
	}
	return c.s.b.ACLs().Authorize(fsm.AuthorizeRequest{
		Principal: p, Host: c.host, Operation: int8(op), ResourceType: int8(rt), ResourceName: name,
		SuperUser: c.s.superUser(p), AllowIfNoACL: !c.s.opts.DenyIfNoACL,
	})
}

// principalNow is c's principal (the reader sets it as the client
// authenticates; handlers and the listing of connections read it).
func (c *conn) principalNow() string { return *c.principal.Load() }

func (c *conn) setPrincipal(p string) {
	t := c.tenantOfPrincipal(p)
	c.tenant.Store(&t)
	c.principal.Store(&p)
}
