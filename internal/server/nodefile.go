package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/stele-io/stele/internal/listener"
)

// NodeFileName is the node file's name inside a data directory.
const NodeFileName = "stele.json"

// maxNodeFileBytes bounds what ReadNodeFile reads: a node file lists a few
// addresses and one peer per other broker, far below this.
const maxNodeFileBytes = 1 << 20

// ErrNodeFile is wrapped by every error ParseNodeFile and NodeFile.Validate
// return for a node file that cannot be used.
var ErrNodeFile = errors.New("stele/server: invalid node file")

// NodeFile is a node's own settings, kept as JSON in DATA/stele.json next
// to the data they belong to. `stele cluster init` writes one per broker;
// `stele serve --data DATA` reads it and uses it as the defaults that
// command-line flags override. Every field may be omitted (empty means
// "the serve default"), except that node_id is 0 when absent:
//
//	{
//	  "node_id": 1,
//	  "kafka": "0.0.0.0:19093",
//	  "http": "0.0.0.0:19193",
//	  "p2p": "0.0.0.0:19293",
//	  "advertise_kafka": "broker1.example:19093",
//	  "p2p_external": "broker1.example:19293",
//	  "peers": ["<40 hex digits>@broker0.example:19292", "..."]
//	}
//
// Unknown keys are an error, so a misspelt setting is not silently ignored.
type NodeFile struct {
	// NodeID is the Kafka node id (Config.NodeID).
	NodeID int32 `json:"node_id"`
	// Kafka, HTTP and P2P are the listeners, host:port (Config.KafkaAddr,
	// HTTPAddr, P2PAddr).
	Kafka string `json:"kafka,omitempty"`
	HTTP  string `json:"http,omitempty"`
	P2P   string `json:"p2p,omitempty"`
	// AdvertiseKafka is the host:port Metadata tells clients to use
	// (Config.AdvertisedKafka).
	AdvertiseKafka string `json:"advertise_kafka,omitempty"`
	// P2PExternal is the host:port other brokers dial to reach this one's
	// P2P listener (Config.P2PExternal).
	P2PExternal string `json:"p2p_external,omitempty"`
	// Peers are the CometBFT peers, "nodeid@host:port" (Config.Peers).
	Peers []string `json:"peers,omitempty"`
	// RPC is CometBFT's RPC listener (Config.RPCAddr): peers joining by
	// state sync fetch and verify headers from it.
	RPC string `json:"rpc,omitempty"`
	// StateSyncRPC are the other brokers' RPC addresses, host:port
	// (Config.StateSyncRPC): with them an empty broker joins by state sync.
	StateSyncRPC []string `json:"state_sync_rpc,omitempty"`
	// Listeners are the Kafka listeners in Kafka's syntax, in place of
	// Kafka (Config.Listeners): `stele cluster init --tls` writes one SSL
	// listener.
	Listeners string `json:"listeners,omitempty"`
	// SSLCert, SSLKey and SSLCA are the SSL listeners' PEM files, relative
	// to the data directory unless absolute, and SSLClientAuth their
	// ssl.client.auth (Config.TLS).
	SSLCert       string `json:"ssl_cert,omitempty"`
	SSLKey        string `json:"ssl_key,omitempty"`
	SSLCA         string `json:"ssl_ca,omitempty"`
	SSLClientAuth string `json:"ssl_client_auth,omitempty"`
	// SSLCRL is a certificate revocation list (Config.TLS.CRL), relative
	// to the data directory unless absolute.
	SSLCRL string `json:"ssl_crl,omitempty"`
	// HTTPTLS serves the HTTP API over TLS with the SSL files
	// (Config.HTTPTLS): `stele cluster init --tls --http-tls` sets it.
	HTTPTLS bool `json:"http_tls,omitempty"`
	// SuperUsers are principals allowed everything (Config.SuperUsers):
	// `stele cluster init --tls` names the client certificate it writes.
	SuperUsers []string `json:"super_users,omitempty"`
}

// Validate reports the first field that cannot work: a negative node id, an
// address that is not host:port, a peer that is not nodeid@host:port.
func (f NodeFile) Validate() error {
	if f.NodeID < 0 {
		return fmt.Errorf("%w: node_id %d is negative", ErrNodeFile, f.NodeID)
	}
	for _, a := range []struct{ name, v string }{
		{"kafka", f.Kafka}, {"http", f.HTTP}, {"p2p", f.P2P},
		{"advertise_kafka", f.AdvertiseKafka}, {"p2p_external", f.P2PExternal}, {"rpc", f.RPC},
	} {
		if a.v == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.v); err != nil || port == "" {
			return fmt.Errorf("%w: %s %q is not host:port", ErrNodeFile, a.name, a.v)
		}
	}
	if f.Listeners != "" {
		if _, err := listener.Parse(f.Listeners); err != nil {
			return fmt.Errorf("%w: listeners: %v", ErrNodeFile, err)
		}
	}
	switch listener.ClientAuth(f.SSLClientAuth) {
	case "", listener.ClientAuthNone, listener.ClientAuthRequested, listener.ClientAuthRequired:
	default:
		return fmt.Errorf("%w: ssl_client_auth %q: want none, requested or required", ErrNodeFile, f.SSLClientAuth)
	}
	for _, a := range f.StateSyncRPC {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("%w: state_sync_rpc %q is not host:port", ErrNodeFile, a)
		}
	}
	for _, p := range f.Peers {
		id, hostport, ok := strings.Cut(p, "@")
		if !ok || id == "" {
			return fmt.Errorf("%w: peer %q is not nodeid@host:port", ErrNodeFile, p)
		}
		if _, port, err := net.SplitHostPort(hostport); err != nil || port == "" {
			return fmt.Errorf("%w: peer %q is not nodeid@host:port", ErrNodeFile, p)
		}
	}
	return nil
}

// ParseNodeFile decodes and validates a node file's JSON. Unknown keys and
// anything after the JSON object are errors.
func ParseNodeFile(data []byte) (NodeFile, error) {
	var f NodeFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return NodeFile{}, fmt.Errorf("%w: %v", ErrNodeFile, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return NodeFile{}, fmt.Errorf("%w: unexpected data after the JSON object", ErrNodeFile)
	}
	if err := f.Validate(); err != nil {
		return NodeFile{}, err
	}
	return f, nil
}

// ReadNodeFile reads dataDir/stele.json. It returns false and no error
// when the file (or dataDir) does not exist.
func ReadNodeFile(dataDir string) (NodeFile, bool, error) {
	path := filepath.Join(dataDir, NodeFileName)
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NodeFile{}, false, nil
	}
	if err != nil {
		return NodeFile{}, false, fmt.Errorf("stele/server: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxNodeFileBytes+1))
	if err != nil {
		return NodeFile{}, false, fmt.Errorf("stele/server: reading %s: %w", path, err)
	}
	if len(data) > maxNodeFileBytes {
		return NodeFile{}, false, fmt.Errorf("%w: %s is larger than %d bytes", ErrNodeFile, path, maxNodeFileBytes)
	}
	f, err := ParseNodeFile(data)
	if err != nil {
		return NodeFile{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return f, true, nil
}

// WriteNodeFile validates f and writes it to dataDir/stele.json (creating
// dataDir if needed) through a synced temporary file and a rename, so a
// crash leaves the old file or the new one, never a torn one.
func WriteNodeFile(dataDir string, f NodeFile) error {
	if err := f.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("stele/server: node file: %w", err)
	}
	data = append(data, '\n')
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("stele/server: %w", err)
	}
	path := filepath.Join(dataDir, NodeFileName)
	tmp, err := os.CreateTemp(dataDir, "."+NodeFileName+".*")
	if err != nil {
		return fmt.Errorf("stele/server: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("stele/server: writing %s: %w", path, err)
	}
	// Make the rename durable: sync the directory entry.
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// ApplyNodeFile sets c's fields from f: NodeID always, every other field
// where f has a value. Callers that let command-line flags win apply the
// flags afterwards.
func (c *Config) ApplyNodeFile(f NodeFile) {
	c.NodeID = f.NodeID
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.KafkaAddr, f.Kafka)
	set(&c.HTTPAddr, f.HTTP)
	set(&c.P2PAddr, f.P2P)
	set(&c.AdvertisedKafka, f.AdvertiseKafka)
	set(&c.P2PExternal, f.P2PExternal)
	set(&c.RPCAddr, f.RPC)
	if len(f.Peers) > 0 {
		c.Peers = append([]string(nil), f.Peers...)
	}
	if len(f.StateSyncRPC) > 0 {
		c.StateSyncRPC = append([]string(nil), f.StateSyncRPC...)
	}
	set(&c.Listeners, f.Listeners)
	inData := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(c.DataDir, p)
	}
	set(&c.TLS.Cert, inData(f.SSLCert))
	set(&c.TLS.Key, inData(f.SSLKey))
	set(&c.TLS.CA, inData(f.SSLCA))
	set(&c.TLS.CRL, inData(f.SSLCRL))
	if f.SSLClientAuth != "" {
		c.TLS.ClientAuth = listener.ClientAuth(f.SSLClientAuth)
	}
	if len(f.SuperUsers) > 0 {
		c.SuperUsers = append([]string(nil), f.SuperUsers...)
	}
	if f.HTTPTLS {
		c.HTTPTLS = true
	}
}
