package server

import (
	"context"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestParseConnectionOverrides: max.connections.per.ip.overrides in
// Kafka's form (Csv.parseCsvMap: split at commas, then at each pair's last
// colon, spaces trimmed).
func TestParseConnectionOverrides(t *testing.T) {
	good := map[string]map[string]int{
		"":                                {},
		"  ":                              {},
		"hostName:100,127.0.0.1:200":      {"hostName": 100, "127.0.0.1": 200}, // Kafka's documented example
		" broker-1.example : 5 , ::1:50 ": {"broker-1.example": 5, "::1": 50},
		"[::1]:7":                         {"::1": 7},
		"10.0.0.1:0":                      {"10.0.0.1": 0},
		"fe80::1%eth0:3":                  {"fe80::1%eth0": 3},
	}
	for in, want := range good {
		got, err := ParseConnectionOverrides(in)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for in, wantErr := range map[string]string{
		"host":          "not host:count",
		"host:":         "count",
		"host:-1":       "count",
		"host:many":     "count",
		":5":            "no valid host",
		"a b:5":         "no valid host",
		"h:1,h:2":       "twice",
		"127.0.0.1:1,,": "not host:count",
		"host/evil:1":   "no valid host",
	} {
		if _, err := ParseConnectionOverrides(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: %v, want an error mentioning %q", in, err, wantErr)
		}
	}
}

// TestResolveConnectionOverrides: addresses are taken as they are (IPv4
// in IPv6 as IPv4), host names resolved to every address they have; an
// address named directly keeps its own limit.
func TestResolveConnectionOverrides(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := resolveConnectionOverrides(ctx, map[string]int{"::ffff:127.0.0.2": 4, "::1": 0, "localhost": 9, "127.0.0.1": 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]int{netip.MustParseAddr("127.0.0.2"): 4, netip.MustParseAddr("::1"): 0, netip.MustParseAddr("127.0.0.1"): 1}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	got, err = resolveConnectionOverrides(ctx, map[string]int{"localhost": 9})
	if err != nil {
		t.Fatal(err)
	}
	if got[netip.MustParseAddr("127.0.0.1")] != 9 {
		t.Fatalf("localhost:9 gives %v, want 127.0.0.1 limited to 9", got)
	}
	if _, err := resolveConnectionOverrides(ctx, map[string]int{"no-such-host.invalid": 1}); err == nil {
		t.Fatal("a host that does not resolve was accepted")
	}
}

// TestConfigValidateConnectionLimits: the defaults are Kafka's, and
// limits that cannot work are refused with what to do.
func TestConfigValidateConnectionLimits(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.MaxConnectionCreationRate != 2147483647 {
		t.Fatalf("max.connection.creation.rate default %d, want Kafka's 2147483647", cfg.MaxConnectionCreationRate)
	}
	if cfg.MaxConnections != 2147483647 || cfg.MaxConnectionsPerIP != 2147483647 || cfg.MaxConnectionsPerIPOverrides != "" {
		t.Fatalf("defaults %d, %d, %q; want Kafka's 2147483647, 2147483647, \"\"", cfg.MaxConnections, cfg.MaxConnectionsPerIP, cfg.MaxConnectionsPerIPOverrides)
	}
	for name, tweak := range map[string]func(*Config){
		"max.connections":                  func(c *Config) { c.MaxConnections = 0 },
		"max.connections.per.ip":           func(c *Config) { c.MaxConnectionsPerIP = 0 },
		"max.connections.per.ip.overrides": func(c *Config) { c.MaxConnectionsPerIPOverrides = "host" },
		"max.connection.creation.rate":     func(c *Config) { c.MaxConnectionCreationRate = 0 },
	} {
		bad := cfg
		tweak(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
	ok := cfg
	ok.MaxConnections, ok.MaxConnectionsPerIP, ok.MaxConnectionsPerIPOverrides = 100, 10, "127.0.0.1:20"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
