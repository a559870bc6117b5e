package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"

	"github.com/stele-io/stele/internal/fsm"
)

// DefaultMaxConnections is Kafka's default for max.connections,
// max.connections.per.ip and max.connection.creation.rate: Int.MaxValue,
// no limit.
const DefaultMaxConnections = math.MaxInt32

// ParseConnectionOverrides parses max.connections.per.ip.overrides the way
// Kafka does (fsm.ParseConnectionOverrides, which the dynamic broker
// configs are checked with too): comma-separated host:count pairs, each
// split at its last colon (so "::1:50" is the IPv6 address ::1 with 50),
// spaces around either ignored. A host is an IP address or a host name; a
// count is at least 0 (0 refuses every connection from that host). The
// empty string is no overrides. A host named twice is an error.
func ParseConnectionOverrides(s string) (map[string]int, error) {
	m, err := fsm.ParseConnectionOverrides(s)
	if err != nil {
		return nil, fmt.Errorf("stele/server: %w", err)
	}
	return m, nil
}

// resolveConnectionOverrides turns parsed overrides into limits per
// address. A host name's limit applies to every address it resolves to
// now (Kafka takes the first). An address named directly keeps that
// limit; one that several host names resolve to gets the lowest of theirs.
func resolveConnectionOverrides(ctx context.Context, overrides map[string]int) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	named := map[netip.Addr]bool{}
	for host, n := range overrides {
		if a, err := netip.ParseAddr(host); err == nil {
			out[a.Unmap()], named[a.Unmap()] = n, true
		}
	}
	for host, n := range overrides {
		if _, err := netip.ParseAddr(host); err == nil {
			continue
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("stele/server: max.connections.per.ip.overrides: resolving %q: %w", host, err)
		}
		for _, a := range addrs {
			a = a.Unmap()
			if old, ok := out[a]; named[a] || ok && old <= n {
				continue
			}
			out[a] = n
		}
	}
	return out, nil
}

// validateConnectionLimits reports the first connection limit that cannot
// work.
func (c Config) validateConnectionLimits() error {
	if c.MaxConnections < 1 {
		return fmt.Errorf("stele/server: max.connections must be at least 1, got %d (the default, %d, is no limit)", c.MaxConnections, DefaultMaxConnections)
	}
	if c.MaxConnectionsPerIP < 1 {
		return fmt.Errorf("stele/server: max.connections.per.ip must be at least 1, got %d (the default, %d, is no limit; Kafka's 0, letting only the hosts of max.connections.per.ip.overrides connect, is not supported)",
			c.MaxConnectionsPerIP, DefaultMaxConnections)
	}
	if c.MaxConnectionCreationRate < 1 {
		return fmt.Errorf("stele/server: max.connection.creation.rate must be at least 1, got %d (the default, %d, is no limit; Kafka's 0, one connection a second, can be set at run time as a dynamic broker config: stele config alter --broker ID --set max.connection.creation.rate=0)",
			c.MaxConnectionCreationRate, DefaultMaxConnections)
	}
	_, err := ParseConnectionOverrides(c.MaxConnectionsPerIPOverrides)
	return err
}
