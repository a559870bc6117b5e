// Package tenants is the state machine's tenants module (issue 18,
// docs/tenants.md): the tenants of a cluster, their quotas, and the rules
// that keep a tenant's names its own.
//
// A tenant is a name (core.ValidTenantName) and its quotas. The tenant is
// part of every name it owns in the state (core/names.go): its topics,
// group ids and transactional ids are tenant~NAME, its users NAME@tenant.
// So the state machine, not one broker's front-end, knows whose a name
// is, and deleting a tenant removes everything it owns on every broker
// alike, in the one block that applies the deletion: its transactions
// (aborted when open), groups with their members and offsets, topics with
// their data, users, the ACLs on its resources and for its users, its
// users' client quotas and producer keys, its schema registry, and the
// tenant itself.
//
// Three commands, each applied from app version 4 (TenantsVersion) and
// gated by stele.admin.signed (a cluster administrator's ALTER on the
// cluster, registered with security.AdminGates): CreateTenant,
// DeleteTenant and AlterTenantQuotas. A tenant cannot be created while a
// name of the default tenant reads as one of its own (a group id
// acme~x, a transactional id acme~t, a user alice@acme), so no name ever
// changes hands.
//
// The module's command gates (gates.go) refuse a topic of a tenant that
// does not exist, and what would take a tenant past its quota of topics,
// partitions or groups, with POLICY_VIOLATION; its produce check, a produce
// that would take it past its stored bytes. Before app version 4 they
// make topic names with a tenant as invalid as they were before tenants
// existed, with the results a binary that predates tenants gives, so
// brokers of two releases never disagree while a cluster upgrades.
//
// It is the top module: it uses topics, groups and producers (the names
// it owns there, a tenant's stored bytes), trust (its users' producer keys;
// it sets trust.SignerTenant), cluster (the app version) and security (its
// users, ACLs and quotas; signed administration's extension point; it sets
// security.AdminTenant, so a tenant's user signs administration inside its
// tenant from app version 6), schemas (its registry; it sets
// schemas.TenantExists), shares (its share groups) and plugins (its
// deployments). Nothing uses it.
//
// State, in the metadata store:
//
//	n/<tenant>   the tenant: when it was created, its quotas
package tenants

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/plugins"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/schemas"
	"github.com/stele-io/stele/internal/fsm/security"
	"github.com/stele-io/stele/internal/fsm/shares"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// ModTenants is the tenants module.
const ModTenants core.Module = "tenants"

// The tenants module's commands.
const (
	KindCreateTenant      core.Kind = 32
	KindDeleteTenant      core.Kind = 33
	KindAlterTenantQuotas core.Kind = 34
)

// TenantsVersion is the app version from which tenants exist.
const TenantsVersion = 4

// Version5 is the app version from which a tenant may have the quotas
// its brokers enforce on their own (connections, producer_byte_rate,
// consumer_byte_rate), has a CLUSTER resource of its own
// (security.TenantCluster, acme~kafka-cluster) whose ACLs make its
// administrators, and its users sign records over its topics' names as it
// sees them, for its topics only (signerTenant); OffsetDelete sees that a
// tenant's classic consumers subscribe to its topics by their short names
// (gates.go). Under version 4 the new
// keys and cluster resource names are as invalid as they were to the
// binaries of that version (gates.go).
const Version5 = 5

// Version6 is the app version from which a tenant's user signs
// administration inside its tenant with the ACLs on the tenant's own
// CLUSTER resource (adminTenant, security.AdminTenant): under
// stele.admin.signed a tenant's administrator manages its users, ACLs and
// client quotas as it does with the Kafka admin APIs. And from which a
// transaction's offsets cannot create a group past the tenant's quota of
// groups (gates.go's groupQuota).
const Version6 = 6

// ShareGroupsQuotaVersion is the app version from which a tenant's share
// groups count against its quota of groups, and a command that would
// create one past it is refused (gates.go's groupQuota).
const ShareGroupsQuotaVersion = 16

// The quotas a tenant may have, each a whole number, 0 or more. A tenant
// without a quota of a kind has no limit of that kind.
const (
	// QuotaTopics bounds the tenant's topics.
	QuotaTopics = "topics"
	// QuotaPartitions bounds the partitions of all its topics.
	QuotaPartitions = "partitions"
	// QuotaGroups bounds its consumer groups, and from app version 16
	// (ShareGroupsQuotaVersion) its share groups with them.
	QuotaGroups = "groups"

	// The quotas each broker enforces on the tenant's connections to it,
	// from app version 5 (Version5), as Kafka's client quotas are
	// enforced: per broker, the whole tenant's traffic counted together.

	// QuotaConnections bounds the tenant's authenticated connections to
	// each broker.
	QuotaConnections = "connections"
	// QuotaProducerByteRate bounds the bytes a second the tenant's
	// produce requests carry to each broker (throttled, as
	// producer_byte_rate).
	QuotaProducerByteRate = "producer_byte_rate"
	// QuotaConsumerByteRate bounds the bytes a second each broker's fetch
	// answers carry to the tenant (throttled, as consumer_byte_rate).
	QuotaConsumerByteRate = "consumer_byte_rate"

	// QuotaStoredBytes bounds the bytes of all its partitions' logs, from
	// app version 5: a produce that would take it past them is refused
	// whole (gates.go).
	QuotaStoredBytes = "stored_bytes"
)

// QuotaKeys are the quota keys a tenant may have, sorted.
var QuotaKeys = []string{QuotaConnections, QuotaConsumerByteRate, QuotaGroups, QuotaPartitions, QuotaProducerByteRate, QuotaStoredBytes, QuotaTopics}

// maxStoredBytes bounds a stored_bytes quota (1 EiB); the other quotas
// are at most math.MaxInt32.
const maxStoredBytes = 1 << 60

// quotaKeysV4 are the quota keys app version 4 knows.
var quotaKeysV4 = []string{QuotaGroups, QuotaPartitions, QuotaTopics}

// maxQuotas bounds the quotas one command may name.
const maxQuotas = 16

// TenantQuota is one of a tenant's quotas.
type TenantQuota struct {
	Key   string
	Value int64
}

// TenantQuotaOp sets (Remove false) or removes one quota.
type TenantQuotaOp struct {
	Key    string
	Value  int64
	Remove bool
}

// CreateTenant creates a tenant with its quotas.
type CreateTenant struct {
	Name   string
	Quotas []TenantQuota
}

// DeleteTenant deletes a tenant and everything it owns.
type DeleteTenant struct {
	Name string
}

// AlterTenantQuotas sets and removes a tenant's quotas, all or nothing.
type AlterTenantQuotas struct {
	Name string
	Ops  []TenantQuotaOp
}

func (CreateTenant) Kind() core.Kind      { return KindCreateTenant }
func (DeleteTenant) Kind() core.Kind      { return KindDeleteTenant }
func (AlterTenantQuotas) Kind() core.Kind { return KindAlterTenantQuotas }

func (c CreateTenant) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.Count(len(c.Quotas))
	for _, q := range c.Quotas {
		w.Str(q.Key)
		w.I64(q.Value)
	}
}

func decodeCreateTenant(r *core.Reader) CreateTenant {
	c := CreateTenant{Name: r.Str()}
	for i, n := 0, r.Count(9); i < n && r.E == nil; i++ {
		c.Quotas = append(c.Quotas, TenantQuota{Key: r.Str(), Value: r.I64()})
	}
	return c
}

func (c DeleteTenant) Encode(w *core.Writer) { w.Str(c.Name) }

func decodeDeleteTenant(r *core.Reader) DeleteTenant { return DeleteTenant{Name: r.Str()} }

func (c AlterTenantQuotas) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.Count(len(c.Ops))
	for _, op := range c.Ops {
		w.Str(op.Key)
		w.I64(op.Value)
		w.Bool(op.Remove)
	}
}

func decodeAlterTenantQuotas(r *core.Reader) AlterTenantQuotas {
	c := AlterTenantQuotas{Name: r.Str()}
	for i, n := 0, r.Count(10); i < n && r.E == nil; i++ {
		c.Ops = append(c.Ops, TenantQuotaOp{Key: r.Str(), Value: r.I64(), Remove: r.Bool()})
	}
	return c
}

// CheckQuota says why key=v cannot be one of a tenant's quotas.
func CheckQuota(key string, v int64) error { return checkQuota(QuotaKeys, key, v) }

func checkQuota(keys []string, key string, v int64) error {
	if !slices.Contains(keys, key) {
		return fmt.Errorf("unknown tenant quota %q: a tenant's quotas are %v (docs/tenants.md)", key, keys)
	}
	limit := int64(math.MaxInt32)
	if key == QuotaStoredBytes {
		limit = maxStoredBytes
	}
	if v < 0 || v > limit {
		return fmt.Errorf("tenant quota %s=%d: a quota is a whole number from 0 to %d", key, v, limit)
	}
	return nil
}

func checkTenantCommand(c core.Command) core.Result { return checkTenantCommandKeys(c, QuotaKeys) }

// checkTenantCommandKeys is the check of a tenant command whose quotas may
// be keys only.
func checkTenantCommandKeys(c core.Command, keys []string) core.Result {
	var name string
	var ops []TenantQuotaOp
	switch c := c.(type) {
	case CreateTenant:
		name = c.Name
		for _, q := range c.Quotas {
			ops = append(ops, TenantQuotaOp{Key: q.Key, Value: q.Value})
		}
	case DeleteTenant:
		name = c.Name
	case AlterTenantQuotas:
		name, ops = c.Name, c.Ops
		if len(ops) == 0 {
			return core.Fail(kerr.InvalidRequest.Code, "no quota to set or remove")
		}
	}
	if err := core.ValidTenantName(name); err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	if len(ops) > maxQuotas {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%d quotas: at most %d", len(ops), maxQuotas))
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Key] {
			return core.Fail(kerr.InvalidRequest.Code, "quota "+op.Key+" given twice")
		}
		seen[op.Key] = true
		if op.Remove {
			if !slices.Contains(keys, op.Key) {
				return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("unknown tenant quota %q", op.Key))
			}
			continue
		}
		if err := checkQuota(keys, op.Key, op.Value); err != nil {
			return core.Fail(kerr.InvalidRequest.Code, err.Error())
		}
	}
	return core.Result{}
}

// Tenant is one tenant as the state holds it.
type Tenant struct {
	Name string
	// CreatedHeight is the height of the block that created it.
	CreatedHeight int64
	// Quotas holds its quotas by key; a key absent has no limit.
	Quotas map[string]int64
}

// Tenants is the tenants module, its part of a state machine.
type Tenants struct {
	*core.Machine
	topics   *topics.Topics
	groups   *groups.Coordinator
	txns     *producers.TxnCoordinator
	trust    *trust.Trust
	cluster  *cluster.Cluster
	security *security.Security
	schemas  *schemas.Schemas
	shares   *shares.Shares
	plugins  *plugins.Plugins

	byName map[string]*Tenant // never nil once loaded
	dirty  map[string]bool
	fresh  bool // changed since the last publish
	view   atomic.Pointer[View]
}

// Modules are the modules below the tenants module that it works on.
type Modules struct {
	Topics    *topics.Topics
	Groups    *groups.Coordinator
	Producers *producers.TxnCoordinator
	Trust     *trust.Trust
	Cluster   *cluster.Cluster
	Security  *security.Security
	Schemas   *schemas.Schemas
	Shares    *shares.Shares
	Plugins   *plugins.Plugins
}

// NewTenants is the tenants module of the machine m, above the modules
// of below.
func NewTenants(m *core.Machine, below Modules) *Tenants {
	f := &Tenants{Machine: m, topics: below.Topics, groups: below.Groups, txns: below.Producers,
		trust: below.Trust, cluster: below.Cluster, security: below.Security, schemas: below.Schemas, shares: below.Shares, plugins: below.Plugins}
	below.Trust.SignerTenant = f.signerTenant
	below.Schemas.TenantExists = func(t string) bool { return f.byName[t] != nil }
	below.Security.AdminTenant = f.adminTenant
	return f
}

// adminTenant is the tenant whose own CLUSTER resource may authorize the
// cluster operations of inner, signed by principal
// (security.AdminTenant): principal's tenant, when it exists, the app
// version is Version6 or more and inner stays inside that tenant (see
// insideTenant); "" otherwise.
func (f *Tenants) adminTenant(principal string, inner core.Command) string {
	if f.cluster.Version < Version6 {
		return ""
	}
	t, _ := core.SplitUser(principal)
	if t == "" || f.byName[t] == nil || !insideTenant(t, inner) {
		return ""
	}
	return t
}

// insideTenant reports whether c changes nothing but tenant's: the
// credentials of one of its users; ACLs for its users' principals (or
// User:*, which on its resources only its own users reach) on its topics,
// groups, transactional ids (by name or by a prefix within the tenant) or
// its own CLUSTER resource; the client quotas of one of its
// users (with or without a client id). What a tenant's administrator may
// do with the Kafka admin APIs, and no other command: not a broker's or
// the cluster's configs, an IP's quotas, the default user's quotas, nor
// tenants.
func insideTenant(tenant string, c core.Command) bool {
	ownUser := func(u string) bool { t, _ := core.SplitUser(u); return t == tenant }
	ownACL := func(b security.ACLBinding) bool {
		return (b.Principal == "User:"+security.ACLWildcard || security.TenantPrincipal(b.Principal, tenant)) &&
			security.TenantResource(b.ResourceType, b.ResourceName, tenant)
	}
	switch c := c.(type) {
	case security.AlterScramCredentials:
		return ownUser(c.User)
	case security.CreateACL:
		return ownACL(c.ACL)
	case security.DeleteACLs:
		return len(c.ACLs) > 0 && !slices.ContainsFunc(c.ACLs, func(b security.ACLBinding) bool { return !ownACL(b) })
	case security.AlterClientQuotas:
		u := c.Entity.User
		return u.Set && !u.Default && ownUser(u.Name)
	case plugins.DeployPlugin:
		return ownTopic(tenant, c.Topic)
	case plugins.PluginChunk:
		return ownTopic(tenant, c.Topic)
	case plugins.RemovePlugin:
		return ownTopic(tenant, c.Topic)
	}
	return false
}

// ownTopic reports whether topic is one of tenant's.
func ownTopic(tenant, topic string) bool { t, _ := core.SplitTenant(topic); return t == tenant }

// signerTenant is the tenant whose user principal is, as the block being
// applied sees it: "" for the default tenant's, and for every principal
// under app versions below Version5 (trust.SignerTenant).
func (f *Tenants) signerTenant(principal string) string {
	if f.cluster.Version < Version5 {
		return ""
	}
	t, _ := core.SplitUser(principal)
	if t == "" || f.byName[t] == nil {
		return ""
	}
	return t
}

// tenantsOf is the tenants module of the machine m.
func tenantsOf(m *core.Machine) *Tenants {
	return m.App.(interface{ TenantsModule() *Tenants }).TenantsModule()
}

// RegisterTenants registers the tenants module (the application's
// buildRegistry calls it): its commands, its state's step, its command
// gates (gates.go), and its commands with signed administration.
func RegisterTenants(r *core.Registry, admin *security.AdminGates, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, tenantsOf, KindCreateTenant, "CreateTenant", ModTenants, decodeCreateTenant, checkTenantCommand,
		func(f *Tenants, c CreateTenant, _ core.CmdAt) core.Result { return f.createTenant(c) })
	core.RegisterModuleCommand(r, tenantsOf, KindDeleteTenant, "DeleteTenant", ModTenants, decodeDeleteTenant, checkTenantCommand,
		func(f *Tenants, c DeleteTenant, _ core.CmdAt) core.Result { return f.deleteTenant(c) })
	core.RegisterModuleCommand(r, tenantsOf, KindAlterTenantQuotas, "AlterTenantQuotas", ModTenants, decodeAlterTenantQuotas, checkTenantCommand,
		func(f *Tenants, c AlterTenantQuotas, _ core.CmdAt) core.Result { return f.alterTenantQuotas(c) })
	core.RegisterModuleStep(r, tenantsOf, core.ModuleStep[*Tenants]{Rank: 140, Name: "tenants", Module: ModTenants,
		Empty: emptyTenants, Load: loadTenants, Stage: stageTenants, Publish: publishTenants})
	onCluster := func(core.Command) []security.AdminCheck {
		return []security.AdminCheck{{ResourceType: security.ACLResourceCluster, Name: security.ClusterResourceName, Op: security.ACLOpAlter}}
	}
	for _, k := range []core.Kind{KindCreateTenant, KindDeleteTenant, KindAlterTenantQuotas} {
		admin.Gate(k, onCluster)
	}
	registerGates(r, admin, h) // gates.go
}

func (f *Tenants) versionFail() (core.Result, bool) {
	if v := f.cluster.Version; v < TenantsVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("tenants need app version %d; this chain runs %d (stele cluster upgrade)", TenantsVersion, v)), true
	}
	return core.Result{}, false
}

func (f *Tenants) createTenant(c CreateTenant) core.Result {
	if r, failed := f.versionFail(); failed {
		return r
	}
	if f.byName[c.Name] != nil {
		return core.Fail(kerr.DuplicateResource.Code, fmt.Sprintf("tenant %s exists", c.Name))
	}
	if in := f.inUse(c.Name); in != "" {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("tenant name %s is in use by the default tenant's %s: delete it first (docs/tenants.md)", c.Name, in))
	}
	t := &Tenant{Name: c.Name, CreatedHeight: f.Height, Quotas: map[string]int64{}}
	for _, q := range c.Quotas {
		t.Quotas[q.Key] = q.Value
	}
	f.byName[c.Name] = t
	f.dirty[c.Name], f.fresh = true, true
	return core.Result{}
}

// inUse names a name of the default tenant that reads as tenant's, or "".
func (f *Tenants) inUse(tenant string) string {
	if g := f.groups.FirstGroupReadingAs(tenant); g != "" {
		return fmt.Sprintf("group %q", g)
	}
	if id := f.txns.FirstTxnIDReadingAs(tenant); id != "" {
		return fmt.Sprintf("transactional id %q", id)
	}
	if u := f.security.FirstUserReadingAs(tenant); u != "" {
		return fmt.Sprintf("user %q", u)
	}
	return ""
}

// Removed are the kinds DeleteTenant's answer counts (Result.Counts), in
// the order it removes them.
var Removed = []string{"transactional_ids", "groups", "topics", "partitions", "users", "acls", "quotas", "producer_keys", "schemas", "share_groups"}

func (f *Tenants) deleteTenant(c DeleteTenant) core.Result {
	if r, failed := f.versionFail(); failed {
		return r
	}
	if f.byName[c.Name] == nil {
		return core.Fail(kerr.ResourceNotFound.Code, fmt.Sprintf("tenant %s does not exist", c.Name))
	}
	// Plugins first (from app version 17; the topics' deletion would
	// remove them uncounted), then transactions: an open one's abort
	// markers go to its partitions, which the topics' deletion then
	// removes.
	pluginsRemoved := -1
	if f.cluster.Version >= plugins.Version {
		pluginsRemoved = f.plugins.RemoveTenant(c.Name)
	}
	txns := f.txns.RemoveTenantTxns(c.Name)
	grps := f.groups.RemoveTenantGroups(c.Name)
	tops, parts := f.topics.RemoveTenantTopics(c.Name)
	users, acls, quotas := f.security.RemoveTenant(c.Name)
	keys, err := f.trust.RemoveTenantKeys(c.Name)
	if err != nil {
		return f.LocalFault("removing the producer keys of tenant %s: %w", c.Name, err)
	}
	regSchemas := f.schemas.RemoveTenant(c.Name)
	shareGroups := f.shares.RemoveTenantGroups(c.Name)
	delete(f.byName, c.Name)
	f.dirty[c.Name], f.fresh = true, true
	counts := []int{txns, grps, tops, parts, users, acls, quotas, keys, regSchemas, shareGroups}
	r := core.Result{}
	for i, what := range Removed {
		r.Counts = append(r.Counts, core.Count{What: what, N: counts[i]})
	}
	if pluginsRemoved >= 0 {
		r.Counts = append(r.Counts, core.Count{What: "plugins", N: pluginsRemoved})
	}
	return r
}

func (f *Tenants) alterTenantQuotas(c AlterTenantQuotas) core.Result {
	if r, failed := f.versionFail(); failed {
		return r
	}
	t := f.byName[c.Name]
	if t == nil {
		return core.Fail(kerr.ResourceNotFound.Code, fmt.Sprintf("tenant %s does not exist", c.Name))
	}
	for _, op := range c.Ops {
		if op.Remove {
			delete(t.Quotas, op.Key)
		} else {
			t.Quotas[op.Key] = op.Value
		}
	}
	f.dirty[c.Name], f.fresh = true, true
	return core.Result{}
}

const tenantsPrefix = "n/"

func tenantKey(name string) []byte { return append([]byte(tenantsPrefix), name...) }

// EncodeTenant is a tenant's n/ value:
//
//	u8 version | i64 created height | count | (str key | i64 value)*
func EncodeTenant(t *Tenant) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.I64(t.CreatedHeight)
	keys := core.SortedKeys(t.Quotas)
	w.Count(len(keys))
	for _, k := range keys {
		w.Str(k)
		w.I64(t.Quotas[k])
	}
	return w.B
}

// DecodeTenant reads a tenant's n/ value (EncodeTenant).
func DecodeTenant(name string, v []byte) (*Tenant, error) {
	if err := core.ValidTenantName(name); err != nil {
		return nil, fmt.Errorf("stele/fsm: %w: %v", core.ErrMalformed, err)
	}
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: tenant %s: state format %d not supported", name, ver)
	}
	t := &Tenant{Name: name, CreatedHeight: r.I64(), Quotas: map[string]int64{}}
	for i, n := 0, r.Count(9); i < n && r.E == nil; i++ {
		k, q := r.Str(), r.I64()
		if r.E != nil {
			break
		}
		if err := CheckQuota(k, q); err != nil {
			return nil, fmt.Errorf("stele/fsm: %w: tenant %s: %v", core.ErrMalformed, name, err)
		}
		t.Quotas[k] = q
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("stele/fsm: reading tenant %s: %w", name, err)
	}
	return t, nil
}

func emptyTenants(f *Tenants) {
	f.byName = map[string]*Tenant{}
	f.dirty = map[string]bool{}
	f.fresh = true
}

func loadTenants(f *Tenants) error {
	emptyTenants(f)
	return f.Store.Scan([]byte(tenantsPrefix), func(k, v []byte) error {
		name := string(bytes.TrimPrefix(k, []byte(tenantsPrefix)))
		t, err := DecodeTenant(name, v)
		if err != nil {
			return err
		}
		f.byName[name] = t
		return nil
	})
}

func stageTenants(f *Tenants, b *core.StateBatch) error {
	for _, name := range core.SortedKeys(f.dirty) {
		if t := f.byName[name]; t != nil {
			b.Set(tenantKey(name), EncodeTenant(t))
		} else {
			b.Delete(tenantKey(name))
		}
	}
	clear(f.dirty)
	return nil
}

func publishTenants(f *Tenants, _ bool) {
	if !f.fresh && f.view.Load() != nil {
		return
	}
	f.fresh = false
	v := &View{byName: make(map[string]TenantInfo, len(f.byName))}
	for name, t := range f.byName {
		q := make(map[string]int64, len(t.Quotas))
		for k, x := range t.Quotas {
			q[k] = x
		}
		v.byName[name] = TenantInfo{Name: name, CreatedHeight: t.CreatedHeight, Quotas: q}
	}
	f.view.Store(v)
}

// TenantsView returns the committed tenants.
func (f *Tenants) TenantsView() *View { return f.view.Load() }

// View is the committed tenants, as readers see them.
type View struct {
	byName map[string]TenantInfo
}

// TenantInfo is one committed tenant; readers may not change Quotas.
type TenantInfo struct {
	Name          string
	CreatedHeight int64
	Quotas        map[string]int64
}

// Len is how many tenants there are.
func (v *View) Len() int {
	if v == nil {
		return 0
	}
	return len(v.byName)
}

// Get returns the tenant name.
func (v *View) Get(name string) (TenantInfo, bool) {
	if v == nil {
		return TenantInfo{}, false
	}
	t, ok := v.byName[name]
	return t, ok
}

// All returns every tenant, by name.
func (v *View) All() []TenantInfo {
	if v == nil {
		return nil
	}
	out := make([]TenantInfo, 0, len(v.byName))
	for _, name := range core.SortedKeys(v.byName) {
		out = append(out, v.byName[name])
	}
	return out
}
