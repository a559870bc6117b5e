package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/sasl"
)

// addUser gives the broker a user with SCRAM-SHA-256 credentials.
func addUser(t *testing.T, b interface {
	SubmitOne(context.Context, fsm.Command) (fsm.Result, error)
}, user, password string) {
	t.Helper()
	c, err := sasl.NewCredential(sasl.SHA256, []byte(password), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.SubmitOne(context.Background(), fsm.AlterScramCredentials{User: user, Upserts: []sasl.Credential{c}}); err != nil || r.Code != 0 {
		t.Fatalf("user %s: %v %+v", user, err, r)
	}
}

func allow(principal string, rt int8, name string, op int8) fsm.CreateACL {
	return fsm.CreateACL{ACL: fsm.ACLBinding{ResourceType: rt, ResourceName: name, PatternType: fsm.ACLPatternLiteral,
		Principal: principal, Host: "*", Operation: op, Permission: fsm.ACLPermissionAllow}}
}

// TestHTTPAuthorization: the HTTP API authenticates with Basic
// credentials checked against the users (as SASL PLAIN), and authorizes
// the routes that read or write records with the ACLs, as Kafka does:
// READ to read a topic's keys and tables, WRITE to append, DESCRIBE on the
// cluster for a state proof; 403 alike for a topic that exists and one
// that does not; 401 for bad credentials, and after five failures in a
// minute for the right password too; open routes stay open to anyone.
func TestHTTPAuthorization(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	addUser(t, b, "alice", "alice-pw")
	addUser(t, b, "admin", "admin-pw")
	addUser(t, b, "mallory", "mallory-pw")
	if _, err := b.SubmitOne(context.Background(), allow("User:alice", fsm.ACLResourceTopic, "t", fsm.ACLOpRead)); err != nil {
		t.Fatal(err)
	}
	// carol may read every topic of the default tenant; acme's acme~t is
	// none of them (docs/tenants.md).
	addUser(t, b, "carol", "carol-pw")
	for _, c := range []fsm.Command{allow("User:carol", fsm.ACLResourceTopic, "*", fsm.ACLOpRead), fsm.CreateTenant{Name: "acme"},
		fsm.CreateTopic{Name: "acme~t", Partitions: 1, ReplicationFactor: -1}} {
		if r, err := b.SubmitOne(context.Background(), c); err != nil || r.Code != 0 {
			t.Fatalf("%+v: %v %+v", c, err, r)
		}
	}
	srv := httptest.NewServer(New(Options{Broker: b, Gatherer: reg,
		Security: &Security{BasicOverPlaintext: true, AllowIfNoACL: false}}))
	defer srv.Close()
	type who struct{ user, pass string }
	anon, alice, admin, carol := who{}, who{"alice", "alice-pw"}, who{"admin", "admin-pw"}, who{"carol", "carol-pw"}
	do := func(method, path string, w who) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"value":"dg=="}`))
		if w.user != "" {
			req.SetBasicAuth(w.user, w.pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		method, path string
		who          who
		want         int
	}{
		{"GET", "/healthz", anon, http.StatusOK},
		{"GET", "/v1/cluster/upgrade", anon, http.StatusOK},
		{"GET", "/v1/admin/signed", anon, http.StatusOK},
		{"GET", "/v1/topics/t/keys", anon, http.StatusForbidden},
		{"GET", "/v1/topics/t/keys", alice, http.StatusOK},
		{"GET", "/v1/tables/t/k", alice, http.StatusBadRequest}, // authorized: t is no table
		{"POST", "/v1/topics/t/keys/k/events", alice, http.StatusForbidden},
		{"GET", "/v1/topics/other/keys", alice, http.StatusForbidden},
		{"GET", "/v1/topics/missing/keys", alice, http.StatusForbidden},
		{"GET", "/v1/state/proof?key=m%2Ftopics%2Ft", alice, http.StatusForbidden},
		{"GET", "/v1/topics/t/keys", who{"alice", "wrong"}, http.StatusUnauthorized},
		{"GET", "/healthz", who{"nobody", "x"}, http.StatusUnauthorized},
		{"POST", "/v1/topics/t/keys/k/events", admin, http.StatusCreated}, // a super user
		{"GET", "/v1/topics/t/keys", carol, http.StatusOK},
		{"GET", "/v1/topics/acme~t/keys", carol, http.StatusForbidden}, // a tenant's
		{"GET", "/v1/topics/acme~t/keys", admin, http.StatusOK},        // a super user
		{"GET", "/v1/tenants", alice, http.StatusForbidden},
		{"POST", "/v1/tenants", alice, http.StatusForbidden},
		{"DELETE", "/v1/tenants/acme", alice, http.StatusForbidden},
		{"GET", "/v1/tenants", admin, http.StatusOK},
		{"DELETE", "/v1/tenants/initech", admin, http.StatusNotFound},
	} {
		if resp := do(c.method, c.path, c.who); resp.StatusCode != c.want {
			t.Errorf("%s %s as %q: %d, want %d", c.method, c.path, c.who.user, resp.StatusCode, c.want)
		} else if c.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%s %s: 401 without a Basic challenge", c.method, c.path)
		}
	}
	// POST /v1/wait reads a group's committed offset: DESCRIBE on the
	// group and the topic, as OffsetFetch.
	wait := func(w who) int {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/wait", strings.NewReader(`{"topic":"t","partition":0,"offset":0,"group":"g","timeout_ms":1}`))
		if w.user != "" {
			req.SetBasicAuth(w.user, w.pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := wait(alice); code != http.StatusForbidden {
		t.Errorf("wait as alice, without DESCRIBE on the group: %d", code)
	}
	if code := wait(admin); code != http.StatusGatewayTimeout {
		t.Errorf("wait as admin: %d, want 504 (nothing committed)", code)
	}
	// Five failures lock mallory out from this address for a minute,
	// even with the right password.
	for range 5 {
		do("GET", "/healthz", who{"mallory", "guess"})
	}
	if resp := do("GET", "/healthz", who{"mallory", "mallory-pw"}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("mallory after five failures: %d, want 401", resp.StatusCode)
	}
	if resp := do("GET", "/v1/topics/t/keys", alice); resp.StatusCode != http.StatusOK {
		t.Errorf("alice meanwhile: %d", resp.StatusCode)
	}

	// Basic credentials over plaintext are refused where SASL is not
	// taken in the clear, before they are checked.
	strict := httptest.NewServer(New(Options{Broker: b, Gatherer: reg, Security: &Security{}}))
	defer strict.Close()
	req, _ := http.NewRequest("GET", strict.URL+"/healthz", nil)
	req.SetBasicAuth("alice", "alice-pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic over plaintext: %d, want 401", resp.StatusCode)
	}
}

// TestHTTPClientCertificate: over TLS, a verified client certificate is
// the principal (User:CN=bob, or as the mapping rules say), authorized by
// the ACLs; Basic credentials work over TLS too.
func TestHTTPClientCertificate(t *testing.T) {
	b, reg := startBrokerAt(t, fsm.MaxAppVersion)
	addUser(t, b, "alice", "alice-pw")
	for _, c := range []fsm.CreateACL{allow("User:bob", fsm.ACLResourceTopic, "t", fsm.ACLOpRead), allow("User:alice", fsm.ACLResourceTopic, "t", fsm.ACLOpRead)} {
		if _, err := b.SubmitOne(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	ca, err := listener.NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	server, _ := listener.Issue(ca, "server", nil, []net.IP{net.ParseIP("127.0.0.1")}, now)
	bob, _ := listener.Issue(ca, "bob", nil, nil, now)
	carol, _ := listener.Issue(ca, "carol", nil, nil, now)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	pair := func(p listener.PEMPair) tls.Certificate {
		c, err := tls.X509KeyPair(p.Cert, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mapper, err := listener.ParsePrincipalMappingRules("RULE:^CN=(.*)$/$1/,DEFAULT")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(New(Options{Broker: b, Gatherer: reg, Security: &Security{Principals: mapper}}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair(server)}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	defer srv.Close()
	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: pool}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	bobC, carolC := pair(bob), pair(carol)
	for _, c := range []struct {
		name  string
		cl    *http.Client
		basic bool
		want  int
	}{
		{"no certificate", client(nil), false, http.StatusForbidden},
		{"bob's certificate", client(&bobC), false, http.StatusOK},
		{"carol's certificate", client(&carolC), false, http.StatusForbidden},
		{"alice's password over TLS", client(nil), true, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/topics/t/keys", nil)
		if c.basic {
			req.SetBasicAuth("alice", "alice-pw")
		}
		resp, err := c.cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}

// TestRouteACLsNameRoutes: every protected route is a route.
func TestRouteACLsNameRoutes(t *testing.T) {
	for r := range routeACLs {
		found := false
		for _, x := range routes {
			found = found || x == r
		}
		if !found {
			t.Errorf("routeACLs names %q, which is not a route", r)
		}
	}
	for _, r := range routes {
		if _, ok := routeACLs[r]; !ok && (strings.Contains(r, "/v1/topics/") || strings.Contains(r, "/v1/tables/")) {
			t.Errorf("route %s reads or writes records but needs no ACL", r)
		}
	}
}
