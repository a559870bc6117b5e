package kafka

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stele-io/stele/internal/consensus/local"
	"github.com/stele-io/stele/internal/fsm"
	stelesasl "github.com/stele-io/stele/internal/sasl"
)

var allMechanisms = []string{stelesasl.Plain, stelesasl.ScramSHA256, stelesasl.ScramSHA512}

// startSASLBroker starts a broker whose listeners authenticate, with the
// admin user (password "admin-secret") in its state, and a SASL_PLAINTEXT
// listener; it returns the broker and that listener's address.
func startSASLBroker(t testing.TB, tweak func(*Options)) (*testBroker, string) {
	t.Helper()
	return startSASLBrokerOrdered(t, local.Options{StartTime: time.Unix(1_700_000_000, 0), Step: 10 * time.Millisecond}, tweak)
}

// startSASLBrokerOrdered is startSASLBroker on an orderer with options lo
// (a clock, for groups: startTestBrokerClocked).
func startSASLBrokerOrdered(t testing.TB, lo local.Options, tweak func(*Options)) (*testBroker, string) {
	t.Helper()
	tb := startTestBrokerOrdered(t, lo, func(o *Options) {
		o.DenyIfNoACL = true
		o.Registerer = prometheus.NewRegistry()
		if tweak != nil {
			tweak(o)
		}
	})
	var creds []stelesasl.Credential
	for _, m := range stelesasl.ScramMechanisms {
		c, err := stelesasl.NewCredential(m, []byte("admin-secret"), 0)
		if err != nil {
			t.Fatal(err)
		}
		creds = append(creds, c)
	}
	if r, err := tb.b.SubmitOne(ctx(t), fsm.AlterScramCredentials{User: AdminUser, IfAbsent: true, Upserts: creds}); err != nil || r.Code != 0 {
		t.Fatalf("the admin user: %v %+v", err, r)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tb.srv.ServeListener(ln, Listener{Name: "SASL_PLAINTEXT", SASLMechanisms: allMechanisms})
	return tb, ln.Addr().String()
}

func scramClient(t testing.TB, addr, user, pass string, sha512 bool, opts ...kgo.Opt) *kgo.Client {
	a := scram.Auth{User: user, Pass: pass}
	m := a.AsSha256Mechanism()
	if sha512 {
		m = a.AsSha512Mechanism()
	}
	return client(t, addr, append([]kgo.Opt{kgo.SASL(m)}, opts...)...)
}

// TestSASLUsers: the admin, logged in with SCRAM-SHA-512, creates alice
// with kadm (AlterUserScramCredentials); alice logs in with SCRAM-SHA-256,
// SCRAM-SHA-512 and PLAIN, produces and consumes, and is refused the
// user APIs (not a super user); a wrong password and an unknown user fail
// alike with SASL_AUTHENTICATION_FAILED; deleting alice's credentials
// ends her logins.
func TestSASLUsers(t *testing.T) {
	tb, addr := startSASLBroker(t, nil)
	adm := kadm.NewClient(scramClient(t, addr, AdminUser, "admin-secret", true))
	res, err := adm.AlterUserSCRAMs(ctx(t), nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "wonder"},
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "wonder"},
	})
	if err != nil || res.Error() != nil {
		t.Fatalf("create alice: %v %v", err, res.Error())
	}
	described, err := adm.DescribeUserSCRAMs(ctx(t), "alice")
	if err != nil || described.Error() != nil {
		t.Fatalf("describe: %v %v", err, described.Error())
	}
	if cs := described["alice"].CredInfos; len(cs) != 2 || cs[0].Iterations != 4096 || cs[1].Iterations != 8192 {
		t.Fatalf("alice's credentials: %+v", described["alice"])
	}
	// The broker authenticates, so nothing is allowed without an ACL
	// (allow.everyone.if.no.acl.found is false): alice gets hers.
	acls, err := adm.CreateACLs(ctx(t), kadm.NewACLs().Allow("User:alice").AllowHosts("*").
		Topics("sasl-").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpAll).
		Groups().Operations(kadm.OpAll))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range acls {
		if r.Err != nil {
			t.Fatalf("ACL %+v: %v", r, r.Err)
		}
	}

	for name, opt := range map[string]kgo.Opt{
		"SCRAM-SHA-256": kgo.SASL(scram.Auth{User: "alice", Pass: "wonder"}.AsSha256Mechanism()),
		"SCRAM-SHA-512": kgo.SASL(scram.Auth{User: "alice", Pass: "wonder"}.AsSha512Mechanism()),
		"PLAIN":         kgo.SASL(plain.Auth{User: "alice", Pass: "wonder"}.AsMechanism()),
	} {
		cl := client(t, addr, opt, kgo.DefaultProduceTopic("sasl-"+strings.ToLower(name)), kgo.AllowAutoTopicCreation())
		if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte(name)}).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", name, err)
		}
		cons := client(t, addr, opt, kgo.ConsumeTopics("sasl-"+strings.ToLower(name)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		fs := cons.PollFetches(ctx(t))
		if err := fs.Err(); err != nil || fs.NumRecords() != 1 || string(fs.Records()[0].Value) != name {
			t.Fatalf("%s: consume: %v, %d records", name, err, fs.NumRecords())
		}
	}
	if !strings.Contains(strings.Join(principals(tb), " "), "User:alice") {
		t.Fatalf("principals %v, want User:alice among them", principals(tb))
	}

	alice := kadm.NewClient(scramClient(t, addr, "alice", "wonder", false))
	if _, err := alice.DescribeUserSCRAMs(ctx(t)); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice describes users: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	r, err := alice.AlterUserSCRAMs(ctx(t), []kadm.DeleteSCRAM{{User: AdminUser, Mechanism: kadm.ScramSha256}}, nil)
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(r[AdminUser].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice deletes the admin's credential: %v %+v", err, r)
	}

	failures := func() float64 { return testutil.ToFloat64(tb.srv.metrics.authFailures) }
	for _, tc := range []struct{ user, pass string }{{"alice", "wrong"}, {"mallory", "wonder"}} {
		before := failures()
		cl := scramClient(t, addr, tc.user, tc.pass, true, kgo.RequestRetries(0))
		err := cl.Ping(ctx(t))
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || strings.Contains(err.Error(), tc.pass) {
			t.Fatalf("%s with a wrong password: %v, want SASL_AUTHENTICATION_FAILED without the password", tc.user, err)
		}
		if failures() <= before {
			t.Fatalf("failed login not counted")
		}
	}

	r, err = adm.AlterUserSCRAMs(ctx(t), []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha256}, {User: "alice", Mechanism: kadm.ScramSha512}}, nil)
	if err != nil || r.Error() != nil {
		t.Fatalf("delete alice: %v %v", err, r.Error())
	}
	if err := scramClient(t, addr, "alice", "wonder", true).Ping(ctx(t)); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("alice logs in after her deletion: %v", err)
	}
}

// TestAlterUserScramCredentialsErrors: Kafka's codes for each bad
// alteration and description (Reference: Kafka's
// ControllerApis/ScramControlManager, DescribeUserScramCredentials).
func TestAlterUserScramCredentialsErrors(t *testing.T) {
	_, addr := startSASLBroker(t, nil)
	cl := scramClient(t, addr, AdminUser, "admin-secret", false)
	up := func(name string, mech int8, iters int32) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = name, mech, iters, []byte("salt"), make([]byte, 32)
		return u
	}
	del := func(name string, mech int8) kmsg.AlterUserSCRAMCredentialsRequestDeletion {
		d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
		d.Name, d.Mechanism = name, mech
		return d
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		up("few", 1, 100), up("many", 2, 20000), up("", 1, 4096), up("odd", 3, 4096), up("twice", 1, 4096), up("twice", 1, 4096), up("good", 1, 4096),
	}
	req.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{del("ghost", 2)}
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{
		"few": kerr.UnacceptableCredential.Code, "many": kerr.UnacceptableCredential.Code, "": kerr.UnacceptableCredential.Code,
		"odd": kerr.UnsupportedSaslMechanism.Code, "twice": kerr.DuplicateResource.Code, "good": 0, "ghost": kerr.ResourceNotFound.Code,
	}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(resp.Results), len(want), resp.Results)
	}
	for _, r := range resp.Results {
		if code, ok := want[r.User]; !ok || r.ErrorCode != code {
			t.Errorf("user %q: code %d (%v), want %d", r.User, r.ErrorCode, r.ErrorMessage, code)
		}
	}
	d := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	for _, n := range []string{"good", "nobody", "admin", "admin"} {
		u := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
		u.Name = n
		d.Users = append(d.Users, u)
	}
	dr, err := d.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	wantD := map[string]int16{"good": 0, "nobody": kerr.ResourceNotFound.Code, "admin": kerr.DuplicateResource.Code}
	if len(dr.Results) != 3 {
		t.Fatalf("describe results %+v", dr.Results)
	}
	for _, r := range dr.Results {
		if r.ErrorCode != wantD[r.User] {
			t.Errorf("describe %q: code %d, want %d", r.User, r.ErrorCode, wantD[r.User])
		}
	}
	all, err := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest().RequestWith(ctx(t), cl)
	if err != nil || len(all.Results) != 2 || all.Results[0].User != "admin" || all.Results[1].User != "good" {
		t.Fatalf("describe all: %v %+v", err, all)
	}
}

// TestSASLStateMachine: on a SASL listener a request before
// authentication closes the connection unanswered, a SaslAuthenticate
// before the handshake is answered ILLEGAL_SASL_STATE and closed, an
// unknown mechanism UNSUPPORTED_SASL_MECHANISM with the enabled ones and
// closed; on a PLAINTEXT listener both SASL APIs are answered
// ILLEGAL_SASL_STATE and the connection stays open.
func TestSASLStateMachine(t *testing.T) {
	tb, addr := startSASLBroker(t, nil)
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := readFrame(c)
		return err != nil
	}
	answer := func(c net.Conn, req kmsg.Request) kmsg.Response {
		t.Helper()
		return rawAnswer(t, c, req)
	}

	c := rawConn(t, addr)
	c.Write(frames(kmsg.NewPtrMetadataRequest(), 1))
	if !closed(c) {
		t.Fatal("a Metadata request before authentication was answered")
	}

	c = rawConn(t, addr)
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00admin\x00admin-secret")
	if r := answer(c, auth).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != kerr.IllegalSaslState.Code || !closed(c) {
		t.Fatalf("SaslAuthenticate before a handshake: code %d, want ILLEGAL_SASL_STATE and the connection closed", r.ErrorCode)
	}

	c = rawConn(t, addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "GSSAPI"
	r := answer(c, hs).(*kmsg.SASLHandshakeResponse)
	if r.ErrorCode != kerr.UnsupportedSaslMechanism.Code || strings.Join(r.SupportedMechanisms, ",") != strings.Join(allMechanisms, ",") || !closed(c) {
		t.Fatalf("GSSAPI: %+v, want UNSUPPORTED_SASL_MECHANISM with the enabled mechanisms, then closed", r)
	}

	// PLAIN by hand: handshake, then a Metadata request during the
	// authentication closes the connection.
	c = rawConn(t, addr)
	hs.Mechanism = "PLAIN"
	if r := answer(c, hs).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("PLAIN handshake: code %d", r.ErrorCode)
	}
	c.Write(frames(kmsg.NewPtrMetadataRequest(), 1))
	if !closed(c) {
		t.Fatal("Metadata during authentication was answered")
	}

	// And the whole PLAIN exchange, then Metadata is served.
	c = rawConn(t, addr)
	answer(c, hs)
	if r := answer(c, auth).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != 0 {
		t.Fatalf("PLAIN: code %d %v", r.ErrorCode, r.ErrorMessage)
	}
	if r := answer(c, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse); len(r.Brokers) != 1 {
		t.Fatalf("Metadata after PLAIN: %+v", r)
	}
	if r := answer(c, auth).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("a second SaslAuthenticate: code %d", r.ErrorCode)
	}

	// SaslHandshake v0: the token follows as a bare frame, and so does
	// the reply (empty for PLAIN); a wrong password closes the connection.
	hs0 := kmsg.NewPtrSASLHandshakeRequest()
	hs0.Version, hs0.Mechanism = 0, "PLAIN"
	for _, pw := range []string{"admin-secret", "wrong"} {
		c = rawConn(t, addr)
		if r := answer(c, hs0).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
			t.Fatalf("SaslHandshake v0: code %d", r.ErrorCode)
		}
		c.Write(frame([]byte("\x00admin\x00" + pw)))
		reply, err := readFrame(c)
		if pw == "wrong" {
			if err == nil {
				t.Fatalf("a wrong password in a bare token was answered %q", reply)
			}
			continue
		}
		if err != nil || len(reply) != 0 {
			t.Fatalf("the bare PLAIN token: %q %v, want an empty frame", reply, err)
		}
		if r := answer(c, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse); len(r.Brokers) != 1 {
			t.Fatalf("Metadata after a v0 PLAIN login: %+v", r)
		}
	}

	p := rawConn(t, tb.addr)
	if r := answer(p, hs).(*kmsg.SASLHandshakeResponse); r.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("SaslHandshake on PLAINTEXT: code %d", r.ErrorCode)
	}
	if r := answer(p, auth).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("SaslAuthenticate on PLAINTEXT: code %d", r.ErrorCode)
	}
	if r := answer(p, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse); len(r.Brokers) != 1 {
		t.Fatal("the PLAINTEXT connection was closed")
	}
}

// TestSASLReauthentication (KIP-368): with connections.max.reauth.ms the
// session lifetime is answered, franz-go re-authenticates on its own and
// goes on producing; a client that never re-authenticates has its
// connection closed at its first request after the session ended.
func TestSASLReauthentication(t *testing.T) {
	tb, addr := startSASLBroker(t, func(o *Options) { o.MaxReauth = 700 * time.Millisecond })
	successes := func() float64 { return testutil.ToFloat64(tb.srv.metrics.authSuccesses) }
	cl := scramClient(t, addr, AdminUser, "admin-secret", true, kgo.DefaultProduceTopic("reauth"), kgo.AllowAutoTopicCreation())
	// Produce until franz-go has logged in three times (twice again).
	deadline := time.Now().Add(10 * time.Second)
	for successes() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%v authentications in 10 s with a 700 ms session: franz-go did not re-authenticate", successes())
		}
		if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce across re-authentications: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}

	c := rawConn(t, addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("\x00admin\x00admin-secret")
	c.Write(append(frames(hs, 1), frames(auth, 1)...))
	readFrame(c)
	b, err := readFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = 1
	if err := resp.ReadFrom(b[4:]); err != nil || resp.ErrorCode != 0 || resp.SessionLifetimeMillis != 700 {
		t.Fatalf("SaslAuthenticate v1: %v %+v, want a 700 ms session", err, resp)
	}
	time.Sleep(time.Second) // let the 700 ms session lapse
	c.Write(frames(kmsg.NewPtrMetadataRequest(), 1))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := readFrame(c); err == nil {
		t.Fatal("a request after the session ended was answered")
	}
}

// TestFailedLoginLimit: after 5 failures within a minute for one user
// from one address, even the right password fails from there.
func TestFailedLoginLimit(t *testing.T) {
	_, addr := startSASLBroker(t, nil)
	var m sasl.Mechanism = plain.Auth{User: AdminUser, Pass: "guess"}.AsMechanism()
	for range maxFailedLogins {
		if err := client(t, addr, kgo.SASL(m), kgo.RequestRetries(0)).Ping(ctx(t)); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("a wrong password: %v", err)
		}
	}
	err := scramClient(t, addr, AdminUser, "admin-secret", true, kgo.RequestRetries(0)).Ping(ctx(t))
	if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "too many failed attempts") {
		t.Fatalf("the right password after 5 failures: %v, want a refusal for too many failures", err)
	}
	if err := scramClient(t, addr, "someone-else", "x", true, kgo.RequestRetries(0)).Ping(ctx(t)); strings.Contains(err.Error(), "too many") {
		t.Fatalf("another user is locked out too: %v", err)
	}
}
