package kafka

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/stele-io/stele/internal/sasl"
)

// TestOAuthBearer: franz-go logs in with a JWT signed by a key of the
// broker's JWKS file (KIP-768), as User:<sub>, and is then authorized by
// the ACLs like any principal; an expired token, one of another issuer
// and one signed by an unknown key are refused with
// SASL_AUTHENTICATION_FAILED; with connections.max.reauth.ms the session
// ends no later than the token.
func TestOAuthBearer(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "k1", "n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	if err := os.WriteFile(jwks, set, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := sasl.NewOAuthValidator(sasl.OAuthConfig{JWKSFile: jwks, Issuer: "https://idp.example"})
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := startSASLBroker(t, func(o *Options) { o.OAuth, o.MaxReauth = v, time.Hour })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tb.srv.ServeListener(l, Listener{Name: "SASL_PLAINTEXT", SASLMechanisms: []string{sasl.OAuthBearer}})
	ln := l.Addr().String()
	token := func(kid string, claims map[string]any) string {
		h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": kid})
		c, _ := json.Marshal(claims)
		signed := b64(h) + "." + b64(c)
		d := sha256.Sum256([]byte(signed))
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
		if err != nil {
			t.Fatal(err)
		}
		return signed + "." + b64(sig)
	}
	good := map[string]any{"sub": "svc-billing", "iss": "https://idp.example", "exp": time.Now().Add(10 * time.Minute).Unix()}
	cl := client(t, ln, kgo.SASL(oauth.Auth{Token: token("k1", good)}.AsMechanism()), kgo.RequestRetries(0))
	if err := cl.Ping(ctx(t)); err != nil {
		t.Fatalf("a valid token: %v", err)
	}
	if !strings.Contains(strings.Join(principals(tb), " "), "User:svc-billing") {
		t.Fatalf("principals %v", principals(tb))
	}
	// Authorized by the ACLs like anyone: nothing granted yet.
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType, req.Operation, req.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	if resp, err := req.RequestWith(ctx(t), cl); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("DescribeAcls without an ACL: %v %+v", err, resp)
	}
	// The session is the token's remaining life, under the hour of
	// connections.max.reauth.ms.
	c := rawConn(t, ln)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, sasl.OAuthBearer
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("n,,\x01auth=Bearer "+token("k1", good)+"\x01\x01")
	c.Write(append(frames(hs, 1), frames(auth, 1)...))
	readFrame(c)
	b, err := readFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = 1
	if err := resp.ReadFrom(b[4:]); err != nil || resp.ErrorCode != 0 || resp.SessionLifetimeMillis > (10*time.Minute).Milliseconds() || resp.SessionLifetimeMillis < (9*time.Minute).Milliseconds() {
		t.Fatalf("SaslAuthenticate: %v %+v, want a session of the token's 10 minutes", err, resp)
	}

	for name, tok := range map[string]string{
		"expired":      token("k1", map[string]any{"sub": "x", "iss": "https://idp.example", "exp": time.Now().Add(-time.Hour).Unix()}),
		"other issuer": token("k1", map[string]any{"sub": "x", "iss": "https://evil.example", "exp": time.Now().Add(time.Hour).Unix()}),
		"unknown key":  token("k2", good),
	} {
		err := client(t, ln, kgo.SASL(oauth.Auth{Token: tok}.AsMechanism()), kgo.RequestRetries(0)).Ping(ctx(t))
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}
}
