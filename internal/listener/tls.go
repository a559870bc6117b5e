package listener

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ClientAuth is Kafka's ssl.client.auth: whether a TLS listener asks its
// clients for a certificate.
type ClientAuth string

// The values of ssl.client.auth.
const (
	// ClientAuthNone asks for no certificate.
	ClientAuthNone ClientAuth = "none"
	// ClientAuthRequested verifies a certificate when one is given.
	ClientAuthRequested ClientAuth = "requested"
	// ClientAuthRequired refuses a client without a valid certificate.
	ClientAuthRequired ClientAuth = "required"
)

// TLSFiles are the PEM files a TLS listener serves from.
type TLSFiles struct {
	// Cert is the server's certificate chain, Key its private key.
	Cert, Key string
	// CA is the certificates client certificates are verified against
	// (required for ClientAuth requested or required).
	CA string
	// ClientAuth is none (the default), requested or required.
	ClientAuth ClientAuth
	// CRL, when set, is a certificate revocation list (PEM or DER) signed
	// by a CA of the CA file: a client certificate it lists is refused at
	// the handshake. Reloaded when it changes, like the other files.
	CRL string
}

// Validate reports the first setting out of place.
func (f TLSFiles) Validate() error {
	switch f.ClientAuth {
	case "", ClientAuthNone, ClientAuthRequested, ClientAuthRequired:
	default:
		return fmt.Errorf("%w: ssl client auth %q: want none, requested or required", ErrSpec, f.ClientAuth)
	}
	if f.Cert == "" || f.Key == "" {
		return fmt.Errorf("%w: a TLS listener needs a certificate and its key (--ssl-cert, --ssl-key)", ErrSpec)
	}
	if f.CA == "" && (f.ClientAuth == ClientAuthRequested || f.ClientAuth == ClientAuthRequired) {
		return fmt.Errorf("%w: ssl client auth %s needs the CA that signs client certificates (--ssl-ca)", ErrSpec, f.ClientAuth)
	}
	if f.CRL != "" && f.CA == "" {
		return fmt.Errorf("%w: a certificate revocation list (--ssl-crl) needs the CA that signs it (--ssl-ca)", ErrSpec)
	}
	return nil
}

// reloadCheckEvery is how often the files are looked at for a change: at
// most once a second, on a handshake.
const reloadCheckEvery = time.Second

// TLS is a listener's TLS configuration, made from its files and made
// again when one of them changes (a renewed certificate is served to the
// next handshake; connections already made keep theirs). A change that
// does not load (a half-written file, a key that does not match) is
// logged and the previous configuration kept, and loaded as soon as the
// files are whole. Safe for concurrent use.
type TLS struct {
	files TLSFiles
	log   *slog.Logger
	now   func() time.Time // time.Now; a test's clock in tests

	mu struct {
		sync.Mutex
		cfg     *tls.Config
		stamp   []fileStamp // of the files cfg was made from
		checked time.Time
	}
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	size int64
	mod  time.Time
}

// NewTLS loads files; an error names the file at fault (never its
// contents: a key is a secret).
func NewTLS(files TLSFiles, log *slog.Logger) (*TLS, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if files.ClientAuth == "" {
		files.ClientAuth = ClientAuthNone
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &TLS{files: files, log: log, now: time.Now}
	stamp, err := t.stamps()
	if err != nil {
		return nil, err
	}
	cfg, err := t.load()
	if err != nil {
		return nil, err
	}
	t.mu.cfg, t.mu.stamp, t.mu.checked = cfg, stamp, t.now()
	return t, nil
}

// Config is the configuration a listener serves with: each handshake
// takes the current files' (GetConfigForClient).
func (t *TLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.current(), nil
		},
	}
}

// ClientConfig is the configuration this server's peers are dialled with
// (a broker reaching another's HTTP port): servers verified against the
// CA file (the system's roots without one), and this server's own
// certificate presented to those that ask for one, both as the files
// hold them at each handshake.
func (t *TLS) ClientConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &t.current().Certificates[0], nil
		},
	}
	cfg.RootCAs = t.current().ClientCAs
	return cfg
}

// current returns the configuration, made again first if a file changed
// since it was made (looked at once a second at most).
func (t *TLS) current() *tls.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if now.Sub(t.mu.checked) < reloadCheckEvery {
		return t.mu.cfg
	}
	t.mu.checked = now
	stamp, err := t.stamps()
	if err != nil {
		t.log.Error("TLS files: cannot read them; serving the certificate loaded before", "err", err)
		return t.mu.cfg
	}
	if sameStamps(stamp, t.mu.stamp) {
		return t.mu.cfg
	}
	cfg, err := t.load()
	if err != nil {
		// The files may be half written: tried again at the next check.
		t.log.Error("TLS files changed but do not load; serving the certificate loaded before", "err", err)
		return t.mu.cfg
	}
	t.mu.cfg, t.mu.stamp = cfg, stamp
	t.log.Info("TLS files changed: serving the new certificate", "cert", t.files.Cert, "not_after", cfg.Certificates[0].Leaf.NotAfter)
	return cfg
}

func (t *TLS) paths() []string {
	p := []string{t.files.Cert, t.files.Key}
	if t.files.CA != "" {
		p = append(p, t.files.CA)
	}
	if t.files.CRL != "" {
		p = append(p, t.files.CRL)
	}
	return p
}

func (t *TLS) stamps() ([]fileStamp, error) {
	var out []fileStamp
	for _, p := range t.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("stele/listener: %w", err)
		}
		out = append(out, fileStamp{fi.Size(), fi.ModTime()})
	}
	return out, nil
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) {
			return false
		}
	}
	return true
}

// errKeyPair hides crypto/tls's error text, which may quote PEM it could
// not parse.
var errKeyPair = errors.New("the certificate and key do not load as a pair (PEM certificate chain, then its PEM private key)")

// load makes a configuration from the files.
func (t *TLS) load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(t.files.Cert, t.files.Key)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("stele/listener: %w", err)
		}
		return nil, fmt.Errorf("stele/listener: %s and %s: %w", t.files.Cert, t.files.Key, errKeyPair)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if t.files.CA != "" {
		caPEM, err := os.ReadFile(t.files.CA)
		if err != nil {
			return nil, fmt.Errorf("stele/listener: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("stele/listener: %s holds no PEM certificate", t.files.CA)
		}
		cfg.ClientCAs = pool
		if t.files.CRL != "" {
			revoked, err := loadCRL(t.files.CRL, caPEM)
			if err != nil {
				return nil, err
			}
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) > 0 && revoked[cs.PeerCertificates[0].SerialNumber.String()] {
					return errRevoked
				}
				return nil
			}
		}
	}
	switch t.files.ClientAuth {
	case ClientAuthRequested:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case ClientAuthRequired:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		cfg.ClientAuth = tls.NoClientCert
	}
	return cfg, nil
}

// errRevoked refuses a handshake whose client certificate the CRL lists.
var errRevoked = errors.New("stele/listener: the client certificate is revoked")

// loadCRL reads a certificate revocation list (PEM "X509 CRL" or DER),
// checks its signature against a certificate of caPEM, and returns the
// serial numbers it revokes.
func loadCRL(path string, caPEM []byte) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stele/listener: %w", err)
	}
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "X509 CRL" {
			return nil, fmt.Errorf("stele/listener: %s holds a PEM %q, not an X509 CRL", path, b.Type)
		}
		data = b.Bytes
	}
	crl, err := x509.ParseRevocationList(data)
	if err != nil {
		return nil, fmt.Errorf("stele/listener: %s is not a certificate revocation list", path)
	}
	signed := false
	for rest := caPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if ca, err := x509.ParseCertificate(b.Bytes); err == nil && crl.CheckSignatureFrom(ca) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return nil, fmt.Errorf("stele/listener: %s is not signed by a CA of the CA file", path)
	}
	out := make(map[string]bool, len(crl.RevokedCertificateEntries))
	for _, e := range crl.RevokedCertificateEntries {
		out[e.SerialNumber.String()] = true
	}
	return out, nil
}
