package listener

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A local certificate authority (`stele cert ca`, `stele cert issue`):
// ECDSA P-256 keys, which every TLS library Kafka clients use (OpenSSL for
// librdkafka, Go's, Java's) accepts, in PEM files.

// The files of a CA directory and of an issued certificate.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Validity of what is made.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 2 * 365 * 24 * time.Hour
)

// PEMPair is a certificate and its private key, PEM.
type PEMPair struct {
	Cert, Key []byte
	// NotAfter is when the certificate expires.
	NotAfter time.Time
}

// NewCA makes a self-signed CA certificate for name.
func NewCA(name string, now time.Time) (PEMPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	return makeCert(tmpl, nil, nil)
}

// Issue makes a certificate for name signed by the CA (its PEM pair):
// subject CN=name, usable by a server (for the dns names and ip
// addresses given, which clients check) and by a client (mutual TLS,
// where the subject is the principal).
func Issue(ca PEMPair, name string, dns []string, ips []net.IP, now time.Time) (PEMPair, error) {
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return PEMPair{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    minTime(now.Add(CertValidity), caCert.NotAfter),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    dns,
		IPAddresses: ips,
	}
	return makeCert(tmpl, caCert, caKey)
}

// ReadPair reads a PEM pair from two files.
func ReadPair(certFile, keyFile string) (PEMPair, error) {
	c, err := os.ReadFile(certFile)
	if err != nil {
		return PEMPair{}, fmt.Errorf("stele/listener: %w", err)
	}
	k, err := os.ReadFile(keyFile)
	if err != nil {
		return PEMPair{}, fmt.Errorf("stele/listener: %w", err)
	}
	return PEMPair{Cert: c, Key: k}, nil
}

// WritePair writes a pair's certificate to certFile and its key to
// keyFile (mode 0600), making their directory if needed; neither file may
// exist.
func WritePair(p PEMPair, certFile, keyFile string) error {
	if err := os.MkdirAll(filepath.Dir(certFile), 0o755); err != nil {
		return fmt.Errorf("stele/listener: %w", err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{keyFile, p.Key, 0o600}, {certFile, p.Cert, 0o644}} {
		w, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fmt.Errorf("stele/listener: %w", err)
		}
		if _, err := w.Write(f.data); err != nil {
			w.Close()
			return fmt.Errorf("stele/listener: %w", err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("stele/listener: %w", err)
		}
	}
	return nil
}

var errNotCA = errors.New("stele/listener: the CA files do not hold a CA certificate and its ECDSA key (stele cert ca writes them)")

func parsePair(p PEMPair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(p.Cert)
	kb, _ := pem.Decode(p.Key)
	if cb == nil || kb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errNotCA
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil || !cert.IsCA {
		return nil, nil, errNotCA
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, errNotCA
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errNotCA
	}
	return cert, key, nil
}

// makeCert signs tmpl with a new key, by parent (nil: self-signed).
func makeCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (PEMPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEMPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return PEMPair{}, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return PEMPair{}, fmt.Errorf("stele/listener: making a certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return PEMPair{}, err
	}
	return PEMPair{
		Cert:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		NotAfter: tmpl.NotAfter,
	}, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// CRLFile is the revocation list `stele cert revoke` keeps beside a CA.
const CRLFile = "ca.crl"

// Revoke returns a certificate revocation list signed by the CA that lists
// the serial numbers of crl (a previous list, PEM; nil: none) and of each
// of certs (PEM certificates the CA issued), valid for a year. Its number
// is the previous one's plus one.
func Revoke(ca PEMPair, crl []byte, certs [][]byte, now time.Time) ([]byte, error) {
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return nil, err
	}
	var entries []x509.RevocationListEntry
	number := big.NewInt(1)
	seen := map[string]bool{}
	if len(crl) > 0 {
		b, _ := pem.Decode(crl)
		if b == nil || b.Type != "X509 CRL" {
			return nil, errors.New("stele/listener: the revocation list is not a PEM X509 CRL")
		}
		prev, err := x509.ParseRevocationList(b.Bytes)
		if err != nil || prev.CheckSignatureFrom(caCert) != nil {
			return nil, errors.New("stele/listener: the revocation list is not this CA's")
		}
		for _, e := range prev.RevokedCertificateEntries {
			entries = append(entries, x509.RevocationListEntry{SerialNumber: e.SerialNumber, RevocationTime: e.RevocationTime})
			seen[e.SerialNumber.String()] = true
		}
		if prev.Number != nil {
			number.Add(prev.Number, big.NewInt(1))
		}
	}
	for _, c := range certs {
		b, _ := pem.Decode(c)
		if b == nil || b.Type != "CERTIFICATE" {
			return nil, errors.New("stele/listener: not a PEM certificate")
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil || cert.CheckSignatureFrom(caCert) != nil {
			return nil, errors.New("stele/listener: the certificate was not issued by this CA")
		}
		if !seen[cert.SerialNumber.String()] {
			entries = append(entries, x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: now})
			seen[cert.SerialNumber.String()] = true
		}
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: number, ThisUpdate: now, NextUpdate: now.Add(365 * 24 * time.Hour), RevokedCertificateEntries: entries,
	}, caCert, caKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), nil
}
