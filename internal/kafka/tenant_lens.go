package kafka

import (
	"reflect"
	"regexp"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

// A tenant's own clients (issue 18, docs/tenants.md): a connection whose
// principal is a tenant's user (User:alice@acme, logged in with SASL as
// alice@acme, or a certificate mapped to it, while tenant acme exists) is
// that tenant's, for as long as it is open. It sees the tenant's names
// unprefixed:
//
//   - its requests' topic names, group ids and transactional ids are
//     qualified (orders → acme~orders) before any handler reads them, and
//     its responses' are unqualified again (in, out: the fields named
//     Topic, Group, GroupID, TransactionalID, TransactionID, SubscribedTopics
//     and their lists, a
//     FindCoordinator key, a topic config resource's name, a KIP-848
//     subscription's names and regular expression; the ACL, SCRAM user and
//     client quota APIs' bindings and users: adminIn, adminOut), and the tenant's
//     prefix is taken out of every error message;
//   - authorize (authorized_ops.go) allows it nothing but its own tenant's
//     topics, groups and transactional ids, as the ACLs say, and on the
//     cluster only CREATE (creating its topics) and IDEMPOTENT_WRITE; the
//     ACL and user APIs, topic creation and its own users' client quotas
//     also ask its tenant's own cluster resource (acls.go's adminAllowed:
//     its administrators); every other cluster-wide listing and
//     administration (ListGroups beyond the groups it may describe,
//     DescribeLogDirs, other quotas, broker configs) answers as to a
//     principal without the right.
//
// The renaming is the front-end's; the isolation is not only its: the
// state machine keeps the tenant in every name, and authorization denies a
// name of another tenant or of the default tenant whatever the request
// said, so a field the renaming missed shows a client its own tenant's
// prefix at worst, never another tenant's name.

// tenantNow is the tenant of c's principal ("" for the default tenant).
func (c *conn) tenantNow() string {
	if t := c.tenant.Load(); t != nil {
		return *t
	}
	return ""
}

// tenantOfPrincipal is the tenant a principal logs in to: the tenant its
// user name reads as, when that tenant exists.
func (c *conn) tenantOfPrincipal(p string) string {
	u, ok := strings.CutPrefix(p, "User:")
	if !ok {
		return ""
	}
	t, _ := fsm.SplitUser(u)
	if t == "" {
		return ""
	}
	if _, ok := c.s.b.Tenants().Get(t); !ok {
		return ""
	}
	return t
}

// validTopicName says why a topic name of a request of c is not valid:
// Kafka's rule, applied to a tenant's connection's names within its
// tenant (they arrive qualified), whose full names are at most 249
// characters.
func (c *conn) validTopicName(name string) error {
	t := c.tenantNow()
	if t == "" {
		return fsm.ValidTopicName(name)
	}
	owner, local := fsm.SplitTenant(name)
	if owner != t {
		return fsm.ValidTopicName(local)
	}
	if err := fsm.ValidTopicName(local); err != nil {
		return err
	}
	return fsm.ValidStateTopicName(name)
}

// tenantLens renames one tenant connection's requests and responses.
type tenantLens struct {
	tenant string
	prefix string // tenant~
}

func newTenantLens(tenant string) tenantLens {
	return tenantLens{tenant: tenant, prefix: tenant + string(fsm.TenantSep)}
}

// The ACL and user APIs of a tenant's administrators (docs/tenants.md):
// a binding's resource is the tenant's (a topic, group or transactional id
// qualified; kafka-cluster its own CLUSTER resource, acme~kafka-cluster; a
// literal * every name of the tenant's, the prefix acme~), its principal
// User:bob is the tenant's user bob@acme (User:* stays every user: on the
// tenant's resources only its own users reach), and a SCRAM user bob is
// bob@acme. Responses name them back as the tenant's clients do.

// aclIn qualifies an ACL resource of a tenant's request.
func (l tenantLens) aclIn(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType) (string, kmsg.ACLResourcePatternType) {
	switch rt {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId:
		if name == "*" {
			if pt == kmsg.ACLResourcePatternTypeLiteral {
				pt = kmsg.ACLResourcePatternTypePrefixed
			}
			return l.prefix, pt
		}
		return l.qualify(name), pt
	case kmsg.ACLResourceTypeCluster:
		return l.qualify(name), pt
	}
	return name, pt
}

// aclOut names an ACL resource back as the tenant's clients do.
func (l tenantLens) aclOut(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType) (string, kmsg.ACLResourcePatternType) {
	switch rt {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId, kmsg.ACLResourceTypeCluster:
		if name == l.prefix && pt == kmsg.ACLResourcePatternTypePrefixed {
			return "*", kmsg.ACLResourcePatternTypeLiteral
		}
		return l.unqualify(name), pt
	}
	return name, pt
}

// principalIn qualifies a principal User:bob of a tenant's request.
func (l tenantLens) principalIn(p string) string {
	if u, ok := strings.CutPrefix(p, "User:"); ok && u != "*" {
		return "User:" + l.userIn(u)
	}
	return p
}

func (l tenantLens) principalOut(p string) string {
	if u, ok := strings.CutPrefix(p, "User:"); ok {
		return "User:" + l.userOut(u)
	}
	return p
}

func (l tenantLens) userIn(u string) string  { return fsm.QualifyUser(l.tenant, u) }
func (l tenantLens) userOut(u string) string { return strings.TrimSuffix(u, "@"+l.tenant) }

// adminIn qualifies the ACLs and users of req, one of the ACL, user and
// client quota APIs (a quota's user entity; client ids are not a
// tenant's).
func (l tenantLens) adminIn(req kmsg.Request) {
	optional := func(p *string, f func(string) string) *string {
		if p == nil {
			return nil
		}
		s := f(*p)
		return &s
	}
	switch r := req.(type) {
	case *kmsg.CreateACLsRequest:
		for i := range r.Creations {
			c := &r.Creations[i]
			c.ResourceName, c.ResourcePatternType = l.aclIn(c.ResourceType, c.ResourceName, c.ResourcePatternType)
			c.Principal = l.principalIn(c.Principal)
		}
	case *kmsg.DescribeACLsRequest:
		if r.ResourceName != nil {
			var name string
			name, r.ResourcePatternType = l.aclIn(r.ResourceType, *r.ResourceName, r.ResourcePatternType)
			r.ResourceName = &name
		}
		r.Principal = optional(r.Principal, l.principalIn)
	case *kmsg.DeleteACLsRequest:
		for i := range r.Filters {
			f := &r.Filters[i]
			if f.ResourceName != nil {
				var name string
				name, f.ResourcePatternType = l.aclIn(f.ResourceType, *f.ResourceName, f.ResourcePatternType)
				f.ResourceName = &name
			}
			f.Principal = optional(f.Principal, l.principalIn)
		}
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		for i := range r.Users {
			r.Users[i].Name = l.userIn(r.Users[i].Name)
		}
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		for i := range r.Deletions {
			r.Deletions[i].Name = l.userIn(r.Deletions[i].Name)
		}
		for i := range r.Upsertions {
			r.Upsertions[i].Name = l.userIn(r.Upsertions[i].Name)
		}
	case *kmsg.AlterClientQuotasRequest:
		for i := range r.Entries {
			for j := range r.Entries[i].Entity {
				if en := &r.Entries[i].Entity[j]; en.Type == quotaEntityUser {
					en.Name = optional(en.Name, l.userIn)
				}
			}
		}
	case *kmsg.DescribeClientQuotasRequest:
		for i := range r.Components {
			if c := &r.Components[i]; c.EntityType == quotaEntityUser && c.MatchType == 0 {
				c.Match = optional(c.Match, l.userIn)
			}
		}
	}
}

// adminOut names back the ACLs and users of resp.
func (l tenantLens) adminOut(resp kmsg.Response) {
	switch r := resp.(type) {
	case *kmsg.DescribeACLsResponse:
		for i := range r.Resources {
			res := &r.Resources[i]
			res.ResourceName, res.ResourcePatternType = l.aclOut(res.ResourceType, res.ResourceName, res.ResourcePatternType)
			for j := range res.ACLs {
				res.ACLs[j].Principal = l.principalOut(res.ACLs[j].Principal)
			}
		}
	case *kmsg.DeleteACLsResponse:
		for i := range r.Results {
			for j := range r.Results[i].MatchingACLs {
				m := &r.Results[i].MatchingACLs[j]
				m.ResourceName, m.ResourcePatternType = l.aclOut(m.ResourceType, m.ResourceName, m.ResourcePatternType)
				m.Principal = l.principalOut(m.Principal)
			}
		}
	case *kmsg.DescribeUserSCRAMCredentialsResponse:
		for i := range r.Results {
			r.Results[i].User = l.userOut(r.Results[i].User)
		}
	case *kmsg.AlterUserSCRAMCredentialsResponse:
		for i := range r.Results {
			r.Results[i].User = l.userOut(r.Results[i].User)
		}
	case *kmsg.AlterClientQuotasResponse:
		for i := range r.Entries {
			for j := range r.Entries[i].Entity {
				en := &r.Entries[i].Entity[j]
				en.Name = l.quotaUserOut(en.Type, en.Name)
			}
		}
	case *kmsg.DescribeClientQuotasResponse:
		for i := range r.Entries {
			for j := range r.Entries[i].Entity {
				en := &r.Entries[i].Entity[j]
				en.Name = l.quotaUserOut(en.Type, en.Name)
			}
		}
	}
}

// quotaUserOut names a client quota entity's user back (other entity
// types and the default, nil, as they are).
func (l tenantLens) quotaUserOut(typ string, name *string) *string {
	if typ != quotaEntityUser || name == nil {
		return name
	}
	u := l.userOut(*name)
	return &u
}

func (l tenantLens) qualify(s string) string { return l.prefix + s }

func (l tenantLens) unqualify(s string) string { return strings.TrimPrefix(s, l.prefix) }

// nameFields are the fields of Kafka requests and responses that hold a
// topic name, a group id or a transactional id, or lists of them.
var nameFields = map[string]bool{
	"Topic": true, "Group": true, "GroupID": true, "TransactionalID": true, "TransactionID": true,
	"Groups": true, "GroupIDs": true, "TransactionalIDs": true, "CoordinatorKeys": true, "SubscribedTopicNames": true, "SubscribedTopics": true, "Topics": true,
}

// in qualifies the names of req.
func (l tenantLens) in(req kmsg.Request) {
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		if r.Version < 4 {
			r.CoordinatorKey = l.qualify(r.CoordinatorKey)
		}
	case *kmsg.ConsumerGroupHeartbeatRequest:
		if r.SubscribedTopicRegex != nil {
			q := regexp.QuoteMeta(l.prefix) + "(?:" + *r.SubscribedTopicRegex + ")"
			r.SubscribedTopicRegex = &q
		}
	}
	l.adminIn(req)
	l.walk(reflect.ValueOf(req), l.qualify)
}

// out unqualifies the names of resp and takes the tenant's prefix out of
// its error messages.
func (l tenantLens) out(resp kmsg.Response) {
	switch r := resp.(type) {
	case *kmsg.FindCoordinatorResponse:
		for i := range r.Coordinators {
			r.Coordinators[i].Key = l.unqualify(r.Coordinators[i].Key)
		}
	case *kmsg.ConsumerGroupDescribeResponse:
		wrapped := regexp.QuoteMeta(l.prefix) + "(?:"
		for i := range r.Groups {
			for j := range r.Groups[i].Members {
				if re := r.Groups[i].Members[j].SubscribedTopicRegex; re != nil && strings.HasPrefix(*re, wrapped) && strings.HasSuffix(*re, ")") {
					s := strings.TrimSuffix(strings.TrimPrefix(*re, wrapped), ")")
					r.Groups[i].Members[j].SubscribedTopicRegex = &s
				}
			}
		}
	}
	l.adminOut(resp)
	l.walk(reflect.ValueOf(resp), l.unqualify)
}

var (
	stringType         = reflect.TypeOf("")
	configResourceType = reflect.TypeOf(kmsg.ConfigResourceType(0))
)

// walk applies rename to every name field under v, and takes the
// tenant's prefix out of every ErrorMessage.
func (l tenantLens) walk(v reflect.Value, rename func(string) string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			l.walk(v.Elem(), rename)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes: records, metadata, assignments
		}
		for i := 0; i < v.Len(); i++ {
			l.walk(v.Index(i), rename)
		}
	case reflect.Struct:
		t := v.Type()
		// A config resource (DescribeConfigs, AlterConfigs,
		// IncrementalAlterConfigs, requests and responses) names a topic or
		// a group when its type says so.
		if typ, name := v.FieldByName("ResourceType"), v.FieldByName("ResourceName"); typ.IsValid() && name.IsValid() && name.CanSet() &&
			typ.Type() == configResourceType && (kmsg.ConfigResourceType(typ.Int()) == kmsg.ConfigResourceTypeTopic || kmsg.ConfigResourceType(typ.Int()) == kmsg.ConfigResourceTypeGroupConfig) {
			name.SetString(rename(name.String()))
		}
		for i := 0; i < v.NumField(); i++ {
			f, fv := t.Field(i), v.Field(i)
			if !fv.CanSet() {
				continue
			}
			switch {
			case f.Name == "ErrorMessage":
				l.scrub(fv)
			case nameFields[f.Name]:
				l.rename(fv, rename)
			default:
				l.walk(fv, rename)
			}
		}
	}
}

// rename applies rename to a name field: a string, a *string, a []string,
// or (a list of) structs holding names further down.
func (l tenantLens) rename(fv reflect.Value, rename func(string) string) {
	switch {
	case fv.Type() == stringType:
		fv.SetString(rename(fv.String()))
	case fv.Kind() == reflect.Pointer && fv.Type().Elem() == stringType:
		if !fv.IsNil() {
			s := rename(fv.Elem().String())
			fv.Set(reflect.ValueOf(&s))
		}
	case fv.Kind() == reflect.Slice && fv.Type().Elem() == stringType:
		for i := 0; i < fv.Len(); i++ {
			fv.Index(i).SetString(rename(fv.Index(i).String()))
		}
	default:
		l.walk(fv, rename)
	}
}

// scrub takes the tenant's prefix, and its users' suffix, out of an error
// message.
func (l tenantLens) scrub(fv reflect.Value) {
	clean := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, l.prefix, ""), "@"+l.tenant, "")
	}
	switch {
	case fv.Type() == stringType:
		fv.SetString(clean(fv.String()))
	case fv.Kind() == reflect.Pointer && fv.Type().Elem() == stringType && !fv.IsNil():
		s := clean(fv.Elem().String())
		fv.Set(reflect.ValueOf(&s))
	}
}
