package security

import (
	"slices"
	"strings"
)

// ACLs is the committed ACLs, as readers see them: the bindings, matched
// against filters (DescribeAcls, DeleteAcls) and used to authorize. Do not
// modify it: a new one is published at each Commit that changed them.
type ACLs struct {
	byResource map[aclResource][]aclEntry
}

// ACLFilter selects bindings as Kafka's AclBindingFilter does: ANY
// resource type, pattern type, operation and permission match all; MATCH
// matches the patterns that apply to the name (the literal name, the
// literal "*" and every prefixed pattern the name starts with); nil
// strings match any.
type ACLFilter struct {
	ResourceType int8
	ResourceName *string
	PatternType  int8
	Principal    *string
	Host         *string
	Operation    int8
	Permission   int8
}

// Matches reports whether b is selected by f.
func (f ACLFilter) Matches(b ACLBinding) bool {
	if f.ResourceType != ACLResourceAny && f.ResourceType != b.ResourceType {
		return false
	}
	if f.PatternType != ACLPatternAny && f.PatternType != ACLPatternMatch && f.PatternType != b.PatternType {
		return false
	}
	if f.ResourceName != nil {
		name := *f.ResourceName
		switch {
		case f.PatternType == ACLPatternAny || f.PatternType == b.PatternType:
			if name != b.ResourceName {
				return false
			}
		case b.PatternType == ACLPatternLiteral:
			if name != b.ResourceName && b.ResourceName != ACLWildcard {
				return false
			}
		case b.PatternType == ACLPatternPrefixed:
			if !strings.HasPrefix(name, b.ResourceName) {
				return false
			}
		}
	}
	return (f.Principal == nil || *f.Principal == b.Principal) && (f.Host == nil || *f.Host == b.Host) &&
		(f.Operation == ACLOpAny || f.Operation == b.Operation) && (f.Permission == ACLPermissionAny || f.Permission == b.Permission)
}

// Match returns the bindings f selects, in a fixed order (by resource
// type, pattern type, name, then entry).
func (a *ACLs) Match(f ACLFilter) []ACLBinding {
	if a == nil {
		return nil
	}
	var out []ACLBinding
	for r, es := range a.byResource {
		for _, e := range es {
			if b := joinACL(r, e); f.Matches(b) {
				out = append(out, b)
			}
		}
	}
	slices.SortFunc(out, CompareACLs)
	return out
}

// CompareACLs orders bindings by resource type, pattern type, name,
// principal, host, operation and permission.
func CompareACLs(a, b ACLBinding) int {
	switch {
	case a.ResourceType != b.ResourceType:
		return int(a.ResourceType) - int(b.ResourceType)
	case a.PatternType != b.PatternType:
		return int(a.PatternType) - int(b.PatternType)
	case a.ResourceName != b.ResourceName:
		return strings.Compare(a.ResourceName, b.ResourceName)
	}
	_, ea := splitACL(a)
	_, eb := splitACL(b)
	return compareEntries(ea, eb)
}

// NumBindings is the number of bindings.
func (a *ACLs) NumBindings() int {
	if a == nil {
		return 0
	}
	n := 0
	for _, es := range a.byResource {
		n += len(es)
	}
	return n
}

// AuthorizeRequest is what Authorize decides on.
type AuthorizeRequest struct {
	Principal    string
	Host         string
	Operation    int8
	ResourceType int8
	ResourceName string
	// SuperUser: the principal is one of super.users (allowed everything).
	SuperUser bool
	// AllowIfNoACL is allow.everyone.if.no.acl.found: a resource no ACL
	// applies to is allowed to all.
	AllowIfNoACL bool
}

// Authorize decides as Kafka's authorizer does: a super user may do
// anything; otherwise the ACLs that apply to the resource (its literal
// name, the literal "*", and the prefixed patterns its name starts with)
// decide: none at all allows only under AllowIfNoACL; a DENY entry for the
// principal (or User:*) from the host (or *) for the operation (or ALL)
// denies; else an ALLOW entry for the operation, ALL, or one that implies
// it (DESCRIBE by READ, WRITE, DELETE or ALTER; DESCRIBE_CONFIGS by
// ALTER_CONFIGS) allows; nothing else does.
func (a *ACLs) Authorize(q AuthorizeRequest) bool {
	if q.SuperUser {
		return true
	}
	var found bool
	allowed, denied := false, false
	visit := func(r aclResource) {
		if a == nil {
			return
		}
		es, ok := a.byResource[r]
		if !ok {
			return
		}
		found = true
		for _, e := range es {
			if e.principal != q.Principal && e.principal != wildcardPrincipal(q.Principal) || e.host != q.Host && e.host != ACLWildcard {
				continue
			}
			switch {
			case e.perm == ACLPermissionDeny && (e.op == q.Operation || e.op == ACLOpAll):
				denied = true
			case e.perm == ACLPermissionAllow && implies(e.op, q.Operation):
				allowed = true
			}
		}
	}
	visit(aclResource{q.ResourceType, ACLPatternLiteral, q.ResourceName})
	if q.ResourceName != ACLWildcard {
		visit(aclResource{q.ResourceType, ACLPatternLiteral, ACLWildcard})
	}
	for i := 1; i <= len(q.ResourceName); i++ {
		visit(aclResource{q.ResourceType, ACLPatternPrefixed, q.ResourceName[:i]})
	}
	switch {
	case !found:
		return q.AllowIfNoACL
	case denied:
		return false
	}
	return allowed
}

// wildcardPrincipal is the wildcard of a principal's type (User:*).
func wildcardPrincipal(p string) string {
	typ, _, _ := strings.Cut(p, ":")
	return typ + ":" + ACLWildcard
}

// implies reports whether an ALLOW entry for op grants want.
func implies(op, want int8) bool {
	switch {
	case op == want || op == ACLOpAll:
		return true
	case want == ACLOpDescribe:
		return op == ACLOpRead || op == ACLOpWrite || op == ACLOpDelete || op == ACLOpAlter
	case want == ACLOpDescribeConfigs:
		return op == ACLOpAlterConfigs
	}
	return false
}

// AuthorizeAnyOfType reports whether the principal may perform the
// operation on some resource of q's type (q.ResourceName is ignored), as
// Kafka's authorizeByResourceType decides whether an idempotent producer
// may write to some topic: a super user may; with no ACL on the type at
// all, AllowIfNoACL decides; otherwise an ALLOW entry for the principal
// (or User:*) from the host (or *) granting the operation allows, unless a
// DENY of it for the principal covers every name of the type (the literal
// "*") or the very pattern the ALLOW is on.
func (a *ACLs) AuthorizeAnyOfType(q AuthorizeRequest) bool {
	if q.SuperUser {
		return true
	}
	if a == nil {
		return q.AllowIfNoACL
	}
	applies := func(e aclEntry) bool {
		return (e.principal == q.Principal || e.principal == wildcardPrincipal(q.Principal)) && (e.host == q.Host || e.host == ACLWildcard)
	}
	denied := func(r aclResource) bool {
		for _, e := range a.byResource[r] {
			if e.perm == ACLPermissionDeny && applies(e) && (e.op == q.Operation || e.op == ACLOpAll) {
				return true
			}
		}
		return false
	}
	any := false
	for r, es := range a.byResource {
		if r.typ != q.ResourceType {
			continue
		}
		any = true
		for _, e := range es {
			if e.perm == ACLPermissionAllow && applies(e) && implies(e.op, q.Operation) && !denied(r) &&
				!denied(aclResource{q.ResourceType, ACLPatternLiteral, ACLWildcard}) {
				return true
			}
		}
	}
	return !any && q.AllowIfNoACL
}
