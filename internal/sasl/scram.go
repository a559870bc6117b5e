// Package sasl is the server side of the SASL mechanisms Stele's Kafka
// listeners authenticate with: PLAIN (RFC 4616) and SCRAM-SHA-256 and
// SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka serves them (KIP-84),
// OAUTHBEARER with JWTs checked against a JWKS file (oauth.go), and the
// SCRAM credentials the cluster stores for its users.
//
// A credential is what RFC 5802 has a server keep: the salt, the
// iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
// ServerKey = HMAC(SaltedPassword, "Server Key"), never the password nor
// the salted password, with which a client could log in. PLAIN logins are
// checked against the same credentials (the password is salted and hashed
// again and compared with StoredKey), so a user has one set of secrets.
// Passwords are their UTF-8 bytes, not SASLprep'ed: Kafka's ScramFormatter
// does the same, so credentials made by Kafka's tools and by Stele's
// agree.
//
// What a conversation reveals: an unknown user gets the same first answer
// shape as a known one (a salt derived from the name with a secret of the
// process, Kafka's minimum iteration count) and fails only at the proof,
// with the same error as a wrong password, so a client cannot learn which
// users exist. Errors name what was malformed, never a secret.
package sasl

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// Mechanism names, as Kafka spells them.
const (
	Plain        = "PLAIN"
	ScramSHA256  = "SCRAM-SHA-256"
	ScramSHA512  = "SCRAM-SHA-512"
	OAuthBearer  = "OAUTHBEARER"
	MinIteration = 4096  // Kafka's ScramMechanism minimum
	MaxIteration = 16384 // Kafka's ScramMechanism maximum
)

// ScramMechanism is a SCRAM mechanism as Kafka numbers it in
// DescribeUserScramCredentials and AlterUserScramCredentials.
type ScramMechanism int8

// Kafka's ScramMechanism types.
const (
	SHA256 ScramMechanism = 1
	SHA512 ScramMechanism = 2
)

// ScramMechanisms lists the SCRAM mechanisms in Kafka's order.
var ScramMechanisms = []ScramMechanism{SHA256, SHA512}

// ParseScramMechanism returns the mechanism of a name (SCRAM-SHA-256,
// SCRAM-SHA-512).
func ParseScramMechanism(name string) (ScramMechanism, bool) {
	switch name {
	case ScramSHA256:
		return SHA256, true
	case ScramSHA512:
		return SHA512, true
	}
	return 0, false
}

// Valid reports whether m is a SCRAM mechanism Stele knows.
func (m ScramMechanism) Valid() bool { return m == SHA256 || m == SHA512 }

// String is the mechanism's SASL name.
func (m ScramMechanism) String() string {
	switch m {
	case SHA256:
		return ScramSHA256
	case SHA512:
		return ScramSHA512
	}
	return "SCRAM(" + strconv.Itoa(int(m)) + ")"
}

// hash is the mechanism's hash function (SHA-256 when m is not valid;
// callers check Valid first).
func (m ScramMechanism) hash() func() hash.Hash {
	if m == SHA512 {
		return sha512.New
	}
	return sha256.New
}

// KeySize is the size of the mechanism's StoredKey and ServerKey.
func (m ScramMechanism) KeySize() int { return m.hash()().Size() }

// Credential is a user's SCRAM credential for one mechanism.
type Credential struct {
	Mechanism  ScramMechanism
	Iterations int32
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
}

// Check reports what makes c unusable: an unknown mechanism, an iteration
// count outside Kafka's bounds, no salt, or keys of the wrong size.
func (c Credential) Check() error {
	switch {
	case !c.Mechanism.Valid():
		return fmt.Errorf("unknown SCRAM mechanism %d", c.Mechanism)
	case c.Iterations < MinIteration:
		return fmt.Errorf("Too few iterations: %d (at least %d)", c.Iterations, MinIteration)
	case c.Iterations > MaxIteration:
		return fmt.Errorf("Too many iterations: %d (at most %d)", c.Iterations, MaxIteration)
	case len(c.Salt) == 0 || len(c.Salt) > 1024:
		return fmt.Errorf("a salt is 1 to 1024 bytes, got %d", len(c.Salt))
	case len(c.StoredKey) != c.Mechanism.KeySize() || len(c.ServerKey) != c.Mechanism.KeySize():
		return fmt.Errorf("%s keys are %d bytes", c.Mechanism, c.Mechanism.KeySize())
	}
	return nil
}

// SaltedPassword is RFC 5802's Hi(password, salt, iterations).
func SaltedPassword(m ScramMechanism, password, salt []byte, iterations int) []byte {
	k, err := pbkdf2.Key(m.hash(), string(password), salt, iterations, m.KeySize())
	if err != nil {
		// Only a key length or an iteration count out of FIPS bounds
		// fails, neither of which a valid mechanism gives.
		panic(fmt.Sprintf("stele/sasl: pbkdf2: %v", err))
	}
	return k
}

// CredentialFromSalted makes the credential of a salted password (what
// AlterUserScramCredentials carries): the salted password itself is not
// kept.
func CredentialFromSalted(m ScramMechanism, salt, salted []byte, iterations int32) Credential {
	h := m.hash()
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	return Credential{Mechanism: m, Iterations: iterations, Salt: salt,
		StoredKey: stored.Sum(nil), ServerKey: hmacOf(h, salted, []byte("Server Key"))}
}

// NewCredential makes a credential for password with a fresh random salt.
// iterations 0 is Kafka's default, 4096.
func NewCredential(m ScramMechanism, password []byte, iterations int32) (Credential, error) {
	if !m.Valid() {
		return Credential{}, fmt.Errorf("stele/sasl: unknown SCRAM mechanism %d", m)
	}
	if iterations == 0 {
		iterations = MinIteration
	}
	salt := make([]byte, 32)
	rand.Read(salt)
	c := CredentialFromSalted(m, salt, SaltedPassword(m, password, salt, int(iterations)), iterations)
	return c, c.Check()
}

// Verify reports whether password is the one c was made from.
func (c Credential) Verify(password []byte) bool {
	if c.Check() != nil {
		return false
	}
	o := CredentialFromSalted(c.Mechanism, c.Salt, SaltedPassword(c.Mechanism, password, c.Salt, int(c.Iterations)), c.Iterations)
	return subtle.ConstantTimeCompare(o.StoredKey, c.StoredKey) == 1
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// ErrAuthentication is a failed authentication: wrong credentials, or a
// conversation that broke the mechanism's rules. Its text is what the
// client is told (Kafka's words), never a secret.
var ErrAuthentication = errors.New("Authentication failed")

func authFailed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrAuthentication}, args...)...)
}

// errInvalidCredentials is the one answer to an unknown user or a wrong
// password (Kafka's ScramSaslServer and PlainSaslServer say the same).
var errInvalidCredentials = authFailed("Invalid username or password")

// Lookup returns a user's credential for a mechanism, ok false when the
// user or its credential does not exist.
type Lookup func(user string, m ScramMechanism) (Credential, bool)

// maxMessage bounds a SCRAM client message; Kafka's clients send a few
// hundred bytes.
const maxMessage = 4096

// ScramServer is the server's side of one SCRAM conversation (RFC 5802):
// Step with the client-first message answers the server-first one, Step
// with the client-final message answers the server-final one and sets
// User. Any error ends the conversation.
type ScramServer struct {
	m      ScramMechanism
	lookup Lookup
	secret []byte // the process's secret for unknown users' salts

	step           int
	user           string
	known          bool
	cred           Credential
	gs2Header      string
	nonce          string
	clientFirstBar string
	serverFirst    string
}

// NewScramServer starts a conversation of mechanism m; secret (any bytes
// fixed for the process) derives the salts answered for unknown users, so
// that one name always gets the same salt.
func NewScramServer(m ScramMechanism, lookup Lookup, secret []byte) *ScramServer {
	return &ScramServer{m: m, lookup: lookup, secret: secret}
}

// User is the authenticated user, once the conversation succeeded.
func (s *ScramServer) User() string {
	if s.step != 2 {
		return ""
	}
	return s.user
}

// AttemptedUser is the user the client-first message named, authenticated
// or not ("" before it).
func (s *ScramServer) AttemptedUser() string { return s.user }

// Done reports whether the conversation has succeeded.
func (s *ScramServer) Done() bool { return s.step == 2 }

// Step takes the client's next message and returns the server's answer.
func (s *ScramServer) Step(msg []byte) ([]byte, error) {
	if len(msg) > maxMessage {
		return nil, authFailed("a SCRAM message of %d bytes (at most %d)", len(msg), maxMessage)
	}
	switch s.step {
	case 0:
		return s.first(string(msg))
	case 1:
		return s.final(string(msg))
	}
	return nil, authFailed("the SCRAM conversation is over")
}

func (s *ScramServer) first(msg string) ([]byte, error) {
	cf, err := ParseClientFirst(msg)
	if err != nil {
		return nil, err
	}
	s.user, s.gs2Header, s.clientFirstBar = cf.User, cf.GS2Header, cf.Bare
	s.cred, s.known = s.lookup(cf.User, s.m)
	if !s.known {
		// A credential nobody can match, whose salt is the same at every
		// attempt for this name (RFC 5802 §9: do not reveal which users
		// exist).
		salt := hmacOf(sha256.New, s.secret, []byte(s.m.String()+"\x00"+cf.User))[:20]
		s.cred = Credential{Mechanism: s.m, Iterations: MinIteration, Salt: salt}
	}
	var b [24]byte
	rand.Read(b[:])
	s.nonce = cf.Nonce + base64.RawURLEncoding.EncodeToString(b[:])
	s.serverFirst = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(s.cred.Salt) + ",i=" + strconv.Itoa(int(s.cred.Iterations))
	s.step = 1
	return []byte(s.serverFirst), nil
}

func (s *ScramServer) final(msg string) ([]byte, error) {
	s.step = 3 // whatever happens, no further step
	cf, err := ParseClientFinal(msg)
	if err != nil {
		return nil, err
	}
	if cf.ChannelBinding != base64.StdEncoding.EncodeToString([]byte(s.gs2Header)) {
		return nil, authFailed("the channel binding does not repeat the first message's header")
	}
	// Kafka's ScramSaslServer checks that the nonce ends with the one it
	// answered, not that it is that one, and librdkafka relies on it: it
	// sends its own nonce again in front of the server's whole one.
	if !strings.HasSuffix(cf.Nonce, s.nonce) {
		return nil, authFailed("the nonce does not end with the one the server answered")
	}
	if !s.known || len(cf.Proof) != s.m.KeySize() {
		return nil, errInvalidCredentials
	}
	h := s.m.hash()
	authMessage := []byte(s.clientFirstBar + "," + s.serverFirst + "," + cf.WithoutProof)
	clientSig := hmacOf(h, s.cred.StoredKey, authMessage)
	clientKey := make([]byte, len(clientSig))
	for i := range clientKey {
		clientKey[i] = cf.Proof[i] ^ clientSig[i]
	}
	stored := h()
	stored.Write(clientKey)
	if subtle.ConstantTimeCompare(stored.Sum(nil), s.cred.StoredKey) != 1 {
		return nil, errInvalidCredentials
	}
	s.step = 2
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(h, s.cred.ServerKey, authMessage))), nil
}

// ClientFirst is a parsed SCRAM client-first message.
type ClientFirst struct {
	GS2Header string // "n,," or "y,,", with an authzid between the commas
	Bare      string // client-first-message-bare
	User      string // the username, its =2C and =3D decoded
	Nonce     string
}

// ParseClientFirst parses a client-first message as Kafka accepts it: no
// channel binding ("n" or "y"; "p=" is refused), an authzid only equal to
// the user, no mandatory extension, and no extension but Kafka's
// tokenauth, which Stele refuses as it has no delegation tokens.
func ParseClientFirst(msg string) (ClientFirst, error) {
	if !utf8Valid(msg) {
		return ClientFirst{}, authFailed("the SCRAM client-first message is not UTF-8")
	}
	parts := strings.SplitN(msg, ",", 3)
	if len(parts) != 3 {
		return ClientFirst{}, authFailed("malformed SCRAM client-first message")
	}
	switch {
	case parts[0] == "n" || parts[0] == "y":
	case strings.HasPrefix(parts[0], "p="):
		return ClientFirst{}, authFailed("SCRAM channel binding is not supported")
	default:
		return ClientFirst{}, authFailed("malformed SCRAM client-first message: bad gs2 header")
	}
	var authzid string
	if parts[1] != "" {
		if !strings.HasPrefix(parts[1], "a=") {
			return ClientFirst{}, authFailed("malformed SCRAM client-first message: bad authzid")
		}
		var err error
		if authzid, err = decodeSaslName(parts[1][2:]); err != nil {
			return ClientFirst{}, err
		}
	}
	cf := ClientFirst{GS2Header: parts[0] + "," + parts[1] + ",", Bare: parts[2]}
	attrs := strings.Split(cf.Bare, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return ClientFirst{}, authFailed("malformed SCRAM client-first message: it must start with n=user,r=nonce")
	}
	user, err := decodeSaslName(attrs[0][2:])
	if err != nil {
		return ClientFirst{}, err
	}
	if user == "" {
		return ClientFirst{}, authFailed("username not specified")
	}
	cf.User = user
	cf.Nonce = attrs[1][2:]
	if cf.Nonce == "" || !printable(cf.Nonce) {
		return ClientFirst{}, authFailed("malformed SCRAM client-first message: bad nonce")
	}
	for _, ext := range attrs[2:] {
		if strings.HasPrefix(ext, "tokenauth=") {
			return ClientFirst{}, authFailed("delegation tokens are not supported")
		}
		if len(ext) < 2 || ext[1] != '=' || !isAlpha(ext[0]) {
			return ClientFirst{}, authFailed("malformed SCRAM client-first message: bad extension")
		}
	}
	if authzid != "" && authzid != user {
		return ClientFirst{}, authFailed("Client requested an authorization id that is different from username")
	}
	return cf, nil
}

// ClientFinal is a parsed SCRAM client-final message.
type ClientFinal struct {
	ChannelBinding string // c=, base64 as sent
	Nonce          string
	Proof          []byte
	WithoutProof   string // client-final-message-without-proof
}

// ParseClientFinal parses a client-final message: c=,r=[,extensions],p=.
func ParseClientFinal(msg string) (ClientFinal, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return ClientFinal{}, authFailed("malformed SCRAM client-final message: no proof")
	}
	cf := ClientFinal{WithoutProof: msg[:i]}
	proof, err := base64.StdEncoding.DecodeString(msg[i+3:])
	if err != nil {
		return ClientFinal{}, authFailed("malformed SCRAM client-final message: the proof is not base64")
	}
	cf.Proof = proof
	attrs := strings.Split(cf.WithoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return ClientFinal{}, authFailed("malformed SCRAM client-final message: it must start with c=binding,r=nonce")
	}
	cf.ChannelBinding, cf.Nonce = attrs[0][2:], attrs[1][2:]
	for _, ext := range attrs[2:] {
		if len(ext) < 2 || ext[1] != '=' || !isAlpha(ext[0]) {
			return ClientFinal{}, authFailed("malformed SCRAM client-final message: bad extension")
		}
	}
	return cf, nil
}

// decodeSaslName undoes RFC 5802's escapes in a saslname: =2C is ",",
// =3D is "=", and any other "=" is an error.
func decodeSaslName(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", authFailed("malformed SCRAM name: a bare '='")
		}
		i += 2
	}
	return b.String(), nil
}

// EncodeSaslName escapes a name for a SCRAM message.
func EncodeSaslName(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
