// Package security is the state machine's security module: users and
// their SCRAM credentials (users.go), ACLs and the view the front-end
// authorizes with (acls.go, acls_view.go), client and IP quotas
// (quotas.go, ip_quotas.go), and signed administration (admin_signed.go:
// under stele.admin.signed the destructive and security commands are
// applied only when a principal the ACLs allow signed them).
//
// It uses the cluster module below it (the app version its commands need,
// the stele.admin.signed setting) and through it the trust module's
// producer keys and signed sequences; it names the topics and groups
// modules' commands it gates. It imports no module above it: the tenants
// module, above, adds its commands to signed administration through the
// extension point RegisterSecurity returns (AdminGates) and removes a
// tenant's users, ACLs and quotas with RemoveTenant (tenant_parts.go). It
// works on Security, its part of a state machine, which the application
// (package fsm) makes with NewSecurity and hands over through its
// SecurityModule method (securityOf).
package security

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/sasl"
)

// The security module's users (issue 17, docs/security.md): each user's
// SCRAM credentials, which SASL logins (SCRAM-SHA-256, SCRAM-SHA-512, and
// PLAIN checked against them) are verified with. As in Kafka, where they
// are records of the metadata log, they are replicated state: every
// broker authenticates every user alike, and the credentials are leaves
// under the app hash, so a snapshot's or a peer's are checked like any
// state. The state machine keeps only what RFC 5802 has a server keep
// (salt, iterations, StoredKey, ServerKey): the front-end that takes a
// password or a salted password (AlterUserScramCredentials) turns it into
// those before it submits, so neither is ever in a block.
//
// One command, AlterScramCredentials, sets and deletes one user's
// credentials, all or nothing, with Kafka's checks and codes
// (ControllerConfigurationValidator, ScramControlManager): an unknown
// mechanism UNSUPPORTED_SASL_MECHANISM, an empty name or an iteration
// count outside 4096-16384 UNACCEPTABLE_CREDENTIAL, a mechanism named
// twice DUPLICATE_RESOURCE, the deletion of a credential that does not
// exist RESOURCE_NOT_FOUND. A user exists while it has a credential.
// The commands apply from app version 3 (SecurityVersion): a chain at an
// older version refuses them, as a binary that predates them would.
//
// Who may change users (ALTER on the cluster) is checked by the front-end
// that takes the request; the command carries no principal (acls.go).
//
// State, in the metadata store:
//
//	i/<user>   the user's credentials, by mechanism

// KindAlterScramCredentials sets and deletes one user's SCRAM credentials.
const KindAlterScramCredentials core.Kind = 26

// SecurityVersion is the app version from which the security module's
// commands apply.
const SecurityVersion = 3

// maxUserName bounds a user name.
const maxUserName = 255

// AlterScramCredentials sets (Upserts) and deletes (Deletions) one user's
// credentials, all or nothing. With IfAbsent it applies only to a user
// that has no credential (the first admin of `stele serve
// --admin-password-file`, which every broker may submit): otherwise it is
// refused with DUPLICATE_RESOURCE and changes nothing.
type AlterScramCredentials struct {
	User      string
	IfAbsent  bool
	Upserts   []sasl.Credential
	Deletions []sasl.ScramMechanism
}

func (AlterScramCredentials) Kind() core.Kind { return KindAlterScramCredentials }

func (c AlterScramCredentials) Encode(w *core.Writer) {
	w.Str(c.User)
	w.Bool(c.IfAbsent)
	w.Count(len(c.Upserts))
	for _, u := range c.Upserts {
		encodeCredential(w, u)
	}
	w.Count(len(c.Deletions))
	for _, m := range c.Deletions {
		w.U8(uint8(m))
	}
}

func encodeCredential(w *core.Writer, c sasl.Credential) {
	w.U8(uint8(c.Mechanism))
	w.I32(c.Iterations)
	w.Bytes(c.Salt)
	w.Bytes(c.StoredKey)
	w.Bytes(c.ServerKey)
}

func decodeCredential(r *core.Reader) sasl.Credential {
	return sasl.Credential{Mechanism: sasl.ScramMechanism(r.U8()), Iterations: r.I32(),
		Salt: r.BytesCopy(), StoredKey: r.BytesCopy(), ServerKey: r.BytesCopy()}
}

// credentialMinSize is the fewest bytes an encoded credential takes.
const credentialMinSize = 1 + 4 + 3

func decodeAlterScramCredentials(r *core.Reader) AlterScramCredentials {
	c := AlterScramCredentials{User: r.Str(), IfAbsent: r.U8() == 1}
	for i, n := 0, r.Count(credentialMinSize); i < n && r.E == nil; i++ {
		c.Upserts = append(c.Upserts, decodeCredential(r))
	}
	for i, n := 0, r.Count(1); i < n && r.E == nil; i++ {
		c.Deletions = append(c.Deletions, sasl.ScramMechanism(r.U8()))
	}
	return c
}

// ModSecurity is the security module (the registry's documentation,
// core/registry.go, lists what each module owns).
const ModSecurity core.Module = "security"

// Security is the security module's part of a state machine: its state,
// the machine it runs on, and the cluster module below it (the app
// version, stele.admin.signed, and through it the trust module's producer
// keys and signed sequences).
type Security struct {
	*core.Machine
	*cluster.Cluster
	opts SecurityOptions
	// AdminTenant is a hook point for the tenants module, which sets it
	// when the machine is assembled (tenants.NewTenants): the tenant whose
	// own CLUSTER resource (TenantCluster) may stand for the cluster in a
	// signed command's authorizations, because principal is that tenant's
	// user and the command stays inside the tenant; "" otherwise (and when
	// nil). So a tenant's administrator signs its users, ACLs and client
	// quotas (admin_signed.go).
	AdminTenant func(principal string, inner core.Command) string
	securityState
}

// SecurityOptions are the security module's options (the application's
// Options').
type SecurityOptions struct {
	// ChainID is the chain a signed command must name (Options.ChainID).
	ChainID string
	// GenesisUsers are the users the chain starts with
	// (Options.GenesisUsers).
	GenesisUsers []GenesisUser
}

// NewSecurity is the security module of the machine m, above the cluster
// module c.
func NewSecurity(m *core.Machine, c *cluster.Cluster, o SecurityOptions) *Security {
	return &Security{Machine: m, Cluster: c, opts: o}
}

// securityOf is the security module of the machine m.
func securityOf(m *core.Machine) *Security {
	return m.App.(interface{ SecurityModule() *Security }).SecurityModule()
}

// RegisterSecurity registers the security module (the application's
// buildRegistry calls it): its users, ACLs, client quotas and signed
// administration. It returns signed administration's extension point,
// where the modules above add the commands of theirs it gates.
func RegisterSecurity(r *core.Registry) *AdminGates {
	gates := &AdminGates{byKind: map[core.Kind]func(core.Command) []AdminCheck{}}
	registerUsers(r)              // users.go
	registerACLs(r)               // acls.go
	registerQuotas(r)             // quotas.go
	registerIPQuotas(r)           // ip_quotas.go
	registerSignedAdmin(r, gates) // admin_signed.go
	return gates
}

// GenesisUser is a user the chain starts with (Options.GenesisUsers).
type GenesisUser struct {
	Name        string
	Credentials []sasl.Credential
}

// registerUsers registers AlterScramCredentials, the users' step and the
// genesis users' block-begin step.
func registerUsers(r *core.Registry) {
	core.RegisterModuleBlockBegin(r, securityOf, core.ModuleBlockBegin[*Security]{Rank: 40, Name: "genesis users", Module: ModSecurity,
		Run: func(f *Security, b core.Block) {
			if b.Height == 1 {
				f.createGenesisUsers()
			}
		}})
	core.RegisterModuleCommand(r, securityOf, KindAlterScramCredentials, "AlterScramCredentials", ModSecurity, decodeAlterScramCredentials,
		func(c core.Command) core.Result { return checkScramCredentials(c.(AlterScramCredentials)) },
		func(f *Security, c AlterScramCredentials, _ core.CmdAt) core.Result {
			return f.alterScramCredentials(c)
		})
	core.RegisterModuleStep(r, securityOf, core.ModuleStep[*Security]{Rank: 120, Name: "users", Module: ModSecurity,
		Empty: emptyUsers, Load: loadUsers, Stage: stageUsers, Publish: publishUsers})
}

// ValidUserName says why name cannot be a user's: empty (Kafka's
// "Username must not be empty"), longer than 255 bytes, not UTF-8, or
// holding a control character.
func ValidUserName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("Username must not be empty")
	case len(name) > maxUserName:
		return fmt.Errorf("a user name is at most %d bytes, this one %d", maxUserName, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("a user name is UTF-8")
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("a user name holds no control character")
	}
	return nil
}

// checkScramCredentials is AlterScramCredentials' stateless check.
func checkScramCredentials(c AlterScramCredentials) core.Result {
	if err := ValidUserName(c.User); err != nil {
		return core.Fail(kerr.UnacceptableCredential.Code, err.Error())
	}
	if len(c.Upserts) == 0 && len(c.Deletions) == 0 {
		return core.Fail(kerr.InvalidRequest.Code, "no credential to set or delete")
	}
	seen := map[sasl.ScramMechanism]bool{}
	mechs := make([]sasl.ScramMechanism, 0, len(c.Upserts)+len(c.Deletions))
	for _, u := range c.Upserts {
		mechs = append(mechs, u.Mechanism)
	}
	mechs = append(mechs, c.Deletions...)
	for _, m := range mechs {
		if !m.Valid() {
			return core.Fail(kerr.UnsupportedSaslMechanism.Code, "Unknown SCRAM mechanism")
		}
		if seen[m] {
			return core.Fail(kerr.DuplicateResource.Code, "A user credential cannot be altered twice in the same request")
		}
		seen[m] = true
	}
	for _, u := range c.Upserts {
		if err := u.Check(); err != nil {
			return core.Fail(kerr.UnacceptableCredential.Code, err.Error())
		}
	}
	return core.Result{}
}

// securityState is the security module's state.
type securityState struct {
	usersState
	aclsState     // acls.go
	quotasState   // quotas.go
	ipQuotasState // ip_quotas.go
}

// usersState is the security module's state of the users.
type usersState struct {
	// users holds each user's credentials by mechanism; a user with none
	// is absent. Never nil once loaded.
	users      map[string]map[sasl.ScramMechanism]sasl.Credential
	usersDirty map[string]bool // changed in the block: staged at its end
	usersNew   bool            // changed since the last publish
	usersView  atomic.Pointer[Users]
}

// alterScramCredentials applies c to the user's credentials.
func (f *Security) alterScramCredentials(c AlterScramCredentials) core.Result {
	if f.Version < SecurityVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("users need app version %d; this chain runs %d (stele cluster upgrade)", SecurityVersion, f.Version))
	}
	cur := f.users[c.User]
	if c.IfAbsent && len(cur) > 0 {
		return core.Fail(kerr.DuplicateResource.Code, fmt.Sprintf("user %q exists", c.User))
	}
	for _, m := range c.Deletions {
		if _, ok := cur[m]; !ok {
			return core.Fail(kerr.ResourceNotFound.Code, "Attempt to delete a user credential that does not exist")
		}
	}
	next := make(map[sasl.ScramMechanism]sasl.Credential, len(cur)+len(c.Upserts))
	for m, cr := range cur {
		next[m] = cr
	}
	for _, m := range c.Deletions {
		delete(next, m)
	}
	for _, u := range c.Upserts {
		next[u.Mechanism] = u
	}
	if len(next) == 0 {
		delete(f.users, c.User)
	} else {
		f.users[c.User] = next
	}
	f.usersDirty[c.User] = true
	f.usersNew = true
	return core.Result{}
}

// createGenesisUsers creates the genesis users as the first block begins,
// each as AlterScramCredentials would, when the chain's app version has
// users; a user that is not valid (ReadGenesis checked them) is skipped,
// the same on every broker.
func (f *Security) createGenesisUsers() {
	if f.Version < SecurityVersion {
		return
	}
	for _, u := range f.opts.GenesisUsers {
		c := AlterScramCredentials{User: u.Name, IfAbsent: true, Upserts: u.Credentials}
		if checkScramCredentials(c).Code == 0 {
			f.alterScramCredentials(c)
		}
	}
}

// Users is the committed users, as readers see them. Do not modify it: a
// new one is published at each Commit that changed them.
type Users struct {
	byName map[string]map[sasl.ScramMechanism]sasl.Credential
}

// Credential returns a user's credential for a mechanism.
func (u *Users) Credential(user string, m sasl.ScramMechanism) (sasl.Credential, bool) {
	if u == nil {
		return sasl.Credential{}, false
	}
	c, ok := u.byName[user][m]
	return c, ok
}

// Names returns the users, in order.
func (u *Users) Names() []string {
	if u == nil {
		return nil
	}
	return core.SortedKeys(u.byName)
}

// Exists reports whether the user has a credential.
func (u *Users) Exists(user string) bool { return u != nil && len(u.byName[user]) > 0 }

// Mechanisms returns a user's mechanisms and their iteration counts, in
// Kafka's order of mechanisms.
func (u *Users) Mechanisms(user string) []sasl.Credential {
	if u == nil {
		return nil
	}
	var out []sasl.Credential
	for _, m := range sasl.ScramMechanisms {
		if c, ok := u.byName[user][m]; ok {
			out = append(out, sasl.Credential{Mechanism: m, Iterations: c.Iterations})
		}
	}
	return out
}

// Users returns the committed users.
func (f *Security) Users() *Users { return f.usersView.Load() }

func UserKey(name string) []byte { return append([]byte(usersPrefix), name...) }

const usersPrefix = "i/"

// encodeUserCredentials is i/<user>'s value:
//
//	u8 version | count × credential, in mechanism order
func encodeUserCredentials(creds map[sasl.ScramMechanism]sasl.Credential) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	ms := make([]sasl.ScramMechanism, 0, len(creds))
	for m := range creds {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	w.Count(len(ms))
	for _, m := range ms {
		encodeCredential(w, creds[m])
	}
	return w.B
}

// DecodeUserCredentials reads i/<user>: at least one credential, each of
// a distinct mechanism, in order, and valid.
func DecodeUserCredentials(v []byte) (map[sasl.ScramMechanism]sasl.Credential, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); ver != core.PersistVersion {
		return nil, fmt.Errorf("stele/fsm: user credentials: state format %d not supported", ver)
	}
	out := map[sasl.ScramMechanism]sasl.Credential{}
	last := sasl.ScramMechanism(-1)
	for i, n := 0, r.Count(credentialMinSize); i < n && r.E == nil; i++ {
		c := decodeCredential(r)
		if r.E == nil {
			if c.Mechanism <= last {
				r.Fail("credentials out of order")
			} else if err := c.Check(); err != nil {
				r.Fail("credential: %v", err)
			}
		}
		last = c.Mechanism
		out[c.Mechanism] = c
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("stele/fsm: reading user credentials: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("stele/fsm: reading user credentials: %w: none stored", core.ErrMalformed)
	}
	return out, nil
}

func emptyUsers(f *Security) {
	f.users = map[string]map[sasl.ScramMechanism]sasl.Credential{}
	f.usersDirty = map[string]bool{}
	f.usersNew = true
}

// loadUsers reads every user at Open and after a snapshot's restore.
func loadUsers(f *Security) error {
	emptyUsers(f)
	return f.Store.Scan([]byte(usersPrefix), func(k, v []byte) error {
		name := string(bytes.TrimPrefix(k, []byte(usersPrefix)))
		if err := ValidUserName(name); err != nil {
			return fmt.Errorf("stele/fsm: user %q: %w: %v", name, core.ErrMalformed, err)
		}
		creds, err := DecodeUserCredentials(v)
		if err != nil {
			return fmt.Errorf("user %q: %w", name, err)
		}
		f.users[name] = creds
		return nil
	})
}

// stageUsers writes the users the block changed, in name order; a user
// left with no credential is deleted.
func stageUsers(f *Security, b *core.StateBatch) error {
	for _, name := range core.SortedKeys(f.usersDirty) {
		if creds := f.users[name]; len(creds) > 0 {
			b.Set(UserKey(name), encodeUserCredentials(creds))
		} else {
			b.Delete(UserKey(name))
		}
	}
	clear(f.usersDirty)
	return nil
}

// publishUsers gives readers a copy of the users when they changed (or
// were loaded) since the last publish.
func publishUsers(f *Security, _ bool) {
	if !f.usersNew && f.usersView.Load() != nil {
		return
	}
	f.usersNew = false
	cp := make(map[string]map[sasl.ScramMechanism]sasl.Credential, len(f.users))
	for name, creds := range f.users {
		c := make(map[sasl.ScramMechanism]sasl.Credential, len(creds))
		for m, cr := range creds {
			c[m] = cr
		}
		cp[name] = c
	}
	f.usersView.Store(&Users{byName: cp})
}
