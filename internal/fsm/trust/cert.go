package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/stele-io/stele/internal/fsm/core"
)

// Certified transactions: the data plane (DESIGN.md §4).
//
// A broker that receives produce requests encodes them as an ordinary
// transaction (the payload), stores it durably, and has it stored and
// signed by other validators; signatures carrying more than a third of the
// voting power make a certificate, since at least one of their holders is
// honest and has the bytes. Only the certificate is ordered. Its layout:
//
//	magic   "STL"        3 bytes
//	version 2 or 3       1 byte
//	chain id             version 3 only: uvarint length, 1..50 bytes
//	digest               32 bytes, SHA-256 of the payload
//	size                 u32, the payload's length
//	height               i64, the committed height when the batch was made
//	count                uvarint, 1..maxCertSigs
//	count × { validator address [20]byte, ed25519 signature [64]byte }
//
// Each signature is over Statement(): a fixed prefix that no CometBFT
// sign-bytes start with, then, for a version 3 certificate, the chain id
// (CometBFT's genesis chain_id), then digest, size and height. A version
// 2 certificate names no chain: validators that use the same keys on two
// chains (a staging cluster's, say) sign statements that verify on both,
// so one chain's certificate could be put before the other, claiming that
// its validators stored a batch they may never have seen. From app
// version 2 only chain-bound certificates (version 3) are applied, and one
// naming another chain is refused; under app version 1 only version 2
// ones, as before (cert_apply.go: chainCertsVersion). Applying a
// certificate applies its payload's commands exactly as if the payload had
// been ordered inline, so the partition logs are the same either way.
//
// A certificate is applied at most once, and only at heights in
// (Height, Height+CertWindow]: the window bounds how long brokers must keep
// unordered batches, and how much the state must remember to refuse a
// certificate ordered twice.

const (
	// certVersion is the form of a certificate that names no chain,
	// certVersionChain of one bound to its chain.
	certVersion      = 2
	certVersionChain = 3
	// CertWindow is how many heights after its batch was made a
	// certificate may be applied.
	CertWindow = 1000
	// MaxCertSigs bounds a certificate's signatures.
	MaxCertSigs = 1024
	// CertSigSize is one signature entry: address and signature.
	CertSigSize = 20 + ed25519.SignatureSize
)

// MaxChainID is CometBFT's limit on a chain id.
const MaxChainID = 50

// statementPrefix opens a version 2 certificate's statement,
// chainStatementPrefix a version 3 (chain-bound) one's.
var (
	statementPrefix      = []byte("stele/batch-statement/v1\x00")
	chainStatementPrefix = []byte("stele/batch-statement/v2\x00")
)

// CertSig is one validator's signature of a certificate's statement.
type CertSig struct {
	Validator [20]byte
	Signature [ed25519.SignatureSize]byte
}

// Certificate names a stored batch and carries the validators' signatures
// that it is stored.
type Certificate struct {
	// Chain is the chain id the signers signed for (a version 3
	// certificate), or "" for one that names no chain (version 2).
	Chain  string
	Digest core.Digest
	Size   uint32
	Height int64
	Sigs   []CertSig
}

// Statement returns the bytes a validator signs to certify that it stored
// the batch, for the chain chain ("" for a certificate that names none).
//
//	"stele/batch-statement/v1\x00" | digest | u32 size | i64 height
//	"stele/batch-statement/v2\x00" | u16 len(chain) | chain | digest | u32 size | i64 height
func Statement(chain string, d core.Digest, size uint32, height int64) []byte {
	b := make([]byte, 0, len(chainStatementPrefix)+2+len(chain)+32+4+8)
	if chain == "" {
		b = append(b, statementPrefix...)
	} else {
		b = append(b, chainStatementPrefix...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(chain)))
		b = append(b, chain...)
	}
	b = append(b, d[:]...)
	b = binary.BigEndian.AppendUint32(b, size)
	return binary.BigEndian.AppendUint64(b, uint64(height))
}

// Statement returns the bytes the certificate's signatures are over.
func (c Certificate) Statement() []byte { return Statement(c.Chain, c.Digest, c.Size, c.Height) }

// EncodeCertifiedTx encodes a certificate as a transaction.
func EncodeCertifiedTx(c Certificate) []byte {
	w := &core.Writer{B: make([]byte, 0, 64+len(c.Sigs)*CertSigSize)}
	w.Raw(core.TxMagic[:])
	if c.Chain == "" {
		w.U8(certVersion)
	} else {
		w.U8(certVersionChain)
		w.Str(c.Chain)
	}
	w.Raw(c.Digest[:])
	w.I32(int32(c.Size))
	w.I64(c.Height)
	w.Count(len(c.Sigs))
	for _, s := range c.Sigs {
		w.Raw(s.Validator[:])
		w.Raw(s.Signature[:])
	}
	return w.B
}

// IsCertifiedTx reports whether tx claims to be a certificate (it may
// still fail to decode).
func IsCertifiedTx(tx []byte) bool {
	return len(tx) >= 4 && bytes.Equal(tx[:3], core.TxMagic[:]) && (tx[3] == certVersion || tx[3] == certVersionChain)
}

// DecodeCertifiedTx decodes a certificate transaction. It checks the
// encoding only; ValidatorSet.Verify checks the signatures.
func DecodeCertifiedTx(tx []byte) (Certificate, error) {
	r := &core.Reader{B: tx}
	var c Certificate
	if magic := r.Take(3); r.E == nil && !bytes.Equal(magic, core.TxMagic[:]) {
		r.Fail("bad magic %q", magic)
	}
	switch v := r.U8(); {
	case r.E != nil:
	case v == certVersionChain:
		if c.Chain = r.Str(); r.E == nil && (c.Chain == "" || len(c.Chain) > MaxChainID) {
			r.Fail("a certificate's chain id of %d bytes (1 to %d)", len(c.Chain), MaxChainID)
		}
	case v != certVersion:
		r.Fail("not a certificate: version %d", v)
	}
	copy(c.Digest[:], r.Take(32))
	c.Size = uint32(r.I32())
	c.Height = r.I64()
	n := r.Count(CertSigSize)
	if r.E == nil && (n == 0 || n > MaxCertSigs) {
		r.Fail("%d signatures", n)
	}
	for i := 0; i < n && r.E == nil; i++ {
		var s CertSig
		copy(s.Validator[:], r.Take(20))
		copy(s.Signature[:], r.Take(ed25519.SignatureSize))
		c.Sigs = append(c.Sigs, s)
	}
	if err := r.Done(); err != nil {
		return Certificate{}, err
	}
	if c.Size == 0 {
		return Certificate{}, fmt.Errorf("%w: certificate of an empty batch", core.ErrMalformed)
	}
	return c, nil
}

// Validator is a member of the validator set that may certify batches.
type Validator struct {
	Address [20]byte
	PubKey  ed25519.PublicKey
	Power   int64
}

// ValidatorSet is a set of validators whose signatures make
// certificates: the genesis validators, then the set as the chain's
// membership changes make it (cluster/membership.go). A set is never
// changed once made.
type ValidatorSet struct {
	vals  []Validator // sorted by address
	total int64
	// digest identifies the set (its addresses, keys and powers): a
	// certificate verified against one set is remembered as verified
	// against that set only (verifyCertificate).
	digest [32]byte
}

// Errors of certificate verification.
var (
	ErrNoValidators = errors.New("stele/fsm: no validator set to check certificates against")
	ErrCertificate  = errors.New("stele/fsm: invalid certificate")
)

// NewValidatorSet checks and copies vals.
func NewValidatorSet(vals []Validator) (*ValidatorSet, error) {
	vs := &ValidatorSet{vals: append([]Validator(nil), vals...)}
	sort.Slice(vs.vals, func(i, j int) bool { return bytes.Compare(vs.vals[i].Address[:], vs.vals[j].Address[:]) < 0 })
	for i, v := range vs.vals {
		if len(v.PubKey) != ed25519.PublicKeySize || v.Power <= 0 {
			return nil, fmt.Errorf("stele/fsm: validator %X: want an ed25519 key and positive power", v.Address)
		}
		if i > 0 && vs.vals[i-1].Address == v.Address {
			return nil, fmt.Errorf("stele/fsm: validator %X listed twice", v.Address)
		}
		vs.total += v.Power
	}
	if len(vs.vals) == 0 {
		return nil, ErrNoValidators
	}
	h := sha256.New()
	for _, v := range vs.vals {
		h.Write(v.Address[:])
		h.Write(v.PubKey)
		var p [8]byte
		binary.BigEndian.PutUint64(p[:], uint64(v.Power))
		h.Write(p[:])
	}
	h.Sum(vs.digest[:0])
	return vs, nil
}

// VerifiedKey is what a certificate verified against vs is remembered by
// (Trust.Verified): its bytes, and the set.
func (vs *ValidatorSet) VerifiedKey(raw []byte) core.Digest {
	h := sha256.New()
	h.Write(vs.digest[:])
	h.Write(raw)
	var key core.Digest
	h.Sum(key[:0])
	return key
}

// Total is the set's voting power.
func (vs *ValidatorSet) Total() int64 { return vs.total }

// Validators returns the set, ordered by address.
func (vs *ValidatorSet) Validators() []Validator { return append([]Validator(nil), vs.vals...) }

// Lookup returns the validator with the given address.
func (vs *ValidatorSet) Lookup(addr [20]byte) (Validator, bool) {
	i := sort.Search(len(vs.vals), func(i int) bool { return bytes.Compare(vs.vals[i].Address[:], addr[:]) >= 0 })
	if i < len(vs.vals) && vs.vals[i].Address == addr {
		return vs.vals[i], true
	}
	return Validator{}, false
}

// Enough reports whether power signed by distinct validators is more than
// a third of the total: then at least one signer is honest.
func (vs *ValidatorSet) Enough(power int64) bool { return power*3 > vs.total }

// Supermajority reports whether power is more than two thirds of the
// total: what it takes to schedule an upgrade (cluster/upgrade.go).
func (vs *ValidatorSet) Supermajority(power int64) bool { return power*3 > vs.total*2 }

// Verify checks that every signature is a distinct member's valid
// signature of c's statement and that together they are Enough.
func (vs *ValidatorSet) Verify(c Certificate) error {
	if vs == nil {
		return ErrNoValidators
	}
	stmt := c.Statement()
	seen := make(map[[20]byte]bool, len(c.Sigs))
	var power int64
	for _, s := range c.Sigs {
		v, ok := vs.Lookup(s.Validator)
		if !ok {
			return fmt.Errorf("%w: %X is not a validator", ErrCertificate, s.Validator)
		}
		if seen[s.Validator] {
			return fmt.Errorf("%w: %X signed twice", ErrCertificate, s.Validator)
		}
		seen[s.Validator] = true
		if !ed25519.Verify(v.PubKey, stmt, s.Signature[:]) {
			return fmt.Errorf("%w: bad signature by %X", ErrCertificate, s.Validator)
		}
		power += v.Power
	}
	if !vs.Enough(power) {
		return fmt.Errorf("%w: signers hold %d of %d voting power, need more than a third", ErrCertificate, power, vs.total)
	}
	return nil
}

// BatchSource gives the state machine the payload a certificate names.
type BatchSource interface {
	// Batch returns the payload whose SHA-256 is c.Digest, fetching it from
	// the certificate's signers when this broker does not hold it. It
	// blocks until it has it; an error means it never will (the broker is
	// shutting down), and the block cannot be applied.
	Batch(c Certificate) ([]byte, error)
}

// certKey is the metadata store key that remembers an applied
// certificate until its window has passed.
func certKey(height int64, d core.Digest) []byte {
	k := append([]byte("c/"), make([]byte, 8)...)
	binary.BigEndian.PutUint64(k[2:], uint64(height))
	return append(k, d[:]...)
}

// ParseCertKey reads a c/ key (its value is empty): the height of the
// certificate's batch and its digest.
func ParseCertKey(k []byte) (int64, core.Digest, error) {
	var d core.Digest
	if len(k) != 2+8+len(d) || !bytes.HasPrefix(k, []byte("c/")) {
		return 0, d, fmt.Errorf("stele/fsm: bad certificate key %x", k)
	}
	copy(d[:], k[10:])
	return int64(binary.BigEndian.Uint64(k[2:10])), d, nil
}

// String names a digest in logs.
func digestString(d core.Digest) string { return hex.EncodeToString(d[:8]) }
