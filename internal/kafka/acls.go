package kafka

// CreateAcls: v0-3
// DescribeAcls: v0-3
// DeleteAcls: v0-3
// Behavior:
//  * ACLs are replicated state (fsm/security's acls.go): a creation or deletion is
//    ordered like any command and answered once committed, so every broker
//    authorizes alike from then on.
//  * CreateAcls and DeleteAcls need ALTER on the cluster, DescribeAcls
//    DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED otherwise, as Kafka).
//  * CreateAcls checks each binding with Kafka's rules and words
//    (INVALID_REQUEST: an unknown or ANY type, pattern, operation or
//    permission, an empty name, a principal without "Type:", a cluster
//    resource not named kafka-cluster); each is answered on its own.
//  * DescribeAcls and DeleteAcls take Kafka's filters: ANY matches every
//    value, MATCH the patterns that apply to the name (literal, the
//    literal "*", prefixed ones it starts with), a null string any. v0
//    requests and filters name literal patterns. DeleteAcls matches each
//    filter against the committed ACLs and deletes exactly those bindings,
//    answering them per filter; a binding created by another client
//    between the match and the commit is not deleted.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func aclRoutes() []route {
	return []route{
		{key: 29, min: 0, max: 3, handle: handleDescribeAcls},
		{key: 30, min: 0, max: 3, handle: handleCreateAcls},
		{key: 31, min: 0, max: 3, handle: handleDeleteAcls},
	}
}

func (c *conn) clusterAllowed(op kmsg.ACLOperation) bool {
	return c.authorize(op, kmsg.ACLResourceTypeCluster, fsm.ClusterResourceName)
}

// adminAllowed reports whether c may op the cluster in the APIs that
// administer a tenant (creating topics, the ACL and the user APIs): op on
// the cluster, or, for a tenant's connection, on its tenant's own CLUSTER
// resource (fsm.TenantCluster, kafka-cluster as its clients name it),
// whose ACLs make the tenant's administrators (docs/tenants.md). No ACL
// found allows nothing there; every other API that checks the cluster
// (quotas, configs, log dirs, features) does not ask it.
func (c *conn) adminAllowed(op kmsg.ACLOperation) bool {
	if t := c.tenantNow(); t != "" && c.s.b.ACLs().Authorize(fsm.AuthorizeRequest{
		Principal: c.principalNow(), Host: c.host, Operation: int8(op),
		ResourceType: int8(kmsg.ACLResourceTypeCluster), ResourceName: fsm.TenantCluster(t),
	}) {
		return true
	}
	return c.clusterAllowed(op)
}

// mayCreateTopic reports whether c may create the topic: CREATE on the
// cluster (or its tenant's) or on the topic, as Kafka checks both.
func (c *conn) mayCreateTopic(name string) bool {
	return c.adminAllowed(kmsg.ACLOperationCreate) || c.authorize(kmsg.ACLOperationCreate, kmsg.ACLResourceTypeTopic, name)
}

// mayWriteSomeTopic reports whether c may write to some topic, which lets
// an idempotent producer have a producer id without IDEMPOTENT_WRITE on
// the cluster (Kafka's authorizeByResourceType, KIP-679).
func (c *conn) mayWriteSomeTopic() bool {
	p := c.principalNow()
	return c.s.b.ACLs().AuthorizeAnyOfType(fsm.AuthorizeRequest{
		Principal: p, Host: c.host, Operation: fsm.ACLOpWrite, ResourceType: fsm.ACLResourceTopic,
		SuperUser: c.s.superUser(p), AllowIfNoACL: !c.s.opts.DenyIfNoACL,
	})
}

// patternOf is a request's pattern type: literal before v1.
func patternOf(version int16, p kmsg.ACLResourcePatternType) int8 {
	if version == 0 {
		return fsm.ACLPatternLiteral
	}
	return int8(p)
}

func handleCreateAcls(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.CreateACLsRequest)
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	allowed := c.adminAllowed(kmsg.ACLOperationAlter)
	var cmds []fsm.Command
	var slots []int
	for _, cr := range r.Creations {
		res := kmsg.NewCreateACLsResponseResult()
		b := fsm.ACLBinding{ResourceType: int8(cr.ResourceType), ResourceName: cr.ResourceName, PatternType: patternOf(r.Version, cr.ResourcePatternType),
			Principal: cr.Principal, Host: cr.Host, Operation: int8(cr.Operation), Permission: int8(cr.PermissionType)}
		var p problem
		switch {
		case !allowed:
			p = newProblem(kerr.ClusterAuthorizationFailed, "")
		case c.s.b.Upgrade().Version < fsm.SecurityVersion:
			p = newProblem(kerr.UnsupportedVersion, "ACLs need app version 3 (stele cluster upgrade)")
		default:
			p = checked(fsm.CreateACL{ACL: b})
		}
		res.ErrorCode, res.ErrorMessage = p.code, p.message()
		resp.Results = append(resp.Results, res)
		if !p.failed() {
			cmds = append(cmds, fsm.CreateACL{ACL: b})
			slots = append(slots, len(resp.Results)-1)
		}
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	return func() kmsg.Response {
		for i, o := range c.submit(0, cmds...) {
			p := fromOutcome(o)
			resp.Results[slots[i]].ErrorCode, resp.Results[slots[i]].ErrorMessage = p.code, p.message()
		}
		return resp
	}, nil
}

// filterOf turns a request's filter into the state machine's, or says why
// it cannot select anything (Kafka answers such a filter INVALID_REQUEST).
func filterOf(version int16, rt kmsg.ACLResourceType, name *string, pt kmsg.ACLResourcePatternType, principal, host *string,
	op kmsg.ACLOperation, perm kmsg.ACLPermissionType) (fsm.ACLFilter, problem) {
	f := fsm.ACLFilter{ResourceType: int8(rt), ResourceName: name, PatternType: patternOf(version, pt), Principal: principal, Host: host,
		Operation: int8(op), Permission: int8(perm)}
	switch {
	case f.ResourceType < fsm.ACLResourceAny || f.ResourceType > fsm.ACLResourceUser:
		return f, newProblem(kerr.InvalidRequest, "Invalid resource type in filter")
	case f.PatternType < fsm.ACLPatternAny || f.PatternType > fsm.ACLPatternPrefixed:
		return f, newProblem(kerr.InvalidRequest, "Invalid pattern type in filter")
	case f.Operation < fsm.ACLOpAny || f.Operation > fsm.ACLOpDescribeTokens:
		return f, newProblem(kerr.InvalidRequest, "Invalid operation in filter")
	case f.Permission < fsm.ACLPermissionAny || f.Permission > fsm.ACLPermissionAllow:
		return f, newProblem(kerr.InvalidRequest, "Invalid permission type in filter")
	}
	return f, problem{}
}

func handleDescribeAcls(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeACLsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeACLsResponse)
	if !c.adminAllowed(kmsg.ACLOperationDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return done(resp), nil
	}
	f, p := filterOf(r.Version, r.ResourceType, r.ResourceName, r.ResourcePatternType, r.Principal, r.Host, r.Operation, r.PermissionType)
	if p.failed() {
		resp.ErrorCode, resp.ErrorMessage = p.code, p.message()
		return done(resp), nil
	}
	var cur *kmsg.DescribeACLsResponseResource
	hide := c.hidesTenants()
	for _, b := range c.s.b.ACLs().Match(f) {
		if hide && c.tenantBinding(b) {
			continue // a tenant's (tenants.go)
		}
		if cur == nil || int8(cur.ResourceType) != b.ResourceType || int8(cur.ResourcePatternType) != b.PatternType || cur.ResourceName != b.ResourceName {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName, res.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.ResourceName, kmsg.ACLResourcePatternType(b.PatternType)
			resp.Resources = append(resp.Resources, res)
			cur = &resp.Resources[len(resp.Resources)-1]
		}
		a := kmsg.NewDescribeACLsResponseResourceACL()
		a.Principal, a.Host, a.Operation, a.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
		cur.ACLs = append(cur.ACLs, a)
	}
	return done(resp), nil
}

func handleDeleteAcls(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DeleteACLsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	allowed := c.adminAllowed(kmsg.ACLOperationAlter)
	acls := c.s.b.ACLs()
	hide := c.hidesTenants()
	var all []fsm.ACLBinding
	seen := map[fsm.ACLBinding]bool{}
	for _, rf := range r.Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		f, p := filterOf(r.Version, rf.ResourceType, rf.ResourceName, rf.ResourcePatternType, rf.Principal, rf.Host, rf.Operation, rf.PermissionType)
		switch {
		case !allowed:
			p = newProblem(kerr.ClusterAuthorizationFailed, "")
		case !p.failed() && c.s.b.Upgrade().Version < fsm.SecurityVersion:
			p = newProblem(kerr.UnsupportedVersion, "ACLs need app version 3 (stele cluster upgrade)")
		}
		res.ErrorCode, res.ErrorMessage = p.code, p.message()
		if !p.failed() {
			for _, b := range acls.Match(f) {
				if hide && c.tenantBinding(b) {
					continue // a tenant's: never matched (tenants.go)
				}
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.ResourceName, kmsg.ACLResourcePatternType(b.PatternType)
				m.Principal, m.Host, m.Operation, m.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
				res.MatchingACLs = append(res.MatchingACLs, m)
				if !seen[b] {
					seen[b] = true
					all = append(all, b)
				}
			}
		}
		resp.Results = append(resp.Results, res)
	}
	if len(all) == 0 {
		return done(resp), nil
	}
	return func() kmsg.Response {
		o := c.submit(0, fsm.DeleteACLs{ACLs: all})[0]
		if p := fromOutcome(o); p.failed() {
			for i := range resp.Results {
				if resp.Results[i].ErrorCode == 0 {
					resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = p.code, p.message()
					resp.Results[i].MatchingACLs = nil
				}
			}
		}
		return resp
	}, nil
}
