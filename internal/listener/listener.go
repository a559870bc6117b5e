// Package listener is what a Kafka listener is made of in Stele: its
// specification in Kafka's syntax (`--listeners`, server.properties'
// `listeners`), the TLS it serves from PEM files that are reloaded when
// they change, and the principal a connection authenticates as (Kafka's
// `User:` principal and `ssl.principal.mapping.rules`).
//
// It depends on nothing of Stele's: the Kafka front-end (internal/kafka)
// serves the listeners, the server (internal/server) makes them from
// flags.
package listener

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrSpec is wrapped by every error of a listener specification.
var ErrSpec = errors.New("stele/listener: invalid listener")

// Protocol is a Kafka security protocol.
type Protocol string

// The four security protocols of Kafka.
const (
	Plaintext     Protocol = "PLAINTEXT"
	SSL           Protocol = "SSL"
	SASLPlaintext Protocol = "SASL_PLAINTEXT"
	SASLSSL       Protocol = "SASL_SSL"
)

// TLS reports whether the protocol runs over TLS.
func (p Protocol) TLS() bool { return p == SSL || p == SASLSSL }

// SASL reports whether the protocol authenticates with SASL.
func (p Protocol) SASL() bool { return p == SASLPlaintext || p == SASLSSL }

func protocolOf(name string) (Protocol, bool) {
	switch p := Protocol(strings.ToUpper(name)); p {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
		return p, true
	}
	return "", false
}

// Listener is one listener: NAME://host:port. Without a security
// protocol map the name is the protocol, as in Kafka.
type Listener struct {
	Name     string
	Protocol Protocol
	// Host is empty or 0.0.0.0 for every interface; Port is 0 for one the
	// system picks.
	Host string
	Port int
}

// Addr is the host:port to listen on.
func (l Listener) Addr() string { return net.JoinHostPort(l.Host, strconv.Itoa(l.Port)) }

// String is the listener in Kafka's syntax.
func (l Listener) String() string { return l.Name + "://" + l.Addr() }

// maxListeners bounds a specification: more is a typo, not a broker.
const maxListeners = 16

// Parse reads a comma-separated list of listeners in Kafka's syntax,
// `SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092`. A name must be one
// of the four security protocols (Kafka's listener.security.protocol.map,
// which gives others, is not read yet); names and ports must differ, as
// Kafka requires (port 0, chosen by the system, may repeat).
func Parse(spec string) ([]Listener, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%w: no listener given (want NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092)", ErrSpec)
	}
	parts := strings.Split(spec, ",")
	if len(parts) > maxListeners {
		return nil, fmt.Errorf("%w: %d listeners; at most %d", ErrSpec, len(parts), maxListeners)
	}
	var out []Listener
	names, ports := map[string]bool{}, map[int]bool{}
	for _, part := range parts {
		l, err := parseOne(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if names[l.Name] {
			return nil, fmt.Errorf("%w: listener name %s is given twice: each listener must have a different name", ErrSpec, l.Name)
		}
		if l.Port != 0 && ports[l.Port] {
			return nil, fmt.Errorf("%w: port %d is given twice: each listener must have a different port", ErrSpec, l.Port)
		}
		names[l.Name], ports[l.Port] = true, true
		out = append(out, l)
	}
	return out, nil
}

func parseOne(s string) (Listener, error) {
	name, addr, ok := strings.Cut(s, "://")
	if !ok || name == "" {
		return Listener{}, fmt.Errorf("%w: %q is not NAME://host:port", ErrSpec, s)
	}
	p, ok := protocolOf(name)
	if !ok {
		return Listener{}, fmt.Errorf("%w: %q: the listener name %q is not a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); other names need listener.security.protocol.map, which Stele does not read yet", ErrSpec, s, name)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Listener{}, fmt.Errorf("%w: %q: %v", ErrSpec, s, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return Listener{}, fmt.Errorf("%w: %q: port %q is not 0 to 65535", ErrSpec, s, port)
	}
	return Listener{Name: strings.ToUpper(name), Protocol: p, Host: host, Port: n}, nil
}
