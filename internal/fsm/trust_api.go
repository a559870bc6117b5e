package fsm

import (
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// The trust module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	BatchSource         = trust.BatchSource
	CertSig             = trust.CertSig
	Certificate         = trust.Certificate
	RegisterProducerKey = trust.RegisterProducerKey
	Signer              = trust.Signer
	Validator           = trust.Validator
	ValidatorSet        = trust.ValidatorSet
)

const (
	CertWindow = trust.CertWindow
)

// The trust module's errors (the same values).
var (
	ErrBatchUnavailable = trust.ErrBatchUnavailable
	ErrNoProducerKey    = trust.ErrNoProducerKey
	ErrCertificate      = trust.ErrCertificate
)

// DecodeCertifiedTx is trust.DecodeCertifiedTx.
func DecodeCertifiedTx(tx []byte) (trust.Certificate, error) { return trust.DecodeCertifiedTx(tx) }

// EncodeCertifiedTx is trust.EncodeCertifiedTx.
func EncodeCertifiedTx(c trust.Certificate) []byte { return trust.EncodeCertifiedTx(c) }

// IsCertifiedTx is trust.IsCertifiedTx.
func IsCertifiedTx(tx []byte) bool { return trust.IsCertifiedTx(tx) }

// NewValidatorSet is trust.NewValidatorSet.
func NewValidatorSet(vals []trust.Validator) (*trust.ValidatorSet, error) {
	return trust.NewValidatorSet(vals)
}

// Statement is trust.Statement.
func Statement(chain string, d core.Digest, size uint32, height int64) []byte {
	return trust.Statement(chain, d, size, height)
}
