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
// `SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092`, each name one of the
// four security protocols (ParseWithMap takes others).
func Parse(spec string) ([]Listener, error) { return ParseWithMap(spec, nil) }

// ParseProtocolMap reads Kafka's listener.security.protocol.map,
// `INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL`: listener names (letters,
// digits, _ and -; case-insensitive, as Kafka upper-cases them) to
// security protocols. Empty is Kafka's default, each protocol its own name.
func ParseProtocolMap(spec string) (map[string]Protocol, error) {
	out := map[string]Protocol{}
	if strings.TrimSpace(spec) == "" {
		return out, nil
	}
	for _, pair := range strings.Split(spec, ",") {
		name, proto, ok := strings.Cut(strings.TrimSpace(pair), ":")
		name = strings.ToUpper(strings.TrimSpace(name))
		p, known := protocolOf(strings.TrimSpace(proto))
		switch {
		case !ok || name == "":
			return nil, fmt.Errorf("%w: listener.security.protocol.map: %q is not NAME:PROTOCOL", ErrSpec, pair)
		case !validName(name):
			return nil, fmt.Errorf("%w: listener.security.protocol.map: listener name %q: letters, digits, _ and - only", ErrSpec, name)
		case !known:
			return nil, fmt.Errorf("%w: listener.security.protocol.map: %q is not a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)", ErrSpec, proto)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: listener.security.protocol.map names %s twice", ErrSpec, name)
		}
		out[name] = p
	}
	return out, nil
}

func validName(s string) bool {
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// ParseWithMap reads listeners whose names the protocol map gives their
// security protocols (a name it lacks must be a protocol itself, as with
// Kafka's default map); names and ports must differ, as Kafka requires
// (port 0, chosen by the system, may repeat).
func ParseWithMap(spec string, protocols map[string]Protocol) ([]Listener, error) {
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
		l, err := parseOne(strings.TrimSpace(part), protocols)
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

func parseOne(s string, protocols map[string]Protocol) (Listener, error) {
	name, addr, ok := strings.Cut(s, "://")
	if !ok || name == "" {
		return Listener{}, fmt.Errorf("%w: %q is not NAME://host:port", ErrSpec, s)
	}
	p, ok := protocols[strings.ToUpper(name)]
	if !ok && len(protocols) == 0 {
		p, ok = protocolOf(name)
	}
	if !ok {
		return Listener{}, fmt.Errorf("%w: %q: the listener name %q is not in listener.security.protocol.map (nor, without one, a security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)", ErrSpec, s, name)
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

// ParseAdvertised reads Kafka's advertised.listeners for ls: NAME://host:port
// for some of the listeners, each named once, with a host clients can
// reach (not empty or 0.0.0.0, as Kafka requires) and a port. It returns
// the advertised host:port by listener name; a listener it does not name
// advertises its own address.
func ParseAdvertised(spec string, ls []Listener) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(spec) == "" {
		return out, nil
	}
	known := map[string]bool{}
	for _, l := range ls {
		known[l.Name] = true
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		name, addr, ok := strings.Cut(part, "://")
		name = strings.ToUpper(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: advertised.listeners: %q is not NAME://host:port", ErrSpec, part)
		}
		if !known[name] {
			return nil, fmt.Errorf("%w: advertised.listeners: %s is not a listener (listeners name %v)", ErrSpec, name, names(ls))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: advertised.listeners names %s twice", ErrSpec, name)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: advertised.listeners: %q: %v", ErrSpec, part, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: advertised.listeners: %q: port %q is not 1 to 65535", ErrSpec, part, port)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			return nil, fmt.Errorf("%w: advertised.listeners: %q: advertise a host clients can reach, not %q", ErrSpec, part, host)
		}
		out[name] = net.JoinHostPort(host, port)
	}
	return out, nil
}

func names(ls []Listener) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Name
	}
	return out
}
