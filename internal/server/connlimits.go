package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// DefaultMaxConnections is Kafka's default for max.connections and
// max.connections.per.ip: Int.MaxValue, no limit.
const DefaultMaxConnections = math.MaxInt32

// validOverrideHost is the characters Kafka accepts in a host of
// max.connections.per.ip.overrides (Utils.validHostPattern).
var validOverrideHost = regexp.MustCompile(`^[0-9a-zA-Z\-%._:]+$`)

// ParseConnectionOverrides parses max.connections.per.ip.overrides the way
// Kafka does: comma-separated host:count pairs, each split at its last
// colon (so "::1:50" is the IPv6 address ::1 with 50), spaces around
// either ignored. A host is an IP address or a host name; a count is at
// least 0 (0 refuses every connection from that host). The empty string is
// no overrides. A host named twice is an error.
func ParseConnectionOverrides(s string) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		i := strings.LastIndexByte(pair, ':')
		if i < 0 {
			return nil, fmt.Errorf("stele/server: max.connections.per.ip.overrides: %q is not host:count", pair)
		}
		host := strings.TrimSpace(pair[:i])
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // [::1]:50 too
		if !validOverrideHost.MatchString(host) {
			return nil, fmt.Errorf("stele/server: max.connections.per.ip.overrides: %q has no valid host (letters, digits and -%%._: only)", pair)
		}
		n, err := strconv.Atoi(strings.TrimSpace(pair[i+1:]))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("stele/server: max.connections.per.ip.overrides: the count of %q is not a number of connections (0 or more)", pair)
		}
		if _, dup := out[host]; dup {
			return nil, fmt.Errorf("stele/server: max.connections.per.ip.overrides names %q twice", host)
		}
		out[host] = n
	}
	return out, nil
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
	_, err := ParseConnectionOverrides(c.MaxConnectionsPerIPOverrides)
	return err
}
