package sasl

import (
	"bytes"
	"crypto/sha256"
	"unicode/utf8"
)

// maxPlainMessage bounds a PLAIN message: a name and a password.
const maxPlainMessage = 2048

// PlainRequest is a parsed PLAIN message (RFC 4616):
// [authzid] NUL authcid NUL passwd.
type PlainRequest struct {
	User     string
	Password []byte
}

// ParsePlain parses a PLAIN message as Kafka's PlainSaslServer does: the
// authzid, if any, must be the user; neither the user nor the password is
// empty.
func ParsePlain(msg []byte) (PlainRequest, error) {
	if len(msg) > maxPlainMessage {
		return PlainRequest{}, authFailed("a PLAIN message of %d bytes (at most %d)", len(msg), maxPlainMessage)
	}
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return PlainRequest{}, authFailed("Invalid SASL/PLAIN response: expected 3 tokens, got %d", len(parts))
	}
	authzid, user, pass := parts[0], parts[1], parts[2]
	switch {
	case len(user) == 0:
		return PlainRequest{}, authFailed("username not specified")
	case len(pass) == 0:
		return PlainRequest{}, authFailed("password not specified")
	case !utf8.Valid(user) || !utf8.Valid(authzid):
		return PlainRequest{}, authFailed("a PLAIN name that is not UTF-8")
	case len(authzid) > 0 && !bytes.Equal(authzid, user):
		return PlainRequest{}, authFailed("Client requested an authorization id that is different from username")
	}
	return PlainRequest{User: string(user), Password: pass}, nil
}

// VerifyPlain checks a PLAIN message against the users' SCRAM credentials
// and returns the user. It takes SCRAM-SHA-256's when the user has one:
// the password arrives in the clear either way, and PBKDF2 over SHA-256
// costs the broker half what SHA-512 does (docs/benchmarks.md, "SASL
// logins"). An unknown user costs the same work as a known one, and both
// failures read the same.
func VerifyPlain(msg []byte, lookup Lookup, secret []byte) (string, error) {
	req, err := ParsePlain(msg)
	if err != nil {
		return "", err
	}
	for _, m := range []ScramMechanism{SHA256, SHA512} {
		if c, ok := lookup(req.User, m); ok {
			if c.Verify(req.Password) {
				return req.User, nil
			}
			return "", errInvalidCredentials
		}
	}
	salt := hmacOf(sha256.New, secret, []byte("PLAIN\x00"+req.User))
	SaltedPassword(SHA256, req.Password, salt, MinIteration)
	return "", errInvalidCredentials
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
