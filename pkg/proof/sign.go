package proof

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Signed producers (docs/signed-producers.md): a producer signs each
// record with its own ed25519 key, registered in the cluster for a
// principal name; the signature travels in the record header
// SignatureHeader, which any Kafka client can write:
//
//	stele-signature: v1:<principal>:<seq>:<signature, base64url without padding>
//
// The signature is over RecordMessage: the topic, the principal, the
// sequence and the record's key, value and headers (all but the signature
// header, in order) — never the offset or timestamp a broker assigns, nor
// the partition. The state machine verifies it before applying the record
// and refuses a sequence the principal used before, so no broker can alter,
// forge or replay a signed record.

// SignatureHeader is the record header carrying a record's signature.
const SignatureHeader = "stele-signature"

// ErrBadSignature is wrapped by every signature failure.
var ErrBadSignature = errors.New("stele/proof: bad record signature")

// RecordHeader is one record header, for signing.
type RecordHeader struct {
	Key   string
	Value []byte // nil: null
}

// ValidPrincipal checks a principal name: 1 to 128 characters among
// letters, digits and . _ - @.
func ValidPrincipal(p string) error {
	if len(p) == 0 || len(p) > 128 {
		return fmt.Errorf("%w: principal %q: 1 to 128 characters", ErrBadSignature, p)
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-@", c)) {
			return fmt.Errorf("%w: principal %q: only letters, digits and . _ - @", ErrBadSignature, p)
		}
	}
	return nil
}

// RecordMessage is what a record's signature signs:
//
//	"stele/record/v1" 0x00 | u16 len | topic | u16 len | principal | u64 seq |
//	key (i32 len, -1 null | bytes) | value (same) |
//	u32 count | each header but SignatureHeader: u16 len | key | i32 len, -1 null | value
func RecordMessage(topic, principal string, seq uint64, key, value []byte, headers []RecordHeader) []byte {
	b := make([]byte, 0, 64+len(topic)+len(principal)+len(key)+len(value))
	b = append(b, "stele/record/v1\x00"...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(principal)))
	b = append(b, principal...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = appendNullable(b, key)
	b = appendNullable(b, value)
	n := 0
	for _, h := range headers {
		if h.Key != SignatureHeader {
			n++
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for _, h := range headers {
		if h.Key == SignatureHeader {
			continue
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.Key)))
		b = append(b, h.Key...)
		b = appendNullable(b, h.Value)
	}
	return b
}

func appendNullable(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// SignRecord returns the SignatureHeader value that signs the record for
// principal with sequence seq (unique among the principal's records: the
// cluster refuses a sequence used before).
func SignRecord(priv ed25519.PrivateKey, principal string, seq uint64, topic string, key, value []byte, headers []RecordHeader) string {
	sig := ed25519.Sign(priv, RecordMessage(topic, principal, seq, key, value, headers))
	return "v1:" + principal + ":" + strconv.FormatUint(seq, 10) + ":" + base64.RawURLEncoding.EncodeToString(sig)
}

// Signature is a parsed SignatureHeader value.
type Signature struct {
	Principal string
	Seq       uint64
	Sig       []byte
}

// ParseSignature parses a SignatureHeader value.
func ParseSignature(v []byte) (Signature, error) {
	parts := strings.Split(string(v), ":")
	if len(parts) != 4 || parts[0] != "v1" {
		return Signature{}, fmt.Errorf("%w: header %s is not v1:<principal>:<seq>:<signature>", ErrBadSignature, SignatureHeader)
	}
	if err := ValidPrincipal(parts[1]); err != nil {
		return Signature{}, err
	}
	seq, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return Signature{}, fmt.Errorf("%w: sequence %q is not a number", ErrBadSignature, parts[2])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Signature{}, fmt.Errorf("%w: the signature is not %d bytes of base64url", ErrBadSignature, ed25519.SignatureSize)
	}
	return Signature{Principal: parts[1], Seq: seq, Sig: sig}, nil
}

// VerifyRecord checks a record's signature s against pub.
func VerifyRecord(pub ed25519.PublicKey, s Signature, topic string, key, value []byte, headers []RecordHeader) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrBadSignature, len(pub))
	}
	if !ed25519.Verify(pub, RecordMessage(topic, s.Principal, s.Seq, key, value, headers), s.Sig) {
		return fmt.Errorf("%w: %s's signature (sequence %d) does not match the record", ErrBadSignature, s.Principal, s.Seq)
	}
	return nil
}

// RegistrationMessage is what registering pub for principal signs: the new
// key signs it (it proves its holder has the key), and the principal's
// current key, if it has one, endorses it (only the key's holder rotates
// it).
func RegistrationMessage(principal string, pub ed25519.PublicKey) []byte {
	b := append([]byte("stele/producer-key/v1\x00"), principal...)
	b = append(b, 0)
	return append(b, pub...)
}
