package sasl

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// OAUTHBEARER (RFC 7628, Kafka's KIP-255 and KIP-768): the client sends a
// JWT, which the broker checks against the keys of a JWKS file (Kafka's
// sasl.oauthbearer.jwks.endpoint.url with a file: URL): its signature
// (RS256/384/512, PS256/384/512, ES256/384/512; "none" and HMAC are
// refused), its expiry and not-before (with Kafka's 30 s clock skew), and,
// when configured, its issuer and audience. The principal is User: and the
// subject claim (sub, or sasl.oauthbearer.sub.claim.name). The JWKS file
// is read again when it changes, so keys rotate without a restart. The key
// set may instead come from an identity provider's URL (Kafka's
// sasl.oauthbearer.jwks.endpoint.url with an https URL): fetched at start,
// again every refresh interval (sasl.oauthbearer.jwks.endpoint.refresh.ms,
// an hour by default), and at once, at most every 10 s, when a token names
// a key the set lacks (a rotation); a fetch that fails keeps the keys
// before.

// OAuthConfig is how OAUTHBEARER tokens are validated.
type OAuthConfig struct {
	// JWKSFile holds the JSON Web Key Set the tokens are signed with.
	JWKSFile string
	// JWKSURL, in place of JWKSFile, is where the key set is fetched
	// from (http or https); Refresh how often (default an hour), and
	// HTTPClient the client (default: the system's roots, 10 s timeout).
	JWKSURL    string
	Refresh    time.Duration
	HTTPClient *http.Client
	// Issuer and Audience, when set, must be the token's iss and be among
	// its aud (Kafka's sasl.oauthbearer.expected.issuer and
	// expected.audience, the latter a list).
	Issuer   string
	Audience []string
	// SubClaim names the claim holding the principal's name (default sub).
	SubClaim string
	// ClockSkew is tolerated on exp, nbf and iat (default 30 s, Kafka's).
	ClockSkew time.Duration
}

// Configured reports whether a key set is given (a file or a URL).
func (c OAuthConfig) Configured() bool { return c.JWKSFile != "" || c.JWKSURL != "" }

// maxToken bounds an OAUTHBEARER message.
const maxToken = 16 << 10

// OAuthValidator validates OAUTHBEARER messages against a JWKS file.
type OAuthValidator struct {
	cfg OAuthConfig
	mu  struct {
		sync.Mutex
		keys    map[string]crypto.PublicKey // by kid ("" for a key without one)
		modTime time.Time
		size    int64
		checked time.Time
		fetched time.Time // the last good fetch of JWKSURL
	}
}

// Bounds of a JWKS fetch.
const (
	maxJWKS          = 1 << 20
	unknownKidCheck  = 10 * time.Second
	defaultJWKSFetch = 10 * time.Second
)

// NewOAuthValidator reads cfg's JWKS file.
func NewOAuthValidator(cfg OAuthConfig) (*OAuthValidator, error) {
	if cfg.SubClaim == "" {
		cfg.SubClaim = "sub"
	}
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = 30 * time.Second
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Hour
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: defaultJWKSFetch}
	}
	v := &OAuthValidator{cfg: cfg}
	switch {
	case cfg.JWKSFile != "" && cfg.JWKSURL != "":
		return nil, errors.New("stele/sasl: a JWKS file and a JWKS URL: give one")
	case cfg.JWKSURL != "":
		u, err := url.Parse(cfg.JWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("stele/sasl: the JWKS URL %q is not an http or https URL", cfg.JWKSURL)
		}
		keys, err := v.fetch()
		if err != nil {
			return nil, err
		}
		v.mu.keys, v.mu.fetched, v.mu.checked = keys, time.Now(), time.Now()
		return v, nil
	}
	if err := v.reload(true); err != nil {
		return nil, err
	}
	return v, nil
}

// fetch gets and parses the key set at JWKSURL.
func (v *OAuthValidator) fetch() (map[string]crypto.PublicKey, error) {
	resp, err := v.cfg.HTTPClient.Get(v.cfg.JWKSURL)
	if err != nil {
		return nil, fmt.Errorf("stele/sasl: fetching the JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stele/sasl: fetching the JWKS from %s: %s", v.cfg.JWKSURL, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, fmt.Errorf("stele/sasl: fetching the JWKS: %w", err)
	}
	if len(data) > maxJWKS {
		return nil, fmt.Errorf("stele/sasl: the JWKS at %s is larger than %d bytes", v.cfg.JWKSURL, maxJWKS)
	}
	keys, err := ParseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("stele/sasl: the JWKS at %s: %w", v.cfg.JWKSURL, err)
	}
	return keys, nil
}

// keyFromURL returns kid's key of the fetched set, fetching it again first
// when it is older than Refresh, or when it lacks kid and was not fetched
// in the last unknownKidCheck. The fetch runs without the lock; a failed
// one keeps the keys before.
func (v *OAuthValidator) keyFromURL(kid string) (crypto.PublicKey, bool) {
	now := time.Now()
	v.mu.Lock()
	k, ok := v.mu.keys[kid]
	refetch := now.Sub(v.mu.fetched) >= v.cfg.Refresh && now.Sub(v.mu.checked) >= unknownKidCheck ||
		!ok && now.Sub(v.mu.checked) >= unknownKidCheck
	if refetch {
		v.mu.checked = now
	}
	v.mu.Unlock()
	if !refetch {
		return k, ok
	}
	keys, err := v.fetch()
	if err != nil {
		return k, ok // the keys before; the next check retries
	}
	v.mu.Lock()
	v.mu.keys, v.mu.fetched = keys, time.Now()
	v.mu.Unlock()
	k, ok = keys[kid]
	return k, ok
}

// reload reads the JWKS file again when it changed (looked at most once a
// second); a file that does not parse keeps the keys before, unless first.
func (v *OAuthValidator) reload(first bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !first && time.Since(v.mu.checked) < time.Second {
		return nil
	}
	v.mu.checked = time.Now()
	st, err := os.Stat(v.cfg.JWKSFile)
	if err != nil {
		return fmt.Errorf("stele/sasl: the JWKS file: %w", err)
	}
	if !first && st.ModTime().Equal(v.mu.modTime) && st.Size() == v.mu.size {
		return nil
	}
	data, err := os.ReadFile(v.cfg.JWKSFile)
	if err != nil {
		return fmt.Errorf("stele/sasl: the JWKS file: %w", err)
	}
	keys, err := ParseJWKS(data)
	if err != nil {
		return fmt.Errorf("stele/sasl: %s: %w", v.cfg.JWKSFile, err)
	}
	v.mu.keys, v.mu.modTime, v.mu.size = keys, st.ModTime(), st.Size()
	return nil
}

func (v *OAuthValidator) key(kid string) (crypto.PublicKey, bool) {
	if v.cfg.JWKSURL != "" {
		return v.keyFromURL(kid)
	}
	v.reload(false) // a bad new file keeps the keys before
	v.mu.Lock()
	defer v.mu.Unlock()
	k, ok := v.mu.keys[kid]
	return k, ok
}

// ParseJWKS reads a JSON Web Key Set: its RSA and EC (P-256, P-384,
// P-521) signing keys by kid; other keys are skipped. At least one usable
// key is required.
func ParseJWKS(data []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Use, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %v", err)
	}
	out := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := b64(k.N)
			e, err2 := b64(k.E)
			if err1 != nil || err2 != nil || len(n) < 256 || len(e) == 0 || len(e) > 4 {
				return nil, fmt.Errorf("RSA key %q: a modulus of at least 2048 bits and an exponent, base64url", k.Kid)
			}
			out[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			var curve elliptic.Curve
			switch k.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				return nil, fmt.Errorf("EC key %q: curve %q (want P-256, P-384 or P-521)", k.Kid, k.Crv)
			}
			x, err1 := b64(k.X)
			y, err2 := b64(k.Y)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("EC key %q: x and y are base64url", k.Kid)
			}
			pub := &ecdsa.PublicKey{Curve: curve, X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
			if !curve.IsOnCurve(pub.X, pub.Y) {
				return nil, fmt.Errorf("EC key %q: not a point of %s", k.Kid, k.Crv)
			}
			out[k.Kid] = pub
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no RSA or EC signing key")
	}
	return out, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// ParseOAuthBearer reads the token of an OAUTHBEARER client message
// (RFC 7628): gs2 header, then \x01-separated key=value pairs, one of them
// auth=Bearer <token>, ending with \x01\x01.
func ParseOAuthBearer(msg []byte) (string, error) {
	if len(msg) > maxToken {
		return "", authFailed("an OAUTHBEARER message of %d bytes (at most %d)", len(msg), maxToken)
	}
	header, rest, ok := bytes.Cut(msg, []byte{1})
	if !ok || !bytes.HasSuffix(rest, []byte{1, 1}) {
		return "", authFailed("malformed OAUTHBEARER message")
	}
	if h := string(header); !strings.HasPrefix(h, "n,") && !strings.HasPrefix(h, "y,") {
		return "", authFailed("malformed OAUTHBEARER message: bad gs2 header")
	}
	for _, kv := range bytes.Split(bytes.TrimSuffix(rest, []byte{1, 1}), []byte{1}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			return "", authFailed("malformed OAUTHBEARER message: bad key-value pair")
		}
		if string(k) == "auth" {
			scheme, token, ok := strings.Cut(string(v), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
				return "", authFailed("malformed OAUTHBEARER message: auth is not Bearer <token>")
			}
			return token, nil
		}
	}
	return "", authFailed("malformed OAUTHBEARER message: no auth")
}

// Validate checks an OAUTHBEARER client message at time now and returns the
// principal's name and the token's expiry.
func (v *OAuthValidator) Validate(msg []byte, now time.Time) (string, time.Time, error) {
	token, err := ParseOAuthBearer(msg)
	if err != nil {
		return "", time.Time{}, err
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", time.Time{}, authFailed("the token is not a signed JWT")
	}
	hb, err1 := b64(parts[0])
	pb, err2 := b64(parts[1])
	sig, err3 := b64(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return "", time.Time{}, authFailed("the token is not base64url")
	}
	var header struct{ Alg, Kid, Typ string }
	if err := json.Unmarshal(hb, &header); err != nil {
		return "", time.Time{}, authFailed("the token's header is not JSON")
	}
	key, ok := v.key(header.Kid)
	if !ok {
		return "", time.Time{}, authFailed("the token's key %q is not in the JWKS", truncateName(header.Kid))
	}
	if err := verifyJWS(header.Alg, key, []byte(parts[0]+"."+parts[1]), sig); err != nil {
		return "", time.Time{}, err
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(pb))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		return "", time.Time{}, authFailed("the token's claims are not JSON")
	}
	num := func(name string) (time.Time, bool, error) {
		c, ok := claims[name]
		if !ok {
			return time.Time{}, false, nil
		}
		n, ok := c.(json.Number)
		if !ok {
			return time.Time{}, false, authFailed("the token's %s is not a number", name)
		}
		f, err := n.Float64()
		if err != nil {
			return time.Time{}, false, authFailed("the token's %s is not a number", name)
		}
		return time.UnixMilli(int64(f * 1000)), true, nil
	}
	exp, ok, err := num("exp")
	switch {
	case err != nil:
		return "", time.Time{}, err
	case !ok:
		return "", time.Time{}, authFailed("the token has no exp")
	case now.After(exp.Add(v.cfg.ClockSkew)):
		return "", time.Time{}, authFailed("the token expired")
	}
	if nbf, ok, err := num("nbf"); err != nil {
		return "", time.Time{}, err
	} else if ok && now.Add(v.cfg.ClockSkew).Before(nbf) {
		return "", time.Time{}, authFailed("the token is not valid yet")
	}
	if iat, ok, err := num("iat"); err != nil {
		return "", time.Time{}, err
	} else if ok && now.Add(v.cfg.ClockSkew).Before(iat) {
		return "", time.Time{}, authFailed("the token is issued in the future")
	}
	if v.cfg.Issuer != "" {
		if iss, _ := claims["iss"].(string); iss != v.cfg.Issuer {
			return "", time.Time{}, authFailed("the token's issuer is not the expected one")
		}
	}
	if len(v.cfg.Audience) > 0 && !audienceMatches(claims["aud"], v.cfg.Audience) {
		return "", time.Time{}, authFailed("the token's audience is not an expected one")
	}
	sub, _ := claims[v.cfg.SubClaim].(string)
	if sub == "" || len(sub) > 255 {
		return "", time.Time{}, authFailed("the token has no %s claim", v.cfg.SubClaim)
	}
	return sub, exp, nil
}

func audienceMatches(aud any, want []string) bool {
	var got []string
	switch a := aud.(type) {
	case string:
		got = []string{a}
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok {
				got = append(got, s)
			}
		}
	}
	for _, g := range got {
		for _, w := range want {
			if g == w {
				return true
			}
		}
	}
	return false
}

// verifyJWS checks a JWS signature of the algorithms Kafka's default
// validator takes (asymmetric ones only).
func verifyJWS(alg string, key crypto.PublicKey, signed, sig []byte) error {
	var h crypto.Hash
	switch alg {
	case "RS256", "PS256", "ES256":
		h = crypto.SHA256
	case "RS384", "PS384", "ES384":
		h = crypto.SHA384
	case "RS512", "PS512", "ES512":
		h = crypto.SHA512
	default:
		return authFailed("the token's algorithm %q is not accepted (RS, PS or ES with SHA-256/384/512)", truncateName(alg))
	}
	var digest []byte
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(signed)
		digest = d[:]
	case crypto.SHA384:
		d := sha512.Sum384(signed)
		digest = d[:]
	default:
		d := sha512.Sum512(signed)
		digest = d[:]
	}
	bad := authFailed("the token's signature does not verify")
	switch k := key.(type) {
	case *rsa.PublicKey:
		switch alg[:2] {
		case "RS":
			if rsa.VerifyPKCS1v15(k, h, digest, sig) != nil {
				return bad
			}
		case "PS":
			if rsa.VerifyPSS(k, h, digest, sig, nil) != nil {
				return bad
			}
		default:
			return bad
		}
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		if alg[:2] != "ES" || len(sig) != 2*size {
			return bad
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		if !ecdsa.Verify(k, digest, r, s) {
			return bad
		}
	default:
		return bad
	}
	return nil
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
