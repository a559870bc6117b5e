package kafka

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"hash"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	stelesasl "github.com/stele-io/stele/internal/sasl"
)

// BenchmarkLogin (docs/benchmarks.md, "SASL logins"): new connections to
// a broker on loopback, each authenticated and then asking ApiVersions,
// one after another: none (a PLAINTEXT listener: the peer), PLAIN (the
// broker salts and hashes the password: PBKDF2 with 4096 iterations) and
// SCRAM-SHA-256/512 (the broker checks a proof with a few HMACs; the
// client's salted password is computed once, as a client that reconnects
// may keep it, so the figure is the broker's side). Reported as logins/s.
func BenchmarkLogin(b *testing.B) {
	tb, saslAddr := startSASLBroker(b, nil)
	creds := map[stelesasl.ScramMechanism][]byte{}
	for _, m := range stelesasl.ScramMechanisms {
		c, _ := tb.b.Users().Credential(AdminUser, m)
		creds[m] = stelesasl.SaltedPassword(m, []byte("admin-secret"), c.Salt, int(c.Iterations))
	}
	roundTrip := func(c net.Conn, req kmsg.Request) []byte {
		if _, err := c.Write(frames(req, 1)); err != nil {
			b.Fatal(err)
		}
		r, err := readFrame(c)
		if err != nil {
			b.Fatal(err)
		}
		return r[4:]
	}
	apiVersions := kmsg.NewPtrApiVersionsRequest()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version = 1
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version = 1
	authenticate := func(c net.Conn, token []byte) []byte {
		auth.SASLAuthBytes = token
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		resp.Version = 1
		if err := resp.ReadFrom(roundTrip(c, auth)); err != nil || resp.ErrorCode != 0 {
			b.Fatalf("SaslAuthenticate: %v %d", err, resp.ErrorCode)
		}
		return resp.SASLAuthBytes
	}
	for _, mech := range []string{"none", stelesasl.Plain, stelesasl.ScramSHA256, stelesasl.ScramSHA512} {
		b.Run(mech, func(b *testing.B) {
			addr := saslAddr
			if mech == "none" {
				addr = tb.addr
			}
			for b.Loop() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				if mech != "none" {
					hs.Mechanism = mech
					roundTrip(c, hs)
				}
				switch mech {
				case stelesasl.Plain:
					authenticate(c, []byte("\x00admin\x00admin-secret"))
				case stelesasl.ScramSHA256, stelesasl.ScramSHA512:
					m, _ := stelesasl.ParseScramMechanism(mech)
					bare := "n=admin,r=benchnonce0123456789"
					first := string(authenticate(c, []byte("n,,"+bare)))
					nonce := strings.TrimPrefix(strings.Split(first, ",")[0], "r=")
					without := "c=biws,r=" + nonce
					authenticate(c, []byte(without+",p="+clientProof(m, creds[m], bare+","+first+","+without)))
				}
				roundTrip(c, apiVersions)
				c.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "logins/s")
		})
	}
}

// clientProof is RFC 5802's ClientProof from a salted password.
func clientProof(m stelesasl.ScramMechanism, salted []byte, authMessage string) string {
	h := func() hash.Hash { return sha256.New() }
	if m == stelesasl.SHA512 {
		h = sha512.New
	}
	mac := func(key []byte, msg string) []byte {
		x := hmac.New(h, key)
		x.Write([]byte(msg))
		return x.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	st := h()
	st.Write(clientKey)
	sig := mac(st.Sum(nil), authMessage)
	for i := range sig {
		sig[i] ^= clientKey[i]
	}
	return base64.StdEncoding.EncodeToString(sig)
}
