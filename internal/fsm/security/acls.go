package security

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The security module's ACLs (issue 17, docs/security.md): Kafka's access
// control lists, with its resource types, pattern types, operations and
// permissions and their numbers, as replicated state under the app hash,
// so every broker authorizes alike and a peer's or a snapshot's ACLs are
// checked like any state. CreateACL adds one binding (an existing one
// changes nothing), DeleteACLs removes exact bindings (those the
// front-end matched against its filters; one already gone is skipped).
// The ACLs view decides, as Kafka's StandardAuthorizer does, whether a
// principal from a host may perform an operation on a resource
// (Authorize). The front-ends enforce it; the commands of the state
// machine carry no principal, so the apply checks the ACLs only for a
// signed administrative command (admin_signed.go), against the principal
// that signed it.
//
// State, in the metadata store:
//
//	e/<resource type u8><pattern type u8><resource name>   the resource's
//	    ACL entries (principal, host, operation, permission), in order

// Kind numbers of the ACL commands.
const (
	KindCreateACL  core.Kind = 27
	KindDeleteACLs core.Kind = 28
)

// Kafka's ACL numbers (kmsg.ACLResourceType, ACLResourcePatternType,
// ACLOperation, ACLPermissionType).
const (
	ACLResourceAny             int8 = 1
	ACLResourceTopic           int8 = 2
	ACLResourceGroup           int8 = 3
	ACLResourceCluster         int8 = 4
	ACLResourceTransactionalID int8 = 5
	ACLResourceDelegationToken int8 = 6
	ACLResourceUser            int8 = 7

	ACLPatternAny      int8 = 1
	ACLPatternMatch    int8 = 2
	ACLPatternLiteral  int8 = 3
	ACLPatternPrefixed int8 = 4

	ACLOpAny             int8 = 1
	ACLOpAll             int8 = 2
	ACLOpRead            int8 = 3
	ACLOpWrite           int8 = 4
	ACLOpCreate          int8 = 5
	ACLOpDelete          int8 = 6
	ACLOpAlter           int8 = 7
	ACLOpDescribe        int8 = 8
	ACLOpClusterAction   int8 = 9
	ACLOpDescribeConfigs int8 = 10
	ACLOpAlterConfigs    int8 = 11
	ACLOpIdempotentWrite int8 = 12
	ACLOpCreateTokens    int8 = 13
	ACLOpDescribeTokens  int8 = 14

	ACLPermissionAny   int8 = 1
	ACLPermissionDeny  int8 = 2
	ACLPermissionAllow int8 = 3
)

// ACLWildcard is the literal resource name, principal and host that match
// any.
const ACLWildcard = "*"

// ClusterResourceName is the name of Kafka's one cluster resource.
const ClusterResourceName = "kafka-cluster"

// maxACLField bounds a resource name, principal or host.
const maxACLField = 1024

// ACLBinding is one ACL: a resource pattern and an entry.
type ACLBinding struct {
	ResourceType int8
	ResourceName string
	PatternType  int8
	Principal    string
	Host         string
	Operation    int8
	Permission   int8
}

// CreateACL adds one binding.
type CreateACL struct{ ACL ACLBinding }

// DeleteACLs removes these bindings, each if it exists.
type DeleteACLs struct{ ACLs []ACLBinding }

func (CreateACL) Kind() core.Kind  { return KindCreateACL }
func (DeleteACLs) Kind() core.Kind { return KindDeleteACLs }

func (b ACLBinding) Encode(w *core.Writer) {
	w.U8(uint8(b.ResourceType))
	w.Str(b.ResourceName)
	w.U8(uint8(b.PatternType))
	w.Str(b.Principal)
	w.Str(b.Host)
	w.U8(uint8(b.Operation))
	w.U8(uint8(b.Permission))
}

func decodeACLBinding(r *core.Reader) ACLBinding {
	return ACLBinding{ResourceType: int8(r.U8()), ResourceName: r.Str(), PatternType: int8(r.U8()),
		Principal: r.Str(), Host: r.Str(), Operation: int8(r.U8()), Permission: int8(r.U8())}
}

func (c CreateACL) Encode(w *core.Writer) { c.ACL.Encode(w) }

func (c DeleteACLs) Encode(w *core.Writer) {
	w.Count(len(c.ACLs))
	for _, b := range c.ACLs {
		b.Encode(w)
	}
}

// registerACLs registers the ACL commands and the ACLs' step
// (RegisterSecurity calls it).
func registerACLs(r *core.Registry) {
	core.RegisterModuleCommand(r, securityOf, KindCreateACL, "CreateACL", ModSecurity, func(r *core.Reader) CreateACL { return CreateACL{decodeACLBinding(r)} },
		func(c core.Command) core.Result { return checkACL(c.(CreateACL).ACL) },
		func(f *Security, c CreateACL, _ core.CmdAt) core.Result { return f.createACL(c.ACL) })
	core.RegisterModuleCommand(r, securityOf, KindDeleteACLs, "DeleteACLs", ModSecurity,
		func(r *core.Reader) DeleteACLs {
			var c DeleteACLs
			for i, n := 0, r.Count(7); i < n && r.E == nil; i++ {
				c.ACLs = append(c.ACLs, decodeACLBinding(r))
			}
			return c
		},
		func(c core.Command) core.Result {
			for _, b := range c.(DeleteACLs).ACLs {
				if r := checkACL(b); r.Code != 0 {
					return r
				}
			}
			return core.Result{}
		},
		func(f *Security, c DeleteACLs, _ core.CmdAt) core.Result { return f.deleteACLs(c.ACLs) })
	core.RegisterModuleStep(r, securityOf, core.ModuleStep[*Security]{Rank: 125, Name: "ACLs", Module: ModSecurity,
		Empty: emptyACLs, Load: loadACLs, Stage: stageACLs, Publish: publishACLs})
}

// CheckACL says why b cannot be stored, in Kafka's words
// (AclControlManager.validateNewAcl), or nil.
func CheckACL(b ACLBinding) error {
	switch {
	case b.ResourceType < ACLResourceTopic || b.ResourceType > ACLResourceUser:
		return fmt.Errorf("Invalid resourceType %d", b.ResourceType)
	case b.PatternType != ACLPatternLiteral && b.PatternType != ACLPatternPrefixed:
		return fmt.Errorf("Invalid patternType %d", b.PatternType)
	case b.Operation < ACLOpAll || b.Operation > ACLOpDescribeTokens:
		return fmt.Errorf("Invalid operation %d", b.Operation)
	case b.Permission != ACLPermissionAllow && b.Permission != ACLPermissionDeny:
		return fmt.Errorf("Invalid permissionType %d", b.Permission)
	case b.ResourceName == "":
		return fmt.Errorf("Resource name should not be empty")
	case b.ResourceType == ACLResourceCluster && !validClusterName(b.ResourceName):
		return fmt.Errorf("The only valid name for the CLUSTER resource is %s", ClusterResourceName)
	case b.Host == "":
		return fmt.Errorf("Invalid null host")
	}
	if typ, name, ok := strings.Cut(b.Principal, ":"); !ok || typ == "" || name == "" {
		return fmt.Errorf("Could not parse principal from `%s` (no colon is found separating the principal type from the principal name)", b.Principal)
	}
	for _, s := range []string{b.ResourceName, b.Principal, b.Host} {
		if len(s) > maxACLField || !utf8.ValidString(s) {
			return fmt.Errorf("an ACL's names are UTF-8 of at most %d bytes", maxACLField)
		}
	}
	return nil
}

// validClusterName reports whether name is a CLUSTER resource's: Kafka's
// one, or a tenant's own (acme~kafka-cluster, TenantCluster), whose ACLs
// make a tenant's administrators (docs/tenants.md), from app version 5.
func validClusterName(name string) bool {
	if name == ClusterResourceName {
		return true
	}
	t, local := core.SplitTenant(name)
	return t != "" && local == ClusterResourceName
}

// TenantCluster is tenant's own CLUSTER resource, the name its clients'
// kafka-cluster has in the state.
func TenantCluster(tenant string) string { return core.Qualify(tenant, ClusterResourceName) }

// CheckACLV4 is CheckACL as app version 4 has it: a CLUSTER resource is
// kafka-cluster only.
func CheckACLV4(b ACLBinding) error {
	if err := CheckACL(b); err != nil {
		return err
	}
	if b.ResourceType == ACLResourceCluster && b.ResourceName != ClusterResourceName {
		return fmt.Errorf("The only valid name for the CLUSTER resource is %s", ClusterResourceName)
	}
	return nil
}

func checkACL(b ACLBinding) core.Result {
	if err := CheckACL(b); err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	return core.Result{}
}

// aclResource is an ACL's resource pattern; aclEntry the rest.
type aclResource struct {
	typ, pattern int8
	name         string
}

type aclEntry struct {
	principal, host string
	op, perm        int8
}

func splitACL(b ACLBinding) (aclResource, aclEntry) {
	return aclResource{b.ResourceType, b.PatternType, b.ResourceName}, aclEntry{b.Principal, b.Host, b.Operation, b.Permission}
}

func joinACL(r aclResource, e aclEntry) ACLBinding {
	return ACLBinding{ResourceType: r.typ, ResourceName: r.name, PatternType: r.pattern, Principal: e.principal, Host: e.host, Operation: e.op, Permission: e.perm}
}

// aclsState is the security module's state of the ACLs.
type aclsState struct {
	// acls holds each resource pattern's entries; a pattern with none is
	// absent. Never nil once loaded.
	acls      map[aclResource]map[aclEntry]bool
	aclsDirty map[aclResource]bool
	aclsNew   bool
	aclsView  atomic.Pointer[ACLs]
	// signedBy is the principal whose signed command is being applied
	// (admin_signed.go); "" outside one.
	signedBy string
}

func (f *Security) createACL(b ACLBinding) core.Result {
	if f.Version < SecurityVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("ACLs need app version %d; this chain runs %d (stele cluster upgrade)", SecurityVersion, f.Version))
	}
	r, e := splitACL(b)
	if f.acls[r][e] {
		return core.Result{}
	}
	if f.acls[r] == nil {
		f.acls[r] = map[aclEntry]bool{}
	}
	f.acls[r][e] = true
	f.aclsDirty[r], f.aclsNew = true, true
	return core.Result{}
}

func (f *Security) deleteACLs(bs []ACLBinding) core.Result {
	if f.Version < SecurityVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("ACLs need app version %d; this chain runs %d (stele cluster upgrade)", SecurityVersion, f.Version))
	}
	for _, b := range bs {
		r, e := splitACL(b)
		if !f.acls[r][e] {
			continue
		}
		delete(f.acls[r], e)
		if len(f.acls[r]) == 0 {
			delete(f.acls, r)
		}
		f.aclsDirty[r], f.aclsNew = true, true
	}
	return core.Result{}
}

func aclKey(r aclResource) []byte {
	return append([]byte{'e', '/', uint8(r.typ), uint8(r.pattern)}, r.name...)
}

const aclsPrefix = "e/"

func sortedEntries(m map[aclEntry]bool) []aclEntry {
	out := make([]aclEntry, 0, len(m))
	for e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, compareEntries)
	return out
}

func compareEntries(a, b aclEntry) int {
	if c := strings.Compare(a.principal, b.principal); c != 0 {
		return c
	}
	if c := strings.Compare(a.host, b.host); c != 0 {
		return c
	}
	if a.op != b.op {
		return int(a.op) - int(b.op)
	}
	return int(a.perm) - int(b.perm)
}

// encodeACLEntries is e/...'s value: u8 version | count × (str principal |
// str host | u8 operation | u8 permission), in order.
func encodeACLEntries(m map[aclEntry]bool) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	es := sortedEntries(m)
	w.Count(len(es))
	for _, e := range es {
		w.Str(e.principal)
		w.Str(e.host)
		w.U8(uint8(e.op))
		w.U8(uint8(e.perm))
	}
	return w.B
}

// DecodeACLs reads one resource's key and value: a valid binding for each
// entry, at least one, in order and each once.
func DecodeACLs(k, v []byte) (aclResource, map[aclEntry]bool, error) {
	if len(k) < 4 || !bytes.HasPrefix(k, []byte(aclsPrefix)) {
		return aclResource{}, nil, fmt.Errorf("stele/fsm: %w: ACL key %q", core.ErrMalformed, k)
	}
	res := aclResource{typ: int8(k[2]), pattern: int8(k[3]), name: string(k[4:])}
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return res, nil, fmt.Errorf("stele/fsm: ACLs: state format %d not supported", ver)
	}
	out := map[aclEntry]bool{}
	var last *aclEntry
	for i, n := 0, r.Count(4); i < n && r.E == nil; i++ {
		e := aclEntry{principal: r.Str(), host: r.Str(), op: int8(r.U8()), perm: int8(r.U8())}
		if r.E != nil {
			break
		}
		if last != nil && compareEntries(*last, e) >= 0 {
			r.Fail("ACL entries out of order")
		} else if err := CheckACL(joinACL(res, e)); err != nil {
			r.Fail("ACL: %v", err)
		}
		last = &e
		out[e] = true
	}
	if err := r.Done(); err != nil {
		return res, nil, fmt.Errorf("stele/fsm: reading ACLs: %w", err)
	}
	if len(out) == 0 {
		return res, nil, fmt.Errorf("stele/fsm: reading ACLs: %w: none stored", core.ErrMalformed)
	}
	return res, out, nil
}

func emptyACLs(f *Security) {
	f.acls = map[aclResource]map[aclEntry]bool{}
	f.aclsDirty = map[aclResource]bool{}
	f.aclsNew = true
}

func loadACLs(f *Security) error {
	emptyACLs(f)
	return f.Store.Scan([]byte(aclsPrefix), func(k, v []byte) error {
		r, es, err := DecodeACLs(k, v)
		if err != nil {
			return err
		}
		f.acls[r] = es
		return nil
	})
}

func stageACLs(f *Security, b *core.StateBatch) error {
	rs := make([]aclResource, 0, len(f.aclsDirty))
	for r := range f.aclsDirty {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b aclResource) int { return bytes.Compare(aclKey(a), aclKey(b)) })
	for _, r := range rs {
		if es := f.acls[r]; len(es) > 0 {
			b.Set(aclKey(r), encodeACLEntries(es))
		} else {
			b.Delete(aclKey(r))
		}
	}
	clear(f.aclsDirty)
	return nil
}

func publishACLs(f *Security, _ bool) {
	if !f.aclsNew && f.aclsView.Load() != nil {
		return
	}
	f.aclsNew = false
	v := &ACLs{byResource: make(map[aclResource][]aclEntry, len(f.acls))}
	for r, es := range f.acls {
		v.byResource[r] = sortedEntries(es)
	}
	f.aclsView.Store(v)
}

// ACLs returns the committed ACLs.
func (f *Security) ACLs() *ACLs { return f.aclsView.Load() }
