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
//  * There is no authorizer yet (ACLs are issue 17), so every principal
//    may perform every supported operation, as Kafka answers without
//    authorizer.class.name.
//  * Not asked for, the field is -2147483648 (INT32_MIN), as in Kafka.

import "github.com/twmb/franz-go/pkg/kmsg"

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
// resource (rt, name). Without an authorizer everything is allowed.
func (c *conn) allowed(kmsg.ACLResourceType, string, kmsg.ACLOperation) bool { return true }
