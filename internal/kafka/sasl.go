package kafka

// SaslHandshake: v0-1
// SaslAuthenticate: v0-2
// Behavior:
//  * On a SASL listener (SASL_PLAINTEXT, SASL_SSL) a connection
//    authenticates before anything else, as Kafka's
//    SaslServerAuthenticator has it: ApiVersions and SaslHandshake first,
//    then SaslAuthenticate until the mechanism is done. Any other request
//    before that closes the connection unanswered; a SaslAuthenticate
//    before a handshake, or a second handshake during one, is answered
//    ILLEGAL_SASL_STATE and the connection closed.
//  * Mechanisms: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (the listener's
//    enabled ones, Kafka's sasl.enabled.mechanisms), checked against the
//    users' SCRAM credentials in the replicated state (internal/sasl,
//    fsm/security's users.go); PLAIN is checked against the same credentials.
//    OAUTHBEARER takes a JWT signed by a key of the configured JWKS file
//    (Options.OAuth: signature, expiry, issuer, audience), whose subject
//    is the principal; it needs no user. An unknown or disabled mechanism
//    is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the
//    connection closed.
//  * A failed authentication is answered SASL_AUTHENTICATION_FAILED with
//    Kafka's message (the same for an unknown user and a wrong password)
//    after Kafka's connection.failed.authentication.delay.ms (100 ms),
//    and the connection closed. After 5 failures within a minute from
//    one address for one user, that user's logins from that address fail
//    unchecked until the minute has passed (failedLogins).
//  * The principal is User:<name>. With MaxReauth (Kafka's
//    connections.max.reauth.ms; default 0: never) SaslAuthenticate v1+
//    answers the session's lifetime (shorter when an OAUTHBEARER token
//    expires first, as Kafka), the client re-authenticates
//    (KIP-368) with a handshake before it ends, as the same user, and a
//    connection whose session ended is closed at its next request.
//  * After a SaslHandshake v0 the SASL tokens follow as bare frames, no
//    request header, as Kafka 0.10 had them (librdkafka needs v0 listed to
//    use SASL at all; it then speaks v1). A failure in that form has no
//    error to carry: the connection is closed.
//  * On a listener without SASL both are answered ILLEGAL_SASL_STATE, as
//    Kafka's KafkaApis answers them, and the connection stays open.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/sasl"
)

const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

// failedAuthDelay is Kafka's connection.failed.authentication.delay.ms.
const failedAuthDelay = 100 * time.Millisecond

func saslRoutes() []route {
	return []route{
		{key: saslHandshakeKey, min: 0, max: 1, handle: handleSaslHandshake},
		{key: saslAuthenticateKey, min: 0, max: 2, handle: handleSaslAuthenticate},
	}
}

// saslState is where a connection of a SASL listener is in its
// authentication.
type saslState uint8

const (
	saslNone           saslState = iota // no handshake yet
	saslAuthenticating                  // a handshake named the mechanism
	saslDone                            // authenticated
)

// saslConn is a connection's authentication, read and written by its
// reader only.
type saslConn struct {
	state saslState
	mech  string
	scram *sasl.ScramServer
	// user is the authenticated user (its principal is User:user);
	// expires is when its session ends (zero: never).
	user    string
	expires time.Time
	// tokenExpiry is when the OAUTHBEARER token of the last login
	// expires (zero for the other mechanisms).
	tokenExpiry time.Time
	// rawTokens: a SaslHandshake v0 was accepted, so the next frames are
	// bare SASL tokens until the mechanism is done.
	rawTokens bool
}

// maxRawToken bounds a bare SASL token frame (Kafka's
// sasl.server.max.receive.size default, 512 KiB).
const maxRawToken = 512 << 10

// errCloseAfterAnswer ends a connection once its last answer is written.
var errCloseAfterAnswer = errors.New("closed after its answer")

// allowedBeforeAuth reports whether a connection of a SASL listener may
// send the API key before it has authenticated.
func allowedBeforeAuth(key int16) bool {
	return key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey
}

// checkSASL is the gate of a SASL listener's requests: an error closes the
// connection without an answer.
func (c *conn) checkSASL(key int16) error {
	if c.l.SASLMechanisms == nil {
		return nil
	}
	a := &c.auth
	switch {
	case a.state == saslDone && !a.expires.IsZero() && !time.Now().Before(a.expires) && key != saslHandshakeKey && key != saslAuthenticateKey:
		return fmt.Errorf("the SASL session of %s expired (connections.max.reauth.ms) and the client did not re-authenticate", c.principalNow())
	case a.state == saslDone:
		return nil
	case a.state == saslNone && !allowedBeforeAuth(key):
		return fmt.Errorf("ILLEGAL_SASL_STATE: unexpected %s request during the SASL handshake", kmsg.NameForKey(key))
	case a.state == saslAuthenticating && key != saslAuthenticateKey && key != saslHandshakeKey:
		return fmt.Errorf("ILLEGAL_SASL_STATE: unexpected %s request during SASL authentication", kmsg.NameForKey(key))
	}
	return nil
}

func handleSaslHandshake(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.SASLHandshakeRequest)
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	mechs := c.l.SASLMechanisms
	resp.SupportedMechanisms = mechs
	if mechs == nil || c.auth.state == saslAuthenticating {
		// Kafka's KafkaApis on a listener without SASL; its authenticator
		// during a handshake.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		if mechs == nil {
			return done(resp), nil
		}
		return c.answerThenClose(resp, "ILLEGAL_SASL_STATE: a second SaslHandshake during authentication")
	}
	if !slices.Contains(mechs, r.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return c.answerThenClose(resp, fmt.Sprintf("unsupported SASL mechanism %q (enabled: %s)", truncate(r.Mechanism, 64), strings.Join(mechs, ", ")))
	}
	if c.auth.state == saslDone && r.Mechanism != c.auth.mech {
		// KIP-368: a re-authentication keeps the mechanism.
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return c.answerThenClose(resp, fmt.Sprintf("re-authentication with %s after %s", r.Mechanism, c.auth.mech))
	}
	c.auth.state, c.auth.mech = saslAuthenticating, r.Mechanism
	c.auth.rawTokens = r.Version == 0
	c.auth.scram = nil
	if m, ok := sasl.ParseScramMechanism(r.Mechanism); ok {
		c.auth.scram = sasl.NewScramServer(m, c.s.credential, c.s.saslSecret)
	}
	return done(resp), nil
}

func handleSaslAuthenticate(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.SASLAuthenticateRequest)
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.auth.state != saslAuthenticating {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		if c.l.SASLMechanisms == nil || c.auth.state == saslDone {
			// Kafka's KafkaApis, which sees it only after authentication.
			resp.ErrorMessage = kmsg.StringPtr("SaslAuthenticate request received after successful authentication")
			return done(resp), nil
		}
		resp.ErrorMessage = kmsg.StringPtr("Unexpected SaslAuthenticate request before a SaslHandshake")
		return c.answerThenClose(resp, "ILLEGAL_SASL_STATE: SaslAuthenticate before SaslHandshake")
	}
	reply, authenticated, err := c.authStep(r.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr(err.Error())
		return c.answerThenClose(resp, err.Error())
	}
	resp.SASLAuthBytes = reply
	if authenticated && c.s.opts.MaxReauth > 0 && r.Version >= 1 {
		// Kafka's session: connections.max.reauth.ms, or less when an
		// OAUTHBEARER token expires sooner.
		lifetime := c.s.opts.MaxReauth
		if !c.auth.tokenExpiry.IsZero() {
			lifetime = min(lifetime, max(time.Until(c.auth.tokenExpiry), time.Millisecond))
		}
		resp.SessionLifetimeMillis = lifetime.Milliseconds()
		c.auth.expires = time.Now().Add(lifetime)
	}
	return done(resp), nil
}

// rawToken serves a bare SASL token after a SaslHandshake v0: the
// mechanism's reply as a bare frame, or, on failure, nothing and the
// connection closed.
func (c *conn) rawToken(token []byte) (pending, error) {
	reply, authenticated, err := c.authStep(token)
	if err != nil {
		c.closeReason = err.Error()
		return pending{}, errCloseAfterAnswer
	}
	if authenticated {
		c.auth.rawTokens = false
	}
	return pending{key: saslAuthenticateKey, started: time.Now(), raw: func() []byte { return reply }}, nil
}

// authStep takes the client's next token of the mechanism the handshake
// chose and returns the server's reply and whether the client is now
// authenticated; an error fails the authentication (counted, and the
// attempt recorded for failedLogins).
func (c *conn) authStep(token []byte) (reply []byte, authenticated bool, err error) {
	ip := remoteIP(c.raw)
	var user string
	switch {
	case c.auth.scram != nil:
		reply, err = c.auth.scram.Step(token)
		if err == nil && !c.auth.scram.Done() {
			return reply, false, nil // the server-first message
		}
		if err == nil {
			user = c.auth.scram.User()
			if c.s.failed.locked(user, ip) {
				err = errLocked
			}
		}
	case c.auth.mech == sasl.Plain:
		if req, perr := sasl.ParsePlain(token); perr == nil && c.s.failed.locked(req.User, ip) {
			err = errLocked
		} else {
			user, err = sasl.VerifyPlain(token, c.s.credential, c.s.saslSecret)
		}
	case c.auth.mech == sasl.OAuthBearer && c.s.opts.OAuth != nil:
		var exp time.Time
		if user, exp, err = c.s.opts.OAuth.Validate(token, time.Now()); err == nil {
			c.auth.tokenExpiry = exp
		}
	default:
		err = fmt.Errorf("%w: mechanism %s", sasl.ErrAuthentication, c.auth.mech)
	}
	if err == nil && c.auth.user != "" && c.auth.user != user {
		err = fmt.Errorf("%w: Cannot change principals during re-authentication from User:%s: User:%s", sasl.ErrAuthentication, c.auth.user, user)
	}
	if err == nil {
		// Past the tenant's connections quota the login fails, but it
		// is no failed login: the credentials were right.
		if qerr := c.admitTenant("User:" + user); qerr != nil {
			return nil, false, qerr
		}
	}
	if err != nil {
		if name := c.auth.attemptedUser(token); name != "" && !errors.Is(err, errLocked) {
			c.s.failed.fail(name, ip)
		}
		c.s.metrics.authFailures.Inc()
		return nil, false, err
	}
	c.s.metrics.authSuccesses.Inc()
	c.auth.state, c.auth.user, c.auth.scram = saslDone, user, nil
	c.auth.expires = time.Time{}
	c.setPrincipal("User:" + user)
	return reply, true, nil
}

// attemptedUser is the user a failed attempt named, for the failed-login
// limit: the SCRAM conversation's, or the PLAIN message's.
func (a *saslConn) attemptedUser(plainMsg []byte) string {
	if a.scram != nil {
		return a.scram.AttemptedUser()
	}
	if r, err := sasl.ParsePlain(plainMsg); err == nil {
		return r.User
	}
	return ""
}

// answerThenClose answers resp after Kafka's failed-authentication delay
// and then closes the connection; reason goes to the log.
func (c *conn) answerThenClose(resp kmsg.Response, reason string) (respond, error) {
	c.closeReason = reason
	return func() kmsg.Response {
		defer c.waitedSince(time.Now())
		select {
		case <-time.After(failedAuthDelay):
		case <-c.s.ctx.Done():
		}
		return resp
	}, errCloseAfterAnswer
}

// credential is the Lookup SASL logins use: the committed users.
func (s *Server) credential(user string, m sasl.ScramMechanism) (sasl.Credential, bool) {
	return s.b.Users().Credential(user, m)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// errLocked fails a login refused for too many failures.
var errLocked = fmt.Errorf("%w: too many failed attempts for this user from this address; retry in a minute", sasl.ErrAuthentication)

// failedLogins limits password guessing: after maxFailedLogins failures
// within failedLoginWindow for one user from one address, that user's
// logins from that address fail unchecked until the window has passed.
// It keeps at most maxFailedLoginKeys pairs, dropping the expired ones
// first and then the oldest, so a flood of names cannot grow it.
type failedLogins struct {
	mu   sync.Mutex
	byID map[failedLoginKey]*failedLogin
}

type failedLoginKey struct {
	user string
	ip   netip.Addr
}

type failedLogin struct {
	first time.Time
	count int
}

const (
	maxFailedLogins    = 5
	failedLoginWindow  = time.Minute
	maxFailedLoginKeys = 10000
)

func (f *failedLogins) locked(user string, ip netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byID[failedLoginKey{user, ip}]
	return e != nil && e.count >= maxFailedLogins && time.Since(e.first) < failedLoginWindow
}

func (f *failedLogins) fail(user string, ip netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byID == nil {
		f.byID = map[failedLoginKey]*failedLogin{}
	}
	now := time.Now()
	k := failedLoginKey{user, ip}
	e := f.byID[k]
	if e == nil || now.Sub(e.first) >= failedLoginWindow {
		if len(f.byID) >= maxFailedLoginKeys {
			f.evictLocked(now)
		}
		e = &failedLogin{first: now}
		f.byID[k] = e
	}
	e.count++
}

// evictLocked drops the expired entries, or else the oldest.
func (f *failedLogins) evictLocked(now time.Time) {
	var oldest failedLoginKey
	var oldestAt time.Time
	for k, e := range f.byID {
		if now.Sub(e.first) >= failedLoginWindow {
			delete(f.byID, k)
			continue
		}
		if oldestAt.IsZero() || e.first.Before(oldestAt) {
			oldest, oldestAt = k, e.first
		}
	}
	if len(f.byID) >= maxFailedLoginKeys {
		delete(f.byID, oldest)
	}
}

// superUser reports whether principal is a super user: the admin user
// and Options.SuperUsers (Kafka's super.users).
func (s *Server) superUser(principal string) bool {
	return principal == "User:"+AdminUser || slices.Contains(s.opts.SuperUsers, principal)
}

// AdminUser is the super user `stele serve --admin-password-file` creates.
const AdminUser = "admin"
