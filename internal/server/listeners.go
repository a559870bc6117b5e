package server

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/stele-io/stele/internal/kafka"
	"github.com/stele-io/stele/internal/listener"
)

// kafkaListen is one Kafka listener and the socket bound for it.
type kafkaListen struct {
	spec listener.Listener
	ln   net.Listener
}

// listenKafka binds the Kafka listeners (Config.kafkaListeners), before
// anything else starts, so that a port in use fails the start at once.
func (n *Node) listenKafka() error {
	specs, err := n.cfg.kafkaListeners()
	if err != nil {
		return err
	}
	for _, l := range specs {
		ln, err := net.Listen("tcp", l.Addr())
		if err != nil {
			return fmt.Errorf("stele/server: kafka listener %s: %w", l, err)
		}
		n.kafkaLns = append(n.kafkaLns, kafkaListen{spec: l, ln: ln})
	}
	n.kafkaLn = n.kafkaLns[0].ln
	return nil
}

// serveKafka serves every Kafka listener. The first advertises the
// options' address (--advertise, or the genesis directory's for a node
// of a cluster); the others their bound ones. The SSL listeners share one
// TLS configuration, reloaded when its files change.
func (n *Node) serveKafka(kopts kafka.Options) error {
	var lt *listener.TLS
	var principals *listener.PrincipalMapper
	for _, l := range n.kafkaLns {
		if !l.spec.Protocol.TLS() || lt != nil {
			continue
		}
		var err error
		if lt, err = n.tlsOnce(); err != nil {
			return fmt.Errorf("stele/server: %w", err)
		}
		if principals, err = listener.ParsePrincipalMappingRules(n.cfg.PrincipalMappingRules); err != nil {
			return fmt.Errorf("stele/server: %w", err)
		}
	}
	specs := make([]listener.Listener, len(n.kafkaLns))
	for i, l := range n.kafkaLns {
		specs[i] = l.spec
	}
	advertised, err := listener.ParseAdvertised(n.cfg.AdvertisedListeners, specs) // checked by Validate
	if err != nil {
		return fmt.Errorf("stele/server: %w", err)
	}
	lns := n.kafkaLns
	n.kafkaLns = nil // the server closes them from here on
	for i, l := range lns {
		kl := kafka.Listener{Name: l.spec.Name}
		if i == 0 {
			kl.AdvertisedHost, kl.AdvertisedPort = kopts.AdvertisedHost, kopts.AdvertisedPort
		}
		if a, ok := advertised[l.spec.Name]; ok {
			host, port, _ := net.SplitHostPort(a)
			p, _ := strconv.Atoi(port)
			kl.AdvertisedHost, kl.AdvertisedPort = host, int32(p)
		}
		if l.spec.Protocol.TLS() {
			kl.TLS, kl.Principals = lt, principals
		}
		if l.spec.Protocol.SASL() {
			kl.SASLMechanisms = n.cfg.SASLMechanisms
		}
		ln := l.ln
		go func() { n.errc <- n.kafka.ServeListener(ln, kl) }()
	}
	var names []string
	for _, l := range lns {
		names = append(names, l.spec.Name+"://"+l.ln.Addr().String())
	}
	n.kafkaNames = strings.Join(names, ",")
	return nil
}

// tlsOnce returns the node's reloader of its TLS files, made at the first
// call (during Start, from one goroutine).
func (n *Node) tlsOnce() (*listener.TLS, error) {
	if n.tlsFiles == nil {
		lt, err := listener.NewTLS(n.cfg.TLS, n.log.With("component", "tls"))
		if err != nil {
			return nil, err
		}
		n.tlsFiles = lt
	}
	return n.tlsFiles, nil
}
