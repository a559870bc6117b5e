package fsm

import (
	"errors"
	"fmt"
	"sort"
)

// ErrBatchUnavailable is returned by ApplyBlock when a certified batch's
// payload cannot be had: the block cannot be applied on this broker.
var ErrBatchUnavailable = errors.New("stele/fsm: certified batch unavailable")

type certEntry struct {
	height int64
	digest Digest
}

// openCertified checks a certificate transaction against the state and
// returns its payload's transaction. An error other than
// ErrBatchUnavailable rejects the transaction (deterministically: it
// depends on the certificate, the height and the applied certificates
// only); the digest is returned whenever the certificate decoded.
func (f *FSM) openCertified(raw []byte) (Tx, Digest, error) {
	c, err := DecodeCertifiedTx(raw)
	if err != nil {
		return Tx{}, Digest{}, err
	}
	if err := f.opts.Validators.Verify(c); err != nil {
		return Tx{}, c.Digest, err
	}
	if c.Height >= f.height || f.height > c.Height+CertWindow {
		return Tx{}, c.Digest, fmt.Errorf("%w: batch %s made at height %d cannot be applied at %d (window %d)", ErrCertificate, digestString(c.Digest), c.Height, f.height, CertWindow)
	}
	if h, dup := f.certs[c.Digest]; dup {
		return Tx{}, c.Digest, fmt.Errorf("%w: batch %s (height %d) was already applied", ErrCertificate, digestString(c.Digest), h)
	}
	if f.opts.Batches == nil {
		return Tx{}, c.Digest, fmt.Errorf("%w: no batch source", ErrBatchUnavailable)
	}
	payload, err := f.opts.Batches.Batch(c)
	if err != nil {
		return Tx{}, c.Digest, fmt.Errorf("%w: %s: %v", ErrBatchUnavailable, digestString(c.Digest), err)
	}
	// The source guarantees the digest (it hashed what it stored, and
	// checks what it fetches); hashing again here would double the cost.
	if uint32(len(payload)) != c.Size {
		return Tx{}, c.Digest, fmt.Errorf("%w: %s: the batch source returned other bytes", ErrBatchUnavailable, digestString(c.Digest))
	}
	f.certs[c.Digest] = c.Height
	f.certsAdded = append(f.certsAdded, c.Digest)
	tx, err := DecodeTx(payload)
	if err != nil {
		return Tx{}, c.Digest, fmt.Errorf("certified batch %s: %w", digestString(c.Digest), err)
	}
	return tx, c.Digest, nil
}

// forgetCertificates drops, every 64 heights, the applied certificates
// whose window has passed: they would be refused as expired anyway.
func (f *FSM) forgetCertificates() {
	if f.height%64 != 0 {
		return
	}
	for d, h := range f.certs {
		if h+CertWindow < f.height {
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
		delete(f.certs, e.digest)
	}
}

// CheckTx is the mempool's admission check: Precheck for an inline
// transaction; for a certificate, that it decodes and its signatures are
// valid (so an honest proposer never proposes one that peers refuse).
func (f *FSM) CheckTx(tx []byte) error {
	if IsCertifiedTx(tx) {
		return f.validateCertified(tx)
	}
	return Precheck(tx)
}

// ValidateTx is the full check of a proposal's transaction: Validate for an
// inline one, signatures for a certificate (its payload was checked by the
// honest signer that stored it, and is checked again when applied).
func (f *FSM) ValidateTx(tx []byte) error {
	if IsCertifiedTx(tx) {
		return f.validateCertified(tx)
	}
	_, err := Validate(tx)
	return err
}

func (f *FSM) validateCertified(tx []byte) error {
	c, err := DecodeCertifiedTx(tx)
	if err != nil {
		return err
	}
	return f.opts.Validators.Verify(c)
}
