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
//	stele-signature: v2:<principal>:<seq>:<signature, base64url without padding>
//
// The signature is over RecordMessageFor: the chain (the cluster's chain
// id, which Kafka clients see as the cluster id), the topic, the
// principal, the sequence and the record's key, value and headers (all but
// the signature header, in order) — never the offset or timestamp a broker
// assigns, nor the partition. A v1 signature (RecordMessage) names no
// chain: a chain at app version 1 takes only those, one at version 2 or
// later only v2 signatures naming it, so a record signed for one chain is
// refused by another whose registry holds the same key. The state machine verifies it before applying the record
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

// RecordMessage is what a v1 record signature signs, one that names no
// chain:
//
//	"stele/record/v1" 0x00 | u16 len | topic | u16 len | principal | u64 seq |
//	key (i32 len, -1 null | bytes) | value (same) |
//	u32 count | each header but SignatureHeader: u16 len | key | i32 len, -1 null | value
func RecordMessage(topic, principal string, seq uint64, key, value []byte, headers []RecordHeader) []byte {
	return RecordMessageFor("", topic, principal, seq, key, value, headers)
}

// RecordMessageFor is what a record's signature for chain signs: a v2
// signature's, or with chain "" a v1 one's (RecordMessage).
//
//	"stele/record/v2" 0x00 | u16 len | chain | then as v1 from the topic on
func RecordMessageFor(chain, topic, principal string, seq uint64, key, value []byte, headers []RecordHeader) []byte {
	b := make([]byte, 0, 72+len(chain)+len(topic)+len(principal)+len(key)+len(value))
	if chain == "" {
		b = append(b, "stele/record/v1\x00"...)
	} else {
		b = append(b, "stele/record/v2\x00"...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(chain)))
		b = append(b, chain...)
	}
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

// SignRecord returns the v1 SignatureHeader value, naming no chain, that
// signs the record for principal with sequence seq (unique among the
// principal's records: the cluster refuses a sequence used before). Only
// a chain at app version 1 takes it; see SignRecordFor.
func SignRecord(priv ed25519.PrivateKey, principal string, seq uint64, topic string, key, value []byte, headers []RecordHeader) string {
	return SignRecordFor(priv, "", principal, seq, topic, key, value, headers)
}

// SignRecordFor returns the SignatureHeader value that signs the record
// for principal on the chain chain: v2, bound to it, or v1 for chain "".
func SignRecordFor(priv ed25519.PrivateKey, chain, principal string, seq uint64, topic string, key, value []byte, headers []RecordHeader) string {
	sig := ed25519.Sign(priv, RecordMessageFor(chain, topic, principal, seq, key, value, headers))
	v := "v2:"
	if chain == "" {
		v = "v1:"
	}
	return v + principal + ":" + strconv.FormatUint(seq, 10) + ":" + base64.RawURLEncoding.EncodeToString(sig)
}

// Signature is a parsed SignatureHeader value.
type Signature struct {
	// Version is 1 (the signature names no chain) or 2 (it is bound to
	// the chain it is verified on).
	Version   int
	Principal string
	Seq       uint64
	Sig       []byte
}

// ParseSignature parses a SignatureHeader value.
func ParseSignature(v []byte) (Signature, error) {
	parts := strings.Split(string(v), ":")
	if len(parts) != 4 || parts[0] != "v1" && parts[0] != "v2" {
		return Signature{}, fmt.Errorf("%w: header %s is not v1 or v2:<principal>:<seq>:<signature>", ErrBadSignature, SignatureHeader)
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
	return Signature{Version: int(parts[0][1] - '0'), Principal: parts[1], Seq: seq, Sig: sig}, nil
}

// VerifyRecord checks a record's v1 signature s, which names no chain,
// against pub; a v2 signature needs its chain: VerifyRecordOn.
func VerifyRecord(pub ed25519.PublicKey, s Signature, topic string, key, value []byte, headers []RecordHeader) error {
	return VerifyRecordOn(pub, "", s, topic, key, value, headers)
}

// VerifyRecordOn checks a record's signature s against pub, on the chain
// chain: a v2 signature must be over the message naming chain, a v1 one
// over the message naming none (which of them a chain takes is its app
// version's choice, not this function's).
func VerifyRecordOn(pub ed25519.PublicKey, chain string, s Signature, topic string, key, value []byte, headers []RecordHeader) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrBadSignature, len(pub))
	}
	bound := ""
	if s.Version == 2 {
		if chain == "" {
			return fmt.Errorf("%w: a v2 signature is verified on the chain it names; no chain given", ErrBadSignature)
		}
		bound = chain
	}
	if !ed25519.Verify(pub, RecordMessageFor(bound, topic, s.Principal, s.Seq, key, value, headers), s.Sig) {
		if s.Version == 2 {
			return fmt.Errorf("%w: %s's signature (sequence %d) does not match the record on chain %s", ErrBadSignature, s.Principal, s.Seq, chain)
		}
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

// AdminMessage is what a signed administrative command signs (signed
// administration, docs/security.md): the chain, the signing principal, a
// sequence the principal never used before, and the command as the state
// machine encodes it (its kind, then its body):
//
//	"stele/admin/v1" 0x00 | u16 len | chain | u16 len | principal | u64 seq |
//	u32 len | command
//
// So a signature is bound to one chain and one command, and the state
// machine, which remembers the principal's used sequences, applies it once.
func AdminMessage(chain, principal string, seq uint64, command []byte) []byte {
	b := make([]byte, 0, 32+len(chain)+len(principal)+len(command))
	b = append(b, "stele/admin/v1\x00"...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(chain)))
	b = append(b, chain...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(principal)))
	b = append(b, principal...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, uint32(len(command)))
	return append(b, command...)
}
