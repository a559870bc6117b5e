package security

// Signed administration (issue 17, docs/security.md): under the
// cluster-wide setting stele.admin.signed=true, the destructive and
// security commands (adminGated) are applied only inside a SignedAdmin
// command: an ed25519 signature, by a principal's registered key (the
// producer keys of signed.go), of the command, the chain and a sequence
// the principal never used before, whose principal (User:<principal>) the
// ACLs in the state allow to perform it. Every broker checks it in the
// deterministic apply, so no broker alone can delete data or widen
// permissions: one that submits such a command unsigned, or with a
// signature it made up, is refused by every honest broker, and the app
// hash commits to the refusal.
//
// A tenant's user (alice@acme) that signs a command staying inside its
// tenant (its users, the ACLs on its names for its users, its users'
// client quotas: Security.AdminTenant, from app version 6) is authorized
// on the tenant's own CLUSTER resource (acme~kafka-cluster) where the
// command needs the cluster, so a tenant's administrator signs what it
// manages and nothing of another tenant's or the cluster's.
//
// Authorization in the apply is the ACLs' alone: super.users is each
// broker's own configuration, which a Byzantine broker could claim, so it
// does not count here; nor does allow.everyone.if.no.acl.found (a resource
// no ACL names is denied); and only ACL entries for every host (*) apply,
// as the apply does not know where a command came from. So a principal
// that signs needs ACLs of its own (User:admin ALL on the cluster, say).
//
// The setting itself changes only by a signed command, on and off: a
// broker cannot turn it off, and turning it on proves that a principal can
// still administer the cluster under it. A signed command's sequence is
// spent once its signature verifies, whatever the command's outcome, so a
// signed "delete topic orders" cannot be replayed after orders is created
// again.

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/pkg/proof"
)

// KindSignedAdmin is a signed administrative command.
const KindSignedAdmin core.Kind = 30

// SignedAdmin carries Command (EncodeCommand's bytes) signed by Principal:
// Signature is the principal's ed25519 signature of
// proof.AdminMessage(chain id, Principal, Seq, Command).
type SignedAdmin struct {
	Principal string
	Seq       uint64
	Signature []byte
	Command   []byte
}

func (SignedAdmin) Kind() core.Kind { return KindSignedAdmin }

func (c SignedAdmin) Encode(w *core.Writer) {
	w.Str(c.Principal)
	w.I64(int64(c.Seq))
	w.Bytes(c.Signature)
	w.Bytes(c.Command)
}

func decodeSignedAdmin(r *core.Reader) SignedAdmin {
	return SignedAdmin{Principal: r.Str(), Seq: uint64(r.I64()), Signature: r.BytesCopy(), Command: r.BytesCopy()}
}

// EncodeCommand encodes one command as a SignedAdmin carries it: its kind,
// then its body.
func EncodeCommand(c core.Command) []byte {
	w := &core.Writer{}
	w.U8(uint8(c.Kind()))
	c.Encode(w)
	return w.B
}

// DecodeOne decodes EncodeCommand's bytes with the commands registered in
// g (the application's DecodeCommand).
func DecodeOne(g *core.Registry, b []byte) (core.Command, error) {
	r := &core.Reader{B: b}
	k := core.Kind(r.U8())
	if r.E != nil {
		return nil, r.E
	}
	c := g.DecodeCommand(k, r)
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// registerSignedAdmin registers SignedAdmin (RegisterSecurity calls it).
func registerSignedAdmin(r *core.Registry, gates *AdminGates) {
	r.RegisterCommandGate(core.CommandGate{Rank: 10, Name: "signed administration", Module: ModSecurity,
		Run: func(m *core.Machine, c core.Command) (core.Result, bool) {
			return securityOf(m).refuseUnsigned(gates, c)
		}})
	core.RegisterModuleCommand(r, securityOf, KindSignedAdmin, "SignedAdmin", ModSecurity, decodeSignedAdmin,
		func(c core.Command) core.Result {
			_, res := checkSignedAdmin(r, gates, c.(SignedAdmin), r.CheckCommand)
			return res
		},
		func(f *Security, c SignedAdmin, at core.CmdAt) core.Result { return f.applySignedAdmin(gates, c, at) })
}

// AdminCheck is one authorization a signed command needs: Op on the
// resource of type ResourceType named Name.
type AdminCheck struct {
	ResourceType int8
	Name         string
	Op           int8
}

// AdminGates is the extension point of signed administration: the modules
// above security add the commands of theirs that stele.admin.signed gates
// (the tenants module's), with the authorizations each needs, as they
// register (Gate). Built by RegisterSecurity, complete once the registry
// is, never changed after.
type AdminGates struct {
	byKind map[core.Kind]func(core.Command) []AdminCheck
}

// Gate makes stele.admin.signed gate the commands of kind k; checks says
// what a principal must be allowed to sign one.
func (g *AdminGates) Gate(k core.Kind, checks func(core.Command) []AdminCheck) {
	if _, dup := g.byKind[k]; dup {
		panic(fmt.Sprintf("stele/fsm: command kind %d gated twice", k))
	}
	g.byKind[k] = checks
}

// gated is adminGated with the kinds added by Gate.
func (g *AdminGates) gated(c core.Command) ([]AdminCheck, bool) {
	if checks, ok := adminGated(c); ok {
		return checks, true
	}
	if f := g.byKind[c.Kind()]; f != nil {
		return f(c), true
	}
	return nil, false
}

// Gated reports whether stele.admin.signed gates c.
func (g *AdminGates) Gated(c core.Command) bool { _, ok := g.gated(c); return ok }

type adminCheck = AdminCheck

// adminGated returns the authorizations c needs, and whether c is one of
// the commands stele.admin.signed gates: deleting topics or records,
// altering topic, broker or log configs, deleting groups or their offsets,
// committing offsets from outside a group's generation (how offsets are
// reset), and changing users, ACLs or client quotas. The operations are
// those Kafka's authorizer asks for the same requests.
func adminGated(c core.Command) ([]adminCheck, bool) {
	onCluster := func(op int8) []adminCheck { return []adminCheck{{ACLResourceCluster, ClusterResourceName, op}} }
	switch c := c.(type) {
	case topics.DeleteTopic:
		return []adminCheck{{ACLResourceTopic, c.Name, ACLOpDelete}}, true
	case topics.DeleteRecords:
		return []adminCheck{{ACLResourceTopic, c.Topic, ACLOpDelete}}, true
	case topics.AlterConfigs:
		return []adminCheck{{ACLResourceTopic, c.Topic, ACLOpAlterConfigs}}, true
	case cluster.AlterBrokerConfigs:
		return onCluster(ACLOpAlterConfigs), true
	case topics.AlterLogDefaults:
		return onCluster(ACLOpAlterConfigs), true
	case groups.DeleteGroup:
		return []adminCheck{{ACLResourceGroup, c.Group, ACLOpDelete}}, true
	case groups.OffsetDelete:
		return []adminCheck{{ACLResourceGroup, c.Group, ACLOpDelete}, {ACLResourceTopic, c.Topic, ACLOpRead}}, true
	case groups.OffsetCommit:
		if c.Generation >= 0 {
			return nil, false // a member's commit, in its generation
		}
		return []adminCheck{{ACLResourceGroup, c.Group, ACLOpRead}, {ACLResourceTopic, c.Topic, ACLOpRead}}, true
	case AlterScramCredentials:
		return onCluster(ACLOpAlter), true
	case CreateACL, DeleteACLs:
		return onCluster(ACLOpAlter), true
	case AlterClientQuotas, AlterIPQuotas:
		return onCluster(ACLOpAlterConfigs), true
	}
	return nil, false
}

// checkSignedAdmin is SignedAdmin's stateless check: a valid principal, a
// signature of ed25519's size, and a command that decodes, is one the
// setting gates, and passes its own check (check: the registry's
// CheckCommand; before app version 4, the one that predates tenants'
// names, CheckSignedAdminStrict; under version 4, the one that predates
// the tenants' rate quotas, CheckSignedAdminWith). It returns the command.
func checkSignedAdmin(g *core.Registry, gates *AdminGates, c SignedAdmin, check func(core.Command) core.Result) (core.Command, core.Result) {
	if err := proof.ValidPrincipal(c.Principal); err != nil {
		return nil, core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	if len(c.Signature) != ed25519.SignatureSize {
		return nil, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a signature is %d bytes, got %d", ed25519.SignatureSize, len(c.Signature)))
	}
	inner, err := DecodeOne(g, c.Command)
	if err != nil {
		return nil, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the signed command does not decode: %v", err))
	}
	if _, ok := gates.gated(inner); !ok {
		return nil, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%s is not an administrative command: it is never signed", g.KindName(inner.Kind())))
	}
	if d, ok := inner.(topics.DeleteTopic); ok && d.Name == "" {
		return nil, core.Fail(kerr.InvalidRequest.Code, "a signed DeleteTopic names its topic")
	}
	if r := check(inner); r.Code != 0 {
		return nil, r
	}
	return inner, core.Result{}
}

// CheckSignedAdminWith is SignedAdmin's check with check in place of the
// signed command's own: the tenants module runs it under app versions
// whose binaries checked some commands more strictly.
func CheckSignedAdminWith(g *core.Registry, gates *AdminGates, c SignedAdmin, check func(core.Command) core.Result) core.Result {
	_, r := checkSignedAdmin(g, gates, c, check)
	return r
}

// CheckSignedAdminStrict is SignedAdmin's check as it was before app
// version 4: the signed command's check takes topic names without a
// tenant (topics.CheckTopicCommandStrict, groups.CheckGroupCommandStrict).
// The tenants module runs it in place of the check under those versions.
func CheckSignedAdminStrict(g *core.Registry, gates *AdminGates, c SignedAdmin) core.Result {
	_, r := checkSignedAdmin(g, gates, c, func(inner core.Command) core.Result {
		if r := topics.CheckTopicCommandStrict(inner); r.Code != 0 {
			return r
		}
		if r := groups.CheckGroupCommandStrict(inner); r.Code != 0 {
			return r
		}
		return g.CheckCommand(inner)
	})
	return r
}

// adminSignedOn reports whether stele.admin.signed is true as the block
// being applied sees it.
func (f *Security) adminSignedOn() bool {
	return cluster.ConfigTrue(f.BrokerCfgs[""][cluster.AdminSignedConfig])
}

// unsignedText is the message of a gated command refused for want of a
// signature.
const unsignedText = "stele.admin.signed=true: %s must be signed by a principal the ACLs allow (stele --sign KEY --principal NAME ...; docs/security.md#signed-administration)"

// refuseUnsigned is the security module's command gate: outside a
// SignedAdmin, a command that would change stele.admin.signed (either
// way), and under stele.admin.signed a gated command, is refused with
// POLICY_VIOLATION.
func (f *Security) refuseUnsigned(gates *AdminGates, c core.Command) (core.Result, bool) {
	if f.signedBy != "" {
		return core.Result{}, true
	}
	if b, ok := c.(cluster.AlterBrokerConfigs); ok && b.Broker == "" {
		next, err := cluster.ApplyBrokerChanges(f.BrokerCfgs, b)
		if err == nil && cluster.ConfigTrue(next[cluster.AdminSignedConfig]) != f.adminSignedOn() {
			return core.Fail(kerr.PolicyViolation.Code, cluster.AdminSignedConfig+" changes only by a command signed by a principal the ACLs allow to AlterConfigs the cluster (stele --sign KEY --principal NAME ...; docs/security.md#signed-administration)"), false
		}
	}
	if _, gated := gates.gated(c); gated && f.adminSignedOn() {
		return core.Fail(kerr.PolicyViolation.Code, fmt.Sprintf(unsignedText, f.Registry().KindName(c.Kind()))), false
	}
	return core.Result{}, true
}

// applySignedAdmin verifies a signed command and applies it.
func (f *Security) applySignedAdmin(gates *AdminGates, c SignedAdmin, at core.CmdAt) core.Result {
	if f.Version < SecurityVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("signed administration needs app version %d; this chain runs %d (stele cluster upgrade)", SecurityVersion, f.Version))
	}
	// f.apply ran SignedAdmin's check (the command decodes, is gated and
	// passes its own check) before this: decoding cannot fail here.
	inner, err := DecodeOne(f.Registry(), c.Command)
	if err != nil {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the signed command does not decode: %v", err))
	}
	pub, err := f.AppliedProducerKey(c.Principal)
	switch {
	case errors.Is(err, trust.ErrNoProducerKey):
		return core.Fail(kerr.SaslAuthenticationFailed.Code, fmt.Sprintf("principal %s has no registered key (stele producer-key register)", c.Principal))
	case err != nil:
		return f.LocalFault("reading producer key of %s: %w", c.Principal, err)
	}
	if !ed25519.Verify(pub, proof.AdminMessage(f.opts.ChainID, c.Principal, c.Seq, c.Command), c.Signature) {
		return core.Fail(kerr.SaslAuthenticationFailed.Code, fmt.Sprintf("the signature of %s's command (sequence %d) does not verify with its registered key on chain %s", c.Principal, c.Seq, f.opts.ChainID))
	}
	k := string(trust.SeqKey(c.Principal, c.Seq))
	used := f.SeqsAdded[k]
	if !used {
		if _, used, err = f.Store.Get([]byte(k)); err != nil {
			return f.LocalFault("reading sequence %d of %s: %w", c.Seq, c.Principal, err)
		}
	}
	if used {
		return core.Fail(kerr.SaslAuthenticationFailed.Code, fmt.Sprintf("%s's sequence %d was used before: a replay", c.Principal, c.Seq))
	}
	if f.SeqsAdded == nil {
		f.SeqsAdded = map[string]bool{}
	}
	f.SeqsAdded[k] = true
	checks, _ := gates.gated(inner)
	principal := "User:" + c.Principal
	tenant := ""
	if f.AdminTenant != nil {
		tenant = f.AdminTenant(c.Principal, inner)
	}
	for _, ch := range checks {
		allowed := f.authorizeInBlock(AuthorizeRequest{Principal: principal, Operation: ch.Op, ResourceType: ch.ResourceType, ResourceName: ch.Name})
		if !allowed && tenant != "" && ch.ResourceType == ACLResourceCluster && ch.Name == ClusterResourceName {
			allowed = f.authorizeInBlock(AuthorizeRequest{Principal: principal, Operation: ch.Op, ResourceType: ch.ResourceType, ResourceName: TenantCluster(tenant)})
		}
		if !allowed {
			return core.Fail(authorizationCode(ch.ResourceType), fmt.Sprintf("%s may not %s %s %q: no ACL in the state allows it (signed commands are authorized by the ACLs alone)", principal, aclOpName(ch.Op), aclResourceName(ch.ResourceType), ch.Name))
		}
	}
	f.signedBy = c.Principal
	defer func() { f.signedBy = "" }()
	return f.Apply(inner, at.Tx, at.Cmd)
}

// authorizeInBlock is ACLs.Authorize over the ACLs as the block being
// applied sees them, for a command applied without a host: only entries
// for every host (*) apply; no super user; a resource no ACL names is
// denied.
func (f *Security) authorizeInBlock(q AuthorizeRequest) bool {
	v := &ACLs{byResource: map[aclResource][]aclEntry{}}
	look := func(r aclResource) {
		if es := f.acls[r]; len(es) > 0 {
			v.byResource[r] = sortedEntries(es)
		}
	}
	look(aclResource{q.ResourceType, ACLPatternLiteral, q.ResourceName})
	look(aclResource{q.ResourceType, ACLPatternLiteral, ACLWildcard})
	for i := 1; i <= len(q.ResourceName); i++ {
		look(aclResource{q.ResourceType, ACLPatternPrefixed, q.ResourceName[:i]})
	}
	q.Host, q.SuperUser, q.AllowIfNoACL = "\x00", false, false
	return v.Authorize(q)
}

// authorizationCode is Kafka's error for a denied operation on a resource
// of type t.
func authorizationCode(t int8) int16 {
	switch t {
	case ACLResourceTopic:
		return kerr.TopicAuthorizationFailed.Code
	case ACLResourceGroup:
		return kerr.GroupAuthorizationFailed.Code
	case ACLResourceTransactionalID:
		return kerr.TransactionalIDAuthorizationFailed.Code
	}
	return kerr.ClusterAuthorizationFailed.Code
}

func aclOpName(op int8) string {
	switch op {
	case ACLOpRead:
		return "Read"
	case ACLOpDelete:
		return "Delete"
	case ACLOpAlter:
		return "Alter"
	case ACLOpAlterConfigs:
		return "AlterConfigs"
	}
	return fmt.Sprintf("operation %d", op)
}

func aclResourceName(t int8) string {
	switch t {
	case ACLResourceTopic:
		return "topic"
	case ACLResourceGroup:
		return "group"
	case ACLResourceCluster:
		return "cluster"
	}
	return fmt.Sprintf("resource type %d", t)
}
