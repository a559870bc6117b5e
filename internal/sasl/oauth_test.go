package sasl

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// testIssuer signs JWTs with an RSA and an EC key and writes their JWKS.
type testIssuer struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	jwks string
}

func newTestIssuer(t testing.TB) *testIssuer {
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	i := &testIssuer{rsa: r, ec: e, jwks: filepath.Join(t.TempDir(), "jwks.json")}
	i.writeJWKS(t, "rsa-1", "ec-1")
	return i
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (i *testIssuer) writeJWKS(t testing.TB, rsaKid, ecKid string) {
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": rsaKid, "use": "sig", "n": enc(i.rsa.N.Bytes()), "e": enc(big.NewInt(int64(i.rsa.E)).Bytes())},
		{"kty": "EC", "kid": ecKid, "crv": "P-256", "x": enc(i.ec.X.FillBytes(make([]byte, 32))), "y": enc(i.ec.Y.FillBytes(make([]byte, 32)))},
		{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
	}}
	b, _ := json.Marshal(set)
	if err := os.WriteFile(i.jwks, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (i *testIssuer) token(t testing.TB, alg, kid string, claims map[string]any) string {
	h, _ := json.Marshal(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"})
	c, _ := json.Marshal(claims)
	signed := enc(h) + "." + enc(c)
	d := sha256.Sum256([]byte(signed))
	var sig []byte
	var err error
	switch alg {
	case "RS256":
		sig, err = rsa.SignPKCS1v15(rand.Reader, i.rsa, crypto.SHA256, d[:])
	case "PS256":
		sig, err = rsa.SignPSS(rand.Reader, i.rsa, crypto.SHA256, d[:], nil)
	case "ES256":
		var r, s *big.Int
		r, s, err = ecdsa.Sign(rand.Reader, i.ec, d[:])
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + enc(sig)
}

// message is franz-go's OAUTHBEARER client message for token.
func message(t testing.TB, token string) []byte {
	_, msg, err := oauth.Auth{Token: token}.AsMechanism().Authenticate(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func TestOAuthBearer(t *testing.T) {
	iss := newTestIssuer(t)
	v, err := NewOAuthValidator(OAuthConfig{JWKSFile: iss.jwks, Issuer: "https://idp.example", Audience: []string{"kafka"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ok := map[string]any{"sub": "alice", "iss": "https://idp.example", "aud": []string{"other", "kafka"}, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	for _, alg := range []string{"RS256", "PS256", "ES256"} {
		kid := "rsa-1"
		if alg == "ES256" {
			kid = "ec-1"
		}
		sub, exp, err := v.Validate(message(t, iss.token(t, alg, kid, ok)), now)
		if err != nil || sub != "alice" || exp.Unix() != now.Add(time.Hour).Unix() {
			t.Fatalf("%s: %q %v %v", alg, sub, exp, err)
		}
	}
	with := func(k string, val any) map[string]any {
		c := map[string]any{}
		for a, b := range ok {
			c[a] = b
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	for name, tok := range map[string]string{
		"expired":        iss.token(t, "RS256", "rsa-1", with("exp", now.Add(-time.Minute).Unix())),
		"no exp":         iss.token(t, "RS256", "rsa-1", with("exp", nil)),
		"not yet":        iss.token(t, "RS256", "rsa-1", with("nbf", now.Add(time.Minute).Unix())),
		"other issuer":   iss.token(t, "RS256", "rsa-1", with("iss", "https://evil.example")),
		"other audience": iss.token(t, "RS256", "rsa-1", with("aud", "billing")),
		"no sub":         iss.token(t, "RS256", "rsa-1", with("sub", nil)),
		"unknown kid":    iss.token(t, "RS256", "rsa-9", ok),
		"wrong key":      iss.token(t, "ES256", "rsa-1", ok),
		"alg none":       strings.Join(strings.Split(iss.token(t, "RS256", "rsa-1", ok), ".")[:2], ".") + ".",
		"tampered":       iss.token(t, "RS256", "rsa-1", ok)[:40] + "A" + iss.token(t, "RS256", "rsa-1", ok)[41:],
	} {
		if _, _, err := v.Validate(message(t, tok), now); !errors.Is(err, ErrAuthentication) {
			t.Errorf("%s: %v, want an authentication failure", name, err)
		}
	}
	hs, _ := json.Marshal(map[string]string{"alg": "HS256", "kid": "hmac"})
	if _, _, err := v.Validate(message(t, enc(hs)+"."+enc([]byte(`{"sub":"x"}`))+".AAAA"), now); !errors.Is(err, ErrAuthentication) {
		t.Errorf("HS256: %v", err)
	}

	// Keys rotate: a new JWKS without rsa-1 refuses its tokens (the file
	// is looked at once a second at most).
	iss.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
	iss.writeJWKS(t, "rsa-2", "ec-1")
	future := time.Now().Add(2 * time.Second)
	os.Chtimes(iss.jwks, future, future)
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, _, err := v.Validate(message(t, iss.token(t, "RS256", "rsa-2", ok)), now)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated key, 5 s after the file changed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, _, err := v.Validate(message(t, iss.token(t, "RS256", "rsa-1", ok)), now); err == nil {
		t.Fatal("the retired key's kid still verifies")
	}
}

func FuzzOAuthBearer(f *testing.F) {
	f.Add([]byte("n,,\x01auth=Bearer a.b.c\x01\x01"))
	f.Add([]byte("n,a=x,\x01host=h\x01auth=bearer eyJhbGciOiJSUzI1NiJ9.e30.AAAA\x01\x01"))
	iss := newTestIssuer(f)
	v, err := NewOAuthValidator(OAuthConfig{JWKSFile: iss.jwks})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if sub, _, err := v.Validate(msg, time.Now()); err == nil {
			t.Fatalf("a fuzzed token authenticated %q", sub)
		}
	})
}

// TestOAuthJWKSURL: the key set fetched from an identity provider over
// https: tokens verify against it; a rotated key is fetched when a token
// first names it (at most every 10 s), and the keys before serve while the
// provider fails; every refresh interval the set is fetched again. A
// provider that cannot be reached at start, or serves no key, is an error.
func TestOAuthJWKSURL(t *testing.T) {
	iss := newTestIssuer(t)
	var fetches atomic.Int32
	var failing atomic.Bool
	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		http.ServeFile(w, r, iss.jwks)
	}))
	defer idp.Close()
	v, err := NewOAuthValidator(OAuthConfig{JWKSURL: idp.URL + "/jwks", HTTPClient: idp.Client(), Refresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := map[string]any{"sub": "alice", "exp": now.Add(time.Hour).Unix()}
	if user, _, err := v.Validate(message(t, iss.token(t, "RS256", "rsa-1", claims)), now); err != nil || user != "alice" {
		t.Fatalf("a token of the fetched set: %q %v", user, err)
	}
	// The provider rotates to rsa-2: the first token naming it fetches
	// the set again (once the 10 s since the last fetch have passed).
	iss.writeJWKS(t, "rsa-2", "ec-1")
	if _, _, err := v.Validate(message(t, iss.token(t, "RS256", "rsa-2", claims)), now); err == nil {
		t.Fatal("an unknown key was fetched within 10 s of the last fetch")
	}
	v.mu.Lock()
	v.mu.checked = v.mu.checked.Add(-unknownKidCheck)
	v.mu.Unlock()
	if _, _, err := v.Validate(message(t, iss.token(t, "RS256", "rsa-2", claims)), now); err != nil {
		t.Fatalf("a rotated key: %v", err)
	}
	// The provider fails: the keys before serve.
	failing.Store(true)
	v.mu.Lock()
	v.mu.checked, v.mu.fetched = v.mu.checked.Add(-time.Hour), v.mu.fetched.Add(-2*time.Hour)
	v.mu.Unlock()
	before := fetches.Load()
	if _, _, err := v.Validate(message(t, iss.token(t, "RS256", "rsa-2", claims)), now); err != nil {
		t.Fatalf("while the provider fails: %v", err)
	}
	if fetches.Load() == before {
		t.Error("the refresh interval passed and the set was not fetched again")
	}
	if _, err := NewOAuthValidator(OAuthConfig{JWKSURL: idp.URL + "/jwks", HTTPClient: idp.Client()}); err == nil {
		t.Error("a provider that fails at start was taken")
	}
	if _, err := NewOAuthValidator(OAuthConfig{JWKSURL: "ftp://idp/jwks"}); err == nil {
		t.Error("an ftp URL was taken")
	}
	if _, err := NewOAuthValidator(OAuthConfig{JWKSURL: idp.URL, JWKSFile: iss.jwks}); err == nil {
		t.Error("a file and a URL were taken")
	}
}
