package trust

// Signed producers (issue 9, docs/signed-producers.md): a principal
// registers an ed25519 public key; records carrying proof.SignatureHeader
// are verified here, in the deterministic apply, against the principal's
// key, and a principal's sequence is accepted once only. A topic whose
// stele.signed.by names principals accepts only records signed by one of
// them. So no broker can alter, forge or replay a signed record: the
// honest brokers that apply it refuse it. From app version 2 a signature
// must be bound to this chain (v2, proof.SignRecordFor), so a record signed
// for another chain whose registry holds the same key is refused too;
// under version 1 only v1 signatures, which name no chain, are taken.
// From app version 5 a record signed by a tenant's user (SignerTenant)
// is taken only on that tenant's topics, and its signature names the
// topic as the tenant's clients know it (orders, not acme~orders): so a
// tenant's clients sign what they see, and no broker can move a record
// one of them signed into another tenant's topic or the default tenant's.
//
// State, in the metadata store:
//
//	r/<principal>               the principal's public key (32 bytes)
//	y/<principal>\x00<seq u64>  a sequence the principal used (empty value)

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// KindRegisterProducerKey registers or rotates a principal's key.
const KindRegisterProducerKey core.Kind = 21

// RegisterProducerKey sets Principal's public key. Proof is the new key's
// signature of proof.RegistrationMessage (its holder has the key);
// Endorsement is the current key's signature of the same message, needed
// when the principal has a key already (only its holder rotates it). The
// first registration of a name binds it: whoever registers first owns it.
type RegisterProducerKey struct {
	Principal   string
	PublicKey   []byte
	Proof       []byte
	Endorsement []byte
}

func (RegisterProducerKey) Kind() core.Kind { return KindRegisterProducerKey }

func (c RegisterProducerKey) Encode(w *core.Writer) {
	w.Str(c.Principal)
	w.Bytes(c.PublicKey)
	w.Bytes(c.Proof)
	w.Bytes(c.Endorsement)
}

// registerProducerKeys registers RegisterProducerKey (RegisterTrust
// calls it).
func registerProducerKeys(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, trustOf, KindRegisterProducerKey, "RegisterProducerKey", ModTrust,
		func(r *core.Reader) RegisterProducerKey {
			return RegisterProducerKey{Principal: r.Str(), PublicKey: r.BytesCopy(), Proof: r.BytesCopy(), Endorsement: r.BytesCopy()}
		},
		func(c core.Command) core.Result { return checkRegistration(c.(RegisterProducerKey)) },
		func(f *Trust, c RegisterProducerKey, _ core.CmdAt) core.Result { return f.registerProducerKey(c) })
}

// checkRegistration is the stateless check of a registration: a valid
// name, a key, and the key's own signature.
func checkRegistration(c RegisterProducerKey) core.Result {
	if err := proof.ValidPrincipal(c.Principal); err != nil {
		return core.Fail(kerr.InvalidRequest.Code, err.Error())
	}
	if len(c.PublicKey) != ed25519.PublicKeySize {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a public key is %d bytes, got %d", ed25519.PublicKeySize, len(c.PublicKey)))
	}
	if !ed25519.Verify(c.PublicKey, proof.RegistrationMessage(c.Principal, c.PublicKey), c.Proof) {
		return core.Fail(kerr.InvalidRequest.Code, "the new key's signature of the registration does not verify: its holder must sign it")
	}
	return core.Result{}
}

// ErrNoProducerKey: a principal has no registered key.
var ErrNoProducerKey = errors.New("stele/fsm: no producer key")

func ProducerKeyKey(principal string) []byte { return append([]byte("r/"), principal...) }

func SeqKey(principal string, seq uint64) []byte {
	k := append(append([]byte("y/"), principal...), 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// registerProducerKey applies a registration.
func (f *Trust) registerProducerKey(c RegisterProducerKey) core.Result {
	cur, err := f.AppliedProducerKey(c.Principal)
	switch {
	case errors.Is(err, ErrNoProducerKey):
	case err != nil:
		return f.LocalFault("reading producer key of %s: %w", c.Principal, err)
	case bytes.Equal(cur, c.PublicKey):
		return core.Result{} // registered already: nothing changes
	case !ed25519.Verify(cur, proof.RegistrationMessage(c.Principal, c.PublicKey), c.Endorsement):
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("principal %s has a key: a new one must be endorsed by it", c.Principal))
	}
	if f.keysSet == nil {
		f.keysSet = map[string][]byte{}
	}
	f.keysSet[c.Principal] = bytes.Clone(c.PublicKey)
	return core.Result{}
}

// ProducerKey returns a principal's registered public key (committed).
func (f *Trust) ProducerKey(principal string) ([]byte, error) {
	v, ok, err := f.Store.Get(ProducerKeyKey(principal))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: principal %q", ErrNoProducerKey, principal)
	}
	return v, nil
}

// AppliedProducerKey is ProducerKey as the block being applied sees it.
func (f *Trust) AppliedProducerKey(principal string) ([]byte, error) {
	if k, ok := f.keysSet[principal]; ok {
		if k == nil { // removed in the block (RemoveTenantKeys)
			return nil, fmt.Errorf("%w: principal %q", ErrNoProducerKey, principal)
		}
		return k, nil
	}
	return f.ProducerKey(principal)
}

// checkSignatures verifies every signed record of batch b, about to be
// appended to topic t, and that each record is signed when the topic
// requires it; seqs collects the sequences used (the command's, checked
// against the block's and the committed ones).
func (f *Trust) checkSignatures(t *topics.Topic, b []byte, required bool, seqs map[string]bool) core.Result {
	var bad error
	_, err := record.Each(b, func(rec *record.Record) error {
		var sig []byte
		found := false
		hs := make([]proof.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			hs[i] = proof.RecordHeader{Key: h.Key, Value: h.Value}
			if h.Key == proof.SignatureHeader {
				if found {
					bad = fmt.Errorf("record at offset delta %d: header %s given twice", rec.OffsetDelta, proof.SignatureHeader)
					return core.ErrStopScan
				}
				sig, found = h.Value, true
			}
		}
		if !found {
			if required {
				bad = fmt.Errorf("record at offset delta %d is not signed: topic %s takes records signed by %v only (stele.signed.by)", rec.OffsetDelta, t.Name, t.Config.SignedBy)
				return core.ErrStopScan
			}
			return nil
		}
		s, err := proof.ParseSignature(sig)
		if err != nil {
			bad = fmt.Errorf("record at offset delta %d: %w", rec.OffsetDelta, err)
			return core.ErrStopScan
		}
		switch {
		case f.ChainBound && s.Version != 2:
			bad = fmt.Errorf("record at offset delta %d: %w: %s's signature (sequence %d) is v1 and names no chain; this chain takes v2 signatures bound to it (chain %s)", rec.OffsetDelta, proof.ErrBadSignature, s.Principal, s.Seq, f.chainID)
			return core.ErrStopScan
		case !f.ChainBound && s.Version != 1:
			// Before v2 existed a broker could not parse one: it refused
			// the record as malformed, with the same code.
			bad = fmt.Errorf("record at offset delta %d: %w: %s's signature (sequence %d) is v2; this chain's app version takes v1 signatures only", rec.OffsetDelta, proof.ErrBadSignature, s.Principal, s.Seq)
			return core.ErrStopScan
		}
		if required && !slices.Contains(t.Config.SignedBy, s.Principal) {
			bad = fmt.Errorf("record at offset delta %d is signed by %s: topic %s takes records signed by %v only (stele.signed.by)", rec.OffsetDelta, s.Principal, t.Name, t.Config.SignedBy)
			return core.ErrStopScan
		}
		name := t.Name
		if f.SignerTenant != nil {
			if st := f.SignerTenant(s.Principal); st != "" {
				tt, local := core.SplitTenant(t.Name)
				if tt != st {
					bad = fmt.Errorf("record at offset delta %d: %w: %s, a user of tenant %s, signs its tenant's records only", rec.OffsetDelta, proof.ErrBadSignature, s.Principal, st)
					return core.ErrStopScan
				}
				name = local
			}
		}
		pub, err := f.AppliedProducerKey(s.Principal)
		if err != nil {
			bad = fmt.Errorf("record at offset delta %d: %w", rec.OffsetDelta, err)
			return core.ErrStopScan
		}
		if err := proof.VerifyRecordOn(pub, f.chainID, s, name, rec.Key, rec.Value, hs); err != nil {
			bad = fmt.Errorf("record at offset delta %d: %w", rec.OffsetDelta, err)
			return core.ErrStopScan
		}
		k := string(SeqKey(s.Principal, s.Seq))
		used := seqs[k] || f.SeqsAdded[k]
		if !used {
			_, used, err = f.Store.Get([]byte(k))
			if err != nil {
				return err
			}
		}
		if used {
			bad = fmt.Errorf("record at offset delta %d: %s's sequence %d was used before: a replay", rec.OffsetDelta, s.Principal, s.Seq)
			return core.ErrStopScan
		}
		seqs[k] = true
		return nil
	})
	if err != nil && !errors.Is(err, core.ErrStopScan) {
		return core.Fail(record.ErrorCode(err), err.Error())
	}
	if bad != nil {
		return core.Fail(kerr.InvalidRecord.Code, bad.Error())
	}
	return core.Result{}
}

// persistSigned adds the block's registrations and used sequences to the
// state's batch, in key order: first what the block removed (a removed
// principal's key and every sequence it used), then what it set.
func (f *Trust) persistSigned(b *core.StateBatch) {
	for _, p := range core.SortedKeys(f.keysDropped) {
		b.DeletePrefix(seqPrefix(p))
	}
	for _, p := range core.SortedKeys(f.keysSet) {
		if k := f.keysSet[p]; k != nil {
			b.Set(ProducerKeyKey(p), k)
		} else {
			b.Delete(ProducerKeyKey(p))
		}
	}
	for _, k := range core.SortedKeys(f.SeqsAdded) {
		b.Set([]byte(k), nil)
	}
	clear(f.keysSet)
	clear(f.keysDropped)
	clear(f.SeqsAdded)
}

// seqPrefix is the prefix of the sequences principal used.
func seqPrefix(principal string) []byte { return append(append([]byte("y/"), principal...), 0) }

// RemoveTenantKeys removes the producer keys of the principals that read
// as tenant's users (NAME@tenant, core/names.go) and forgets the sequences
// they signed with (issue 18: a deleted tenant leaves no state behind).
// It returns how many keys it removed.
func (f *Trust) RemoveTenantKeys(tenant string) (int, error) {
	found := map[string]bool{}
	err := f.Store.Scan([]byte("r/"), func(k, _ []byte) error {
		if t, _ := core.SplitUser(string(k[2:])); t == tenant {
			found[string(k[2:])] = true
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for p, k := range f.keysSet {
		if t, _ := core.SplitUser(p); t == tenant {
			found[p] = k != nil
		}
	}
	n := 0
	for _, p := range core.SortedKeys(found) {
		if found[p] {
			n++
		}
		if f.keysSet == nil {
			f.keysSet = map[string][]byte{}
		}
		if f.keysDropped == nil {
			f.keysDropped = map[string]bool{}
		}
		f.keysSet[p], f.keysDropped[p] = nil, true
		pre := string(seqPrefix(p))
		for k := range f.SeqsAdded {
			if strings.HasPrefix(k, pre) {
				delete(f.SeqsAdded, k)
			}
		}
	}
	return n, nil
}

// registerSignedRecords registers the signatures' produce check and
// the producer keys' and signed sequences' step (RegisterTrust calls it).
func registerSignedRecords(r *core.Registry, h *topics.TopicHooks) {
	// Signatures, of the batches written now (a retry's were checked the
	// first time; its sequences are used); the sequences are the block's
	// once the batches are written.
	h.ProduceChecks.Register(20, "signatures", ModTrust, func(tm *topics.Topics, pr *topics.Producing) (core.Result, func()) {
		f := trustOf(tm.Machine)
		required := len(pr.T.Config.SignedBy) > 0
		var seqs map[string]bool
		for i, b := range pr.Batches {
			if pr.Dup[i] || !pr.Signed[i] && !required {
				continue
			}
			if seqs == nil {
				seqs = map[string]bool{}
			}
			if r := f.checkSignatures(pr.T, b, required, seqs); r.Code != 0 {
				return r, nil
			}
		}
		if len(seqs) == 0 {
			return core.Result{}, nil
		}
		return core.Result{}, func() {
			if f.SeqsAdded == nil {
				f.SeqsAdded = map[string]bool{}
			}
			for k := range seqs {
				f.SeqsAdded[k] = true
			}
		}
	})
	core.RegisterModuleStep(r, trustOf, core.ModuleStep[*Trust]{Rank: 40, Name: "producer keys and signed sequences", Module: ModTrust,
		Stage: func(f *Trust, b *core.StateBatch) error { f.persistSigned(b); return nil }})
}
