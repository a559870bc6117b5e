package httpapi

// Who may use the HTTP API (issue 17, docs/security.md "The HTTP API"):
// each request has a principal, as a Kafka connection has — User:ANONYMOUS,
// or the subject of a verified client certificate (mutual TLS, mapped by
// ssl.principal.mapping.rules), or User:<name> of HTTP Basic credentials
// checked against the users' SCRAM credentials, as SASL PLAIN is. Each
// route that reads or writes what ACLs protect is authorized as the Kafka
// API doing the same is (routeACL): the same ACLs, super users and
// allow.everyone.if.no.acl.found. The routes that carry no record, and
// those whose writes prove themselves (signed upgrades, producer keys,
// signed administration), are open. A denial is 403 whether the topic
// exists or not; bad credentials are 401 after a delay, and five failures
// in a minute for one user from one address lock that user's Basic logins
// from it for the rest of the minute. A tenant's topics and groups
// (acme~orders) are denied to every principal but the super users and the
// tenant's own users, as on the Kafka API (docs/tenants.md); a tenant's
// user names its topics in a route's path by their short names and gets
// them back so in the JSON answers (proofs aside, which name what they
// prove), and may use none of the cluster's routes.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/sasl"
)

// Security says how the HTTP API authenticates and authorizes.
type Security struct {
	// Principals maps a verified client certificate's subject to its
	// principal (nil: Kafka's default, the subject as it is).
	Principals *listener.PrincipalMapper
	// BasicOverPlaintext accepts Basic credentials on a connection
	// without TLS: the broker's Kafka listeners take SASL in the clear
	// too (SASL_PLAINTEXT). Otherwise Basic needs TLS.
	BasicOverPlaintext bool
	// SuperUsers are super.users (User:admin always is one).
	SuperUsers []string
	// AllowIfNoACL is allow.everyone.if.no.acl.found.
	AllowIfNoACL bool
	// FailureDelay is how long a failed login waits before it is
	// answered (Kafka's connection.failed.authentication.delay.ms).
	FailureDelay time.Duration
}

// anonymous is the principal of a request that presents nothing.
const anonymous = "User:ANONYMOUS"

// routeACL is what a route needs: an operation on a resource named by the
// request, as Kafka asks for the same read or write. Routes absent from
// routeACLs are open.
type routeACL struct {
	resourceType int8
	op           int8
	name         func(*http.Request) string
	// topicOp, when not 0, also grants a schema registry route: that
	// operation on the topic of a subject the route is about
	// (registryACL); filtered lets the route through to a handler that
	// answers only what the principal may see.
	topicOp  int8
	filtered bool
}

func topicOf(r *http.Request) string   { return r.PathValue("topic") }
func clusterName(*http.Request) string { return fsm.ClusterResourceName }

// ownClusterName is the CLUSTER resource of the request's tenant: its own
// (acme~kafka-cluster) for a tenant's user.
func ownClusterName(r *http.Request) string {
	if t := registryTenant(r); t != "" {
		return fsm.TenantCluster(t)
	}
	return fsm.ClusterResourceName
}

// routeACLs are the protected routes (share groups: shares.go's comment
// says what each needs): records and keys read need READ on
// the topic (Fetch's), appends WRITE (Produce's), an offset's height
// DESCRIBE (ListOffsets'); a state proof may show any state (groups'
// offsets, configs), so it needs DESCRIBE on the cluster. Tenants are the
// cluster administrator's: DESCRIBE on the cluster reads them, ALTER
// changes them.
var routeACLs = map[string]*routeACL{
	"GET /v1/tables/{topic}/{key}":                                   &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"GET /v1/tables/{topic}/{key}/proof":                             &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"GET /v1/topics/{topic}/partitions/{partition}/offsets/{offset}": &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpDescribe, name: topicOf},
	"GET /v1/topics/{topic}/partitions/{partition}/proof":            &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"GET /v1/topics/{topic}/keys":                                    &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"GET /v1/topics/{topic}/records":                                 &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"GET /v1/topics/{topic}/subjects":                                &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"GET /v1/topics/{topic}/keys/{key}/events":                       &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpRead, name: topicOf},
	"POST /v1/topics/{topic}/keys/{key}/events":                      &routeACL{resourceType: fsm.ACLResourceTopic, op: fsm.ACLOpWrite, name: topicOf},
	"GET /v1/state/proof":                                            &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpDescribe, name: clusterName},
	"GET /v1/asyncapi":                                               &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpDescribe, name: ownClusterName},
	"GET /v1/tenants":                                                &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpDescribe, name: clusterName},
	"GET /v1/tenants/{tenant}":                                       &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpDescribe, name: clusterName},
	"POST /v1/tenants":                                               &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpAlter, name: clusterName},
	"DELETE /v1/tenants/{tenant}":                                    &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpAlter, name: clusterName},
	"PUT /v1/tenants/{tenant}/quotas":                                &routeACL{resourceType: fsm.ACLResourceCluster, op: fsm.ACLOpAlter, name: clusterName},
	"GET /v1/share-groups/{group}":                                   &routeACL{resourceType: fsm.ACLResourceGroup, op: fsm.ACLOpDescribe, name: groupOf},
	"POST /v1/share-groups/{group}/acquire":                          &routeACL{resourceType: fsm.ACLResourceGroup, op: fsm.ACLOpRead, name: groupOf},
	"POST /v1/share-groups/{group}/acknowledge":                      &routeACL{resourceType: fsm.ACLResourceGroup, op: fsm.ACLOpRead, name: groupOf},
	"DELETE /v1/share-groups/{group}/members/{member}":               &routeACL{resourceType: fsm.ACLResourceGroup, op: fsm.ACLOpDelete, name: groupOf},
}

// groupOf is the {group} of a share group route.
func groupOf(r *http.Request) string { return r.PathValue("group") }

// guard is the HTTP API's authentication and authorization.
type guard struct {
	opts   Options
	sec    Security
	secret []byte // the fake salts of unknown users (sasl.VerifyPlain)

	mu       sync.Mutex
	verified map[[32]byte]verifiedLogin // sha256(user, password) → when checked
	failures map[loginKey][]time.Time
}

type verifiedLogin struct {
	user  string
	users *fsm.Users // the credentials it was checked against
	at    time.Time
}

type loginKey struct {
	user string
	ip   netip.Addr
}

const (
	maxFailedLogins  = 5
	failedLoginsSpan = time.Minute
	// verifiedTTL is how long Basic credentials checked once are taken
	// again without PBKDF2 (while the users are unchanged).
	verifiedTTL = time.Minute
	maxVerified = 4096
)

func newGuard(opts Options) *guard {
	g := &guard{opts: opts, sec: *opts.Security, verified: map[[32]byte]verifiedLogin{}, failures: map[loginKey][]time.Time{}}
	g.secret = make([]byte, 32)
	rand.Read(g.secret)
	return g
}

// wrap returns h behind pattern's authentication and authorization: acl,
// when not nil, is what the route needs.
func (g *guard) wrap(pattern string, h http.Handler, acl *routeACL) http.Handler {
	protected := acl != nil
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		principal, ok := g.principal(w, r)
		if !ok {
			return
		}
		tenant := g.tenantOf(principal)
		if tenant != "" {
			r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
			// A tenant's user names its tenant's topics by their short
			// names, as its Kafka clients do (docs/tenants.md).
			if topic := r.PathValue("topic"); topic != "" {
				r.SetPathValue("topic", fsm.Qualify(tenant, topic))
			}
			if group := r.PathValue("group"); group != "" {
				r.SetPathValue("group", fsm.Qualify(tenant, group))
			}
			if !strings.HasSuffix(pattern, "/proof") { // a proof names what it proves
				tb := &tenantBody{ResponseWriter: w, prefix: tenant + string(fsm.TenantSep)}
				defer tb.flush()
				w = tb
			}
		}
		if protected && !g.authorize(principal, r, *acl) && !acl.filtered && !g.subjectGrants(principal, r, *acl) {
			httpError(w, http.StatusForbidden, "%s is not authorized to %s %s %q", principal, kmsg.ACLOperation(acl.op), kmsg.ACLResourceType(acl.resourceType), acl.name(r))
			return
		}
		// A route whose resources are in its body asks allowed.
		allow := func(rt, op int8, name string) bool {
			return g.authorize(principal, r, routeACL{resourceType: rt, op: op, name: func(*http.Request) string { return name }})
		}
		ctx := context.WithValue(r.Context(), authorizerKey{}, allow)
		if tenant != "" {
			ctx = context.WithValue(ctx, tenantKey{}, tenant)
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// subjectGrants reports whether acl.topicOp on the topic of a subject r's
// registry route is about grants the route (registryACL).
func (g *guard) subjectGrants(principal string, r *http.Request, acl routeACL) bool {
	if acl.topicOp == 0 {
		return false
	}
	for _, s := range registrySubjectsOf(g.opts, r) {
		topic, ok := subjectTopic(s)
		if !ok {
			continue
		}
		name := qualified(r, topic)
		if g.authorize(principal, r, routeACL{resourceType: fsm.ACLResourceTopic, op: acl.topicOp, name: func(*http.Request) string { return name }}) {
			return true
		}
	}
	return false
}

func (g *guard) authorize(principal string, r *http.Request, acl routeACL) bool {
	super := principal == "User:admin" || slices.Contains(g.sec.SuperUsers, principal)
	name := acl.name(r)
	if tenant := g.tenantOf(principal); tenant != "" {
		// A tenant's user: its own tenant's names only, and none of the
		// cluster's routes.
		switch acl.resourceType {
		case fsm.ACLResourceTopic, fsm.ACLResourceGroup, fsm.ACLResourceTransactionalID:
			if owner, _ := fsm.SplitTenant(name); owner != tenant {
				return false
			}
		case fsm.ACLResourceCluster:
			// Its tenant's own CLUSTER resource (the schema registry's
			// routes name it for a tenant's user).
			if name != fsm.TenantCluster(tenant) {
				return false
			}
		default:
			return false
		}
	} else if acl.resourceType == fsm.ACLResourceTopic || acl.resourceType == fsm.ACLResourceGroup || acl.resourceType == fsm.ACLResourceTransactionalID {
		if t, _ := fsm.SplitTenant(name); t != "" && !super {
			if _, ok := g.opts.Broker.Tenants().Get(t); ok {
				return false // a tenant's, never the default tenant's (docs/tenants.md)
			}
		}
	}
	return g.opts.Broker.ACLs().Authorize(fsm.AuthorizeRequest{
		Principal: principal, Host: remoteHost(r), Operation: acl.op, ResourceType: acl.resourceType, ResourceName: name,
		SuperUser: super, AllowIfNoACL: g.sec.AllowIfNoACL,
	})
}

// tenantOf is the tenant whose user principal is (User:alice@acme while
// tenant acme exists), "" for the default tenant's principals.
func (g *guard) tenantOf(principal string) string {
	u, ok := strings.CutPrefix(principal, "User:")
	if !ok {
		return ""
	}
	t, _ := fsm.SplitUser(u)
	if _, ok := g.opts.Broker.Tenants().Get(t); t == "" || !ok {
		return ""
	}
	return t
}

// tenantBody holds a tenant's user's JSON answer and names its topics and
// groups back by their short names when the handler is done: every "topic"
// and "group" field that holds the tenant's prefix, and the prefix in an
// "error" message. Record keys and values are left as they are. Only the
// JSON answers of non-streaming routes pass through it.
type tenantBody struct {
	http.ResponseWriter
	prefix string
	code   int
	buf    bytes.Buffer
	// passed: an event stream (keys.go's followKey), written through as
	// it comes; its events name no topic.
	passed bool
}

func (t *tenantBody) WriteHeader(code int) {
	if strings.HasPrefix(t.Header().Get("Content-Type"), "text/event-stream") {
		t.passed = true
		t.ResponseWriter.WriteHeader(code)
		return
	}
	t.code = code
}

func (t *tenantBody) Write(b []byte) (int, error) {
	if t.passed {
		return t.ResponseWriter.Write(b)
	}
	return t.buf.Write(b)
}

// Flush flushes an event stream; a JSON answer is written whole at the end.
func (t *tenantBody) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok && t.passed {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (t *tenantBody) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *tenantBody) flush() {
	if t.passed {
		return
	}
	out := t.buf.Bytes()
	if strings.HasPrefix(t.Header().Get("Content-Type"), "application/json") && bytes.Contains(out, []byte(t.prefix)) {
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			if b, err := json.Marshal(t.rename(v, "")); err == nil {
				out = append(b, '\n')
			}
		}
	}
	t.Header().Del("Content-Length")
	if t.code != 0 {
		t.ResponseWriter.WriteHeader(t.code)
	}
	t.ResponseWriter.Write(out)
}

// rename names v's topics (a value under the key field) back.
func (t *tenantBody) rename(v any, field string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "json" {
				continue // a record's decoded key or value (typed.go): the user's data, as written
			}
			v[k] = t.rename(x, k)
		}
	case []any:
		for i, x := range v {
			v[i] = t.rename(x, field)
		}
	case string:
		switch field {
		case "topic", "group":
			return strings.TrimPrefix(v, t.prefix)
		case "error":
			return strings.ReplaceAll(v, t.prefix, "")
		}
	}
	return v
}

// principal authenticates r; on failure it has answered 401.
func (g *guard) principal(w http.ResponseWriter, r *http.Request) (string, bool) {
	user, pass, basic := r.BasicAuth()
	if !basic && strings.HasPrefix(r.Header.Get("Authorization"), "Basic ") {
		g.unauthorized(w, "the Authorization header is not Basic base64(user:password)")
		return "", false
	}
	if basic {
		if r.TLS == nil && !g.sec.BasicOverPlaintext {
			g.unauthorized(w, "Basic credentials are taken over TLS only on this broker: use https")
			return "", false
		}
		u, ok := g.checkBasic(r, user, pass)
		if !ok {
			g.unauthorized(w, "Authentication failed: Invalid username or password")
			return "", false
		}
		return "User:" + u, true
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		p, err := listener.CertificatePrincipal(g.sec.Principals, r.TLS.PeerCertificates[0])
		if err != nil {
			g.unauthorized(w, "the client certificate's subject maps to no principal")
			return "", false
		}
		return p, true
	}
	return anonymous, true
}

func (g *guard) unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="stele", charset="UTF-8"`)
	httpError(w, http.StatusUnauthorized, "%s", msg)
}

// checkBasic verifies Basic credentials as SASL PLAIN would.
func (g *guard) checkBasic(r *http.Request, user, pass string) (string, bool) {
	users := g.opts.Broker.Users()
	key := sha256.Sum256([]byte(user + "\x00" + pass))
	ip, _ := netip.ParseAddr(remoteHost(r))
	lk := loginKey{user, ip}
	now := time.Now()
	g.mu.Lock()
	if v, ok := g.verified[key]; ok && v.users == users && now.Sub(v.at) < verifiedTTL {
		g.mu.Unlock()
		return v.user, true
	}
	locked := g.lockedLocked(lk, now)
	g.mu.Unlock()
	if !locked {
		msg := []byte("\x00" + user + "\x00" + pass)
		if u, err := sasl.VerifyPlain(msg, users.Credential, g.secret); err == nil {
			g.mu.Lock()
			if len(g.verified) >= maxVerified {
				clear(g.verified)
			}
			g.verified[key] = verifiedLogin{user: u, users: users, at: now}
			g.mu.Unlock()
			return u, true
		}
		g.mu.Lock()
		g.failures[lk] = append(g.failures[lk], now)
		if len(g.failures) > maxVerified {
			clear(g.failures)
		}
		g.mu.Unlock()
	}
	time.Sleep(g.sec.FailureDelay)
	return "", false
}

// lockedLocked reports whether k failed maxFailedLogins times within the
// span, dropping older failures.
func (g *guard) lockedLocked(k loginKey, now time.Time) bool {
	fs := g.failures[k]
	i := 0
	for i < len(fs) && now.Sub(fs[i]) > failedLoginsSpan {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(g.failures, k)
		return false
	}
	g.failures[k] = fs
	return len(fs) >= maxFailedLogins
}

// authorizerKey keys the request's authorizer in its context.
type authorizerKey struct{}

// tenantKey keys, in a tenant's user's request's context, its tenant.
type tenantKey struct{}

// qualified is a topic or group name in r's body as the state has it: a
// tenant's user's names are its tenant's (path values are qualified by
// wrap before the handler runs).
func qualified(r *http.Request, name string) string {
	if t, ok := r.Context().Value(tenantKey{}).(string); ok && t != "" {
		return fsm.Qualify(t, name)
	}
	return name
}

// allowed reports whether r's principal may perform op on the resource
// (always, on a handler served without Security).
func allowed(r *http.Request, rt, op int8, name string) bool {
	f, ok := r.Context().Value(authorizerKey{}).(func(rt, op int8, name string) bool)
	return !ok || f(rt, op, name)
}

// remoteHost is r's client address without the port.
func remoteHost(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}
