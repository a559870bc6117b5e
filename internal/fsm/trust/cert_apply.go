// Package trust is the state machine's trust module: the signers (the
// validators whose votes each block carries, liveness.go), the
// certificates of the data plane (cert.go, cert_apply.go: a batch applied
// by its digest, certified by f+1 validators, its payload fetched from
// the batch store), and producer keys and signed records (signed.go).
//
// It uses the topics module below it (its types, and the produce check it
// registers: a signed record's signature), imports no module above it,
// and works on Trust, its part of a state machine, which the application
// (package fsm) makes with NewTrust and hands over through its
// TrustModule method (trustOf).
package trust

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// ErrBatchUnavailable is returned by ApplyBlock when a certified batch's
// payload cannot be had: the block cannot be applied on this broker.
var ErrBatchUnavailable = errors.New("stele/fsm: certified batch unavailable")

type certEntry struct {
	height int64
	digest core.Digest
}

// trustState is the trust module's part of the state machine (embedded in
// FSM): the signers seen (liveness.go), the applied certificates, and the
// producer keys and signed sequences of the block (signed.go).
// modTrust is the trust module's name.
const ModTrust core.Module = "trust"

// Trust is the trust module of a state machine: the core's machine it
// runs on, the topics module below it, its options and its state.
type Trust struct {
	*core.Machine
	*topics.Topics
	// chainID is the chain's id (Options.ChainID); validators check
	// certified transactions' signatures (nil refuses them all) and
	// batches reads their payloads (Options.Validators, Options.Batches).
	chainID string
	// validators is the set certificates are checked against while a
	// block is applied: the genesis set, then what the cluster module's
	// membership makes it (SetValidators); committedValidators the set as
	// of the last commit, for CheckTx and ValidateTx (PublishValidators).
	validators          *ValidatorSet
	committedValidators atomic.Pointer[ValidatorSet]
	genesisValidators   *ValidatorSet
	batches             BatchSource
	// SignerTenant is a hook point for the tenants module, which sets it
	// when the machine is assembled (tenants.NewTenants): the tenant a
	// signing principal is a user of, "" for the default tenant's (and
	// when nil). A tenant's user signs its records over the topic's name
	// as the tenant knows it, and only its tenant's (signed.go).
	SignerTenant func(principal string) string
	// KnownSigners is a hook point for the cluster module, which sets it
	// (cluster.NewCluster): whether every signature of c is a good one by
	// a key the chain has had as a validator, as the block being applied
	// leaves them (from app version 8, false before and when nil). A
	// certificate refused by the set of now, made by such keys just
	// before a change, is refused as one to certify again
	// (core.ErrResubmit), as one of the genesis set's is. Called by the
	// applier only.
	KnownSigners func(c Certificate) bool
	trustState
}

// NewTrust is the trust module of the machine m, above the topics module t.
func NewTrust(m *core.Machine, t *topics.Topics, chainID string, validators *ValidatorSet, batches BatchSource) *Trust {
	f := &Trust{Machine: m, Topics: t, chainID: chainID, validators: validators, genesisValidators: validators, batches: batches}
	f.committedValidators.Store(validators)
	return f
}

// Validators is the validator set of the block being applied (nil: the
// broker has none, and refuses every certificate).
func (f *Trust) Validators() *ValidatorSet { return f.validators }

// SetValidators makes vs the set the rest of the block, and the blocks
// after it, check certificates against (the cluster module's membership).
func (f *Trust) SetValidators(vs *ValidatorSet) { f.validators = vs }

// PublishValidators makes the applied set the committed one, at Commit.
func (f *Trust) PublishValidators() { f.committedValidators.Store(f.validators) }

// CommittedValidators is the validator set as of the last Commit. Safe
// for concurrent use.
func (f *Trust) CommittedValidators() *ValidatorSet { return f.committedValidators.Load() }

// trustOf is the trust module of the machine m.
func trustOf(m *core.Machine) *Trust {
	return m.App.(interface{ TrustModule() *Trust }).TrustModule()
}

type trustState struct {
	signers        map[string]*Signer // by hex address
	signersChanged bool
	Certs          map[core.Digest]int64 // applied certificates within their window: digest -> batch height
	certsAdded     []core.Digest
	// The signers as of the last Commit, with its block time (Liveness).
	committedSigners struct {
		sync.Mutex
		signers   []Signer
		blockTime int64
	}
	certsDropped []certEntry
	Verified     VerifiedCerts // safe for concurrent use
	// ChainBound: the block being applied takes only signed statements
	// bound to the chain: batch certificates (cert.go) and record
	// signatures (signed.go); else only those that name none.
	// chainBoundNext: the next block will; published at each commit, for
	// the mempool, the orderer's ValidateTx and the data plane
	// (CertificatesBound). The cluster module sets both from the app
	// version (cluster/proposals.go: chainCertsVersion).
	ChainBound     bool
	ChainBoundNext atomic.Bool
	keysSet        map[string][]byte // producer keys registered in the block, nil: removed (signed.go)
	keysDropped    map[string]bool   // principals whose keys and sequences the block removed
	SeqsAdded      map[string]bool   // signed records' sequence keys used in the block
}

// openCertified checks a certificate transaction against the state and
// returns its payload's transaction. An error other than
// ErrBatchUnavailable rejects the transaction (deterministically: it
// depends on the certificate, the height and the applied certificates
// only); the digest is returned whenever the certificate decoded.
func (f *Trust) openCertified(raw []byte) (core.Tx, core.Digest, error) {
	c, err := DecodeCertifiedTx(raw)
	if err != nil {
		return core.Tx{}, core.Digest{}, err
	}
	switch {
	case f.ChainBound && c.Chain == "":
		// Made under the version before: a certificate of the right form
		// can be had for the same batch.
		return core.Tx{}, c.Digest, fmt.Errorf("%w: %w: batch %s: this app version applies only certificates bound to the chain; certify it again",
			ErrCertificate, core.ErrResubmit, digestString(c.Digest))
	case !f.ChainBound && c.Chain != "":
		// Before chain-bound certificates existed a broker could not
		// decode one: it hashes as such a broker hashed it.
		return core.Tx{}, core.Digest{}, errChainCertTooEarly(c)
	}
	if err := f.verifyCertificate(raw, c, f.validators); err != nil {
		if !errors.Is(err, core.ErrResubmit) && errors.Is(err, ErrCertificate) && f.KnownSigners != nil && f.KnownSigners(c) {
			// Good signatures of validators the chain has changed since
			// (promoted after the genesis, then demoted or removed).
			err = fmt.Errorf("%w: %w: batch %s was certified by validators the chain has changed since (%v); certify it again",
				ErrCertificate, core.ErrResubmit, digestString(c.Digest), err)
		}
		return core.Tx{}, c.Digest, err
	}
	if c.Height >= f.Height || f.Height > c.Height+CertWindow {
		return core.Tx{}, c.Digest, fmt.Errorf("%w: batch %s made at height %d cannot be applied at %d (window %d)", ErrCertificate, digestString(c.Digest), c.Height, f.Height, CertWindow)
	}
	if h, dup := f.Certs[c.Digest]; dup {
		return core.Tx{}, c.Digest, fmt.Errorf("%w: batch %s (height %d) was already applied", ErrCertificate, digestString(c.Digest), h)
	}
	if f.batches == nil {
		return core.Tx{}, c.Digest, fmt.Errorf("%w: no batch source", ErrBatchUnavailable)
	}
	payload, err := f.batches.Batch(c)
	if err != nil {
		return core.Tx{}, c.Digest, fmt.Errorf("%w: %s: %v", ErrBatchUnavailable, digestString(c.Digest), err)
	}
	// The source guarantees the digest (it hashed what it stored, and
	// checks what it fetches); hashing again here would double the cost.
	if uint32(len(payload)) != c.Size {
		return core.Tx{}, c.Digest, fmt.Errorf("%w: %s: the batch source returned other bytes", ErrBatchUnavailable, digestString(c.Digest))
	}
	f.Certs[c.Digest] = c.Height
	f.certsAdded = append(f.certsAdded, c.Digest)
	tx, err := f.Registry().DecodeTx(payload)
	if err != nil {
		return core.Tx{}, c.Digest, fmt.Errorf("certified batch %s: %w", digestString(c.Digest), err)
	}
	return tx, c.Digest, nil
}

// forgetCertificates drops, every 64 heights, the applied certificates
// whose window has passed: they would be refused as expired anyway.
func (f *Trust) forgetCertificates() {
	if f.Height%64 != 0 {
		return
	}
	for d, h := range f.Certs {
		if h+CertWindow < f.Height {
			f.certsDropped = append(f.certsDropped, certEntry{h, d})
		}
	}
	// Sorted, so the store's batch is built the same way everywhere.
	sort.Slice(f.certsDropped, func(i, j int) bool {
		a, b := f.certsDropped[i], f.certsDropped[j]
		if a.height != b.height {
			return a.height < b.height
		}
		return string(a.digest[:]) < string(b.digest[:])
	})
	for _, e := range f.certsDropped {
		delete(f.Certs, e.digest)
	}
}

// CheckCertifiedTx is CheckTx's and ValidateTx's check of a certificate:
// it decodes, is of a form the next block may hold, and its signatures
// are valid.
func (f *Trust) CheckCertifiedTx(tx []byte) error {
	c, err := DecodeCertifiedTx(tx)
	if err != nil {
		return err
	}
	if c.Chain != "" && !f.ChainBoundNext.Load() {
		return errChainCertTooEarly(c)
	}
	return f.verifyCertificate(tx, c, f.CommittedValidators())
}

// errChainCertTooEarly refuses a chain-bound certificate under an app
// version that applies none.
func errChainCertTooEarly(c Certificate) error {
	return fmt.Errorf("%w: batch %s: this app version applies no certificate bound to a chain", ErrCertificate, digestString(c.Digest))
}

// CertificatesBound reports whether certificates made now must be bound
// to the chain: the block after the last committed one applies only those
// (app version 2 on, or an upgrade to it at that height). The data plane
// asks it for each batch it certifies. Safe for concurrent use.
func (f *Trust) CertificatesBound() bool { return f.ChainBoundNext.Load() }

// verifyCertificate checks c's signatures against vs once per
// certificate and set: each is checked when it enters the mempool, before
// the vote on its block and when it is applied, and its signatures'
// validity depends only on its bytes and the set, so a verified
// certificate is remembered by the hash of both.
func (f *Trust) verifyCertificate(raw []byte, c Certificate, vs *ValidatorSet) error {
	if c.Chain != "" && c.Chain != f.chainID {
		// Signed for another chain by validators with the same keys: the
		// signatures would verify, and prove nothing here.
		return fmt.Errorf("%w: batch %s is certified for chain %q, and this is chain %q", ErrCertificate, digestString(c.Digest), c.Chain, f.chainID)
	}
	if vs == nil {
		return ErrNoValidators
	}
	key := vs.VerifiedKey(raw)
	if f.Verified.Has(key) {
		return nil
	}
	if err := vs.Verify(c); err != nil {
		if vs != f.genesisValidators && f.genesisValidators.Verify(c) == nil {
			// Good signatures of a set the chain has changed since (a
			// validator voted out): made just before the change, the
			// batch can be certified again by the set there is now. The
			// set equals the genesis one until a change, so a chain that
			// never changed it refuses as it always did.
			return fmt.Errorf("%w: %w: batch %s was certified under a validator set the chain has changed since (%v); certify it again",
				ErrCertificate, core.ErrResubmit, digestString(c.Digest), err)
		}
		return err
	}
	f.Verified.Add(key)
	return nil
}

// VerifiedCerts is a bounded set of hashes of verified certificates,
// forgetting the oldest first. CheckTx calls it concurrently with the
// applier.
type VerifiedCerts struct {
	mu    sync.Mutex
	Set   map[core.Digest]struct{}
	order []core.Digest
	next  int
}

const VerifiedCertsMax = 8192

func (v *VerifiedCerts) Has(k core.Digest) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.Set[k]
	return ok
}

func (v *VerifiedCerts) Add(k core.Digest) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.Set == nil {
		v.Set = make(map[core.Digest]struct{}, VerifiedCertsMax)
		v.order = make([]core.Digest, VerifiedCertsMax)
	}
	if _, ok := v.Set[k]; ok {
		return
	}
	delete(v.Set, v.order[v.next])
	v.order[v.next] = k
	v.Set[k] = struct{}{}
	v.next = (v.next + 1) % VerifiedCertsMax
}

// RegisterTrust is the trust module's registration function
// (buildRegistry, registry.go): its files' registrations.
func RegisterTrust(r *core.Registry, h *topics.TopicHooks) {
	registerCertificates(r, h)  // cert_apply.go
	registerProducerKeys(r, h)  // signed.go
	registerSignedRecords(r, h) // signed.go
}

// registerCertificates registers the signers' block-begin step, the
// certified form of transactions, the certificates' expiry and the
// signers' and certificates' step (RegisterTrust calls it).
func registerCertificates(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleBlockBegin(r, trustOf, core.ModuleBlockBegin[*Trust]{Rank: 20, Name: "signers", Module: ModTrust,
		Run: func(f *Trust, b core.Block) { f.recordSigners(b.Signers) }})
	// A certificate is applied as its payload, hashed as the payload's
	// digest; a payload this broker cannot read yet halts the block.
	r.RegisterTxFormat(core.TxFormat{Name: "certified", Module: ModTrust, Is: IsCertifiedTx,
		Open:  func(m *core.Machine, raw []byte) (core.Tx, core.Digest, error) { return trustOf(m).openCertified(raw) },
		Halts: func(err error) bool { return errors.Is(err, ErrBatchUnavailable) }})
	core.RegisterModuleBlockEnd(r, trustOf, core.ModuleBlockEnd[*Trust]{Rank: 5, Name: "expired certificates", Module: ModTrust,
		Run: func(f *Trust) []core.Change { f.forgetCertificates(); return nil }})
	core.RegisterModuleStep(r, trustOf, core.ModuleStep[*Trust]{Rank: 20, Name: "signers and certificates", Module: ModTrust,
		Empty: func(f *Trust) { f.trustState = trustState{Certs: map[core.Digest]int64{}} },
		Publish: func(f *Trust, _ bool) {
			signers := f.sortedSigners()
			f.committedSigners.Lock()
			f.committedSigners.signers, f.committedSigners.blockTime = signers, f.BlockTime
			f.committedSigners.Unlock()
		},
		Load: loadSignersAndCerts,
		Stage: func(f *Trust, b *core.StateBatch) error {
			if f.signersChanged {
				b.Set(keySigners, encodeSigners(f.sortedSigners()))
				f.signersChanged = false
			}
			for _, d := range f.certsAdded {
				b.Set(certKey(f.Certs[d], d), nil)
			}
			for _, e := range f.certsDropped {
				b.Delete(certKey(e.height, e.digest))
			}
			f.certsAdded, f.certsDropped = f.certsAdded[:0], f.certsDropped[:0]
			return nil
		}})
}

// loadSignersAndCerts reads the validators seen signing (m/signers) and the
// applied certificates still within their window (c/).
func loadSignersAndCerts(f *Trust) error {
	f.signers, f.Certs = nil, map[core.Digest]int64{}
	if v, ok, err := f.Store.Get(keySigners); err != nil {
		return err
	} else if ok {
		if f.signers, err = DecodeSigners(v); err != nil {
			return fmt.Errorf("stele/fsm: reading signers: %w", err)
		}
	}
	return f.Store.Scan([]byte("c/"), func(k, _ []byte) error {
		h, d, err := ParseCertKey(k)
		if err != nil {
			return err
		}
		f.Certs[d] = h
		return nil
	})
}
