package dataplane

// Broker-to-broker authentication (issue 17, docs/security.md): every
// request a broker makes of another's data plane carries NodeAuthHeader,
// its validator key's signature of the request (authMessage): the chain,
// the method and the request URI, path and query as sent. A push's query
// names the batch's digest, which the receiver checks against the body
// before it signs the batch, so a signature authorizes one batch at one
// height, and a fetch's path names the digest it reads. The receiver
// serves only requests signed by a validator of its set: a client that is
// not a broker can neither push batches nor read them. There is no clock
// in it: replaying a captured request pushes or reads the very batch it
// pushed or read, which the eavesdropper already saw.

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// NodeAuthHeader carries a broker's authentication of a data-plane
// request: "<validator address, hex>:<ed25519 signature, base64url>".
const NodeAuthHeader = "Stele-Node-Auth"

// errUnauthenticated is wrapped by every refused authentication.
var errUnauthenticated = errors.New("stele/dataplane: not a broker of this cluster")

// authMessage is what a request's NodeAuthHeader signs:
//
//	"stele/internal/v1" 0x00 | u16 len | chain | u16 len | method |
//	u32 len | request URI (path and raw query)
func authMessage(chain, method, uri string) []byte {
	b := make([]byte, 0, 32+len(chain)+len(method)+len(uri))
	b = append(b, "stele/internal/v1\x00"...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(chain)))
	b = append(b, chain...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(method)))
	b = append(b, method...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(uri)))
	return append(b, uri...)
}

// authenticate signs req with this broker's key.
func (p *Plane) authenticate(req *http.Request) {
	me := p.self.Load()
	sig := ed25519.Sign(me.key, authMessage(p.opts.ChainID, req.Method, req.URL.RequestURI()))
	req.Header.Set(NodeAuthHeader, hex.EncodeToString(me.address[:])+":"+base64.RawURLEncoding.EncodeToString(sig))
}

// authenticated checks r's NodeAuthHeader against the validator set and
// returns the signer's address.
func (p *Plane) authenticated(r *http.Request) ([20]byte, error) {
	var addr [20]byte
	h := r.Header.Get(NodeAuthHeader)
	if h == "" {
		return addr, fmt.Errorf("%w: no %s header", errUnauthenticated, NodeAuthHeader)
	}
	a, s, ok := strings.Cut(h, ":")
	raw, err := hex.DecodeString(a)
	if !ok || err != nil || len(raw) != len(addr) {
		return addr, fmt.Errorf("%w: %s is not <validator address>:<signature>", errUnauthenticated, NodeAuthHeader)
	}
	copy(addr[:], raw)
	sig, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return addr, fmt.Errorf("%w: %s carries no signature", errUnauthenticated, NodeAuthHeader)
	}
	pub, ok := p.key(addr)
	if !ok {
		return addr, fmt.Errorf("%w: %X is no broker of this cluster", errUnauthenticated, addr)
	}
	if !ed25519.Verify(pub, authMessage(p.opts.ChainID, r.Method, r.URL.RequestURI()), sig) {
		return addr, fmt.Errorf("%w: the signature of %X does not verify", errUnauthenticated, addr)
	}
	return addr, nil
}
