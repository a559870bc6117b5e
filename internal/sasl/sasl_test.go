package sasl

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func users(t testing.TB, pass map[string]string) Lookup {
	creds := map[string]map[ScramMechanism]Credential{}
	for u, p := range pass {
		creds[u] = map[ScramMechanism]Credential{}
		for _, m := range ScramMechanisms {
			c, err := NewCredential(m, []byte(p), 0)
			if err != nil {
				t.Fatal(err)
			}
			creds[u][m] = c
		}
	}
	return func(u string, m ScramMechanism) (Credential, bool) {
		c, ok := creds[u][m]
		return c, ok
	}
}

// converse runs franz-go's SCRAM client against the server.
func converse(t *testing.T, m ScramMechanism, lookup Lookup, user, pass string) (string, error) {
	t.Helper()
	a := scram.Auth{User: user, Pass: pass}
	mech := a.AsSha256Mechanism()
	if m == SHA512 {
		mech = a.AsSha512Mechanism()
	}
	sess, msg, err := mech.Authenticate(context.Background(), "127.0.0.1:9092")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewScramServer(m, lookup, []byte("secret"))
	for {
		reply, err := srv.Step(msg)
		if err != nil {
			return "", err
		}
		done, next, err := sess.Challenge(reply)
		if err != nil {
			t.Fatalf("the client refused the server's answer %q: %v", reply, err)
		}
		if done {
			if !srv.Done() {
				t.Fatalf("the client is done, the server is not")
			}
			return srv.User(), nil
		}
		msg = next
	}
}

func TestScramWithFranzGo(t *testing.T) {
	lookup := users(t, map[string]string{"alice": "s3cret", "b,o=b": "pw"})
	for _, m := range ScramMechanisms {
		if u, err := converse(t, m, lookup, "alice", "s3cret"); err != nil || u != "alice" {
			t.Fatalf("%s: %q %v", m, u, err)
		}
		if u, err := converse(t, m, lookup, "b,o=b", "pw"); err != nil || u != "b,o=b" {
			t.Fatalf("%s escaped name: %q %v", m, u, err)
		}
		_, wrong := converse(t, m, lookup, "alice", "guess")
		_, unknown := converse(t, m, lookup, "mallory", "guess")
		if !errors.Is(wrong, ErrAuthentication) || wrong.Error() != unknown.Error() {
			t.Fatalf("%s: wrong password %v, unknown user %v: both must fail alike", m, wrong, unknown)
		}
		if strings.Contains(wrong.Error(), "guess") {
			t.Fatalf("the error shows the password: %v", wrong)
		}
	}
}

func TestUnknownUserSaltIsStable(t *testing.T) {
	lookup := users(t, nil)
	first := func() string {
		s := NewScramServer(SHA256, lookup, []byte("k"))
		out, err := s.Step([]byte("n,,n=ghost,r=abc"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(out), ",")[1]
	}
	if a, b := first(), first(); a != b {
		t.Fatalf("an unknown user's salt changes between attempts (%s, %s): it shows the user does not exist", a, b)
	}
}

func TestScramRefusals(t *testing.T) {
	lookup := users(t, map[string]string{"alice": "pw"})
	for _, msg := range []string{
		"", "n", "n,,", "x,,n=alice,r=a", "p=tls-unique,,n=alice,r=a", "n,,r=a,n=alice",
		"n,,n=,r=abc", "n,,n=alice,r=", "n,,n=al=ice,r=a", "n,a=bob,n=alice,r=a",
		"n,,n=alice,r=a,tokenauth=true", "n,,n=alice,r=a,1x", "n,,n=alice,r=a b",
		"n,,n=\xff,r=a", strings.Repeat("x", maxMessage+1),
	} {
		if _, err := NewScramServer(SHA256, lookup, nil).Step([]byte(msg)); !errors.Is(err, ErrAuthentication) {
			t.Errorf("client-first %q: %v, want an authentication failure", msg, err)
		}
	}
	s := NewScramServer(SHA256, lookup, nil)
	first, err := s.Step([]byte("n,,n=alice,r=abc"))
	if err != nil {
		t.Fatal(err)
	}
	nonce := strings.TrimPrefix(strings.Split(string(first), ",")[0], "r=")
	for _, msg := range []string{
		"c=biws,r=" + nonce, "c=biws,r=" + nonce + ",p=!!", "c=eSws,r=" + nonce + ",p=AAAA",
		"c=biws,r=other,p=AAAA", "r=" + nonce + ",c=biws,p=AAAA",
	} {
		s := NewScramServer(SHA256, lookup, nil)
		s.Step([]byte("n,,n=alice,r=abc"))
		s.nonce = nonce
		if _, err := s.Step([]byte(msg)); !errors.Is(err, ErrAuthentication) {
			t.Errorf("client-final %q: %v, want an authentication failure", msg, err)
		}
	}
	if _, err := s.Step([]byte("c=biws,r=" + nonce + ",p=AAAA")); !errors.Is(err, ErrAuthentication) {
		t.Fatal("a wrong proof passed")
	}
	// librdkafka's final nonce: its own again, then the server's whole one
	// (Kafka accepts a nonce that ends with the server's).
	lookupPW := users(t, map[string]string{"alice": "pw"})
	s = NewScramServer(SHA256, lookupPW, nil)
	first, _ = s.Step([]byte("n,,n=alice,r=abc"))
	nonce = strings.TrimPrefix(strings.Split(string(first), ",")[0], "r=")
	c, _ := lookupPW("alice", SHA256)
	salted := SaltedPassword(SHA256, []byte("pw"), c.Salt, int(c.Iterations))
	without := "c=biws,r=abc" + nonce
	if _, err := s.Step([]byte(without + ",p=" + proof(SHA256, salted, "n=alice,r=abc,"+string(first)+","+without))); err != nil {
		t.Fatalf("librdkafka's nonce: %v", err)
	}
	if _, err := s.Step([]byte("anything")); !errors.Is(err, ErrAuthentication) {
		t.Fatal("a step after a failed conversation passed")
	}
}

// proof is a client's proof for an auth message (RFC 5802).
func proof(m ScramMechanism, salted []byte, authMessage string) string {
	h := m.hash()
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	sig := hmacOf(h, stored.Sum(nil), []byte(authMessage))
	for i := range sig {
		sig[i] ^= clientKey[i]
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func TestPlain(t *testing.T) {
	lookup := users(t, map[string]string{"alice": "s3cret"})
	auth := plain.Auth{User: "alice", Pass: "s3cret"}
	_, msg, err := auth.AsMechanism().Authenticate(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if u, err := VerifyPlain(msg, lookup, nil); err != nil || u != "alice" {
		t.Fatalf("franz-go's PLAIN: %q %v", u, err)
	}
	if u, err := VerifyPlain([]byte("alice\x00alice\x00s3cret"), lookup, nil); err != nil || u != "alice" {
		t.Fatalf("with an authzid: %q %v", u, err)
	}
	_, wrong := VerifyPlain([]byte("\x00alice\x00nope"), lookup, nil)
	_, unknown := VerifyPlain([]byte("\x00bob\x00nope"), lookup, nil)
	if !errors.Is(wrong, ErrAuthentication) || wrong.Error() != unknown.Error() {
		t.Fatalf("wrong password %v, unknown user %v", wrong, unknown)
	}
	for _, msg := range []string{"", "alice", "\x00alice", "\x00\x00pw", "\x00alice\x00", "bob\x00alice\x00pw", "\x00a\x00b\x00c"} {
		if _, err := VerifyPlain([]byte(msg), lookup, nil); !errors.Is(err, ErrAuthentication) {
			t.Errorf("PLAIN %q: %v", msg, err)
		}
	}
}

func TestCredentialCheck(t *testing.T) {
	c, err := NewCredential(SHA512, []byte("pw"), 0)
	if err != nil || c.Iterations != MinIteration || !c.Verify([]byte("pw")) || c.Verify([]byte("pW")) {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []Credential{
		{Mechanism: 3, Iterations: 4096, Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey},
		{Mechanism: SHA512, Iterations: 4095, Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey},
		{Mechanism: SHA512, Iterations: 16385, Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey},
		{Mechanism: SHA512, Iterations: 4096, StoredKey: c.StoredKey, ServerKey: c.ServerKey},
		{Mechanism: SHA256, Iterations: 4096, Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey},
	} {
		if bad.Check() == nil {
			t.Errorf("%+v passed its check", bad)
		}
	}
}

func FuzzScramServer(f *testing.F) {
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("y,a=alice,n=alice,r=x,e=1"), []byte("c=eSxhPWFsaWNlLA==,r=x,p="))
	lookup := users(f, map[string]string{"alice": "pw"})
	f.Fuzz(func(t *testing.T, first, final []byte) {
		s := NewScramServer(SHA256, lookup, []byte("k"))
		if _, err := s.Step(first); err != nil {
			return
		}
		if _, err := s.Step(final); err == nil {
			t.Fatalf("a fuzzed proof authenticated: %q %q", first, final)
		}
	})
}

func FuzzParsePlain(f *testing.F) {
	f.Add([]byte("\x00alice\x00pw"))
	f.Add([]byte("a\x00a\x00"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := ParsePlain(msg)
		if err == nil && (r.User == "" || len(r.Password) == 0) {
			t.Fatalf("%q parsed to %+v", msg, r)
		}
	})
}
