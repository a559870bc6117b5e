package bench

import (
	"errors"
	"strings"
	"testing"
)

// Validate names the field out of range and wraps ErrInvalidConfig.
func TestConfigValidate(t *testing.T) {
	if c := DefaultConfig(); c.Validate() != nil {
		t.Fatalf("defaults invalid: %v", c.Validate())
	}
	cases := map[string]func(*Config){
		"unknown scenario":     func(c *Config) { c.Scenario = "load" },
		"no brokers":           func(c *Config) { c.Brokers = nil },
		"empty topic":          func(c *Config) { c.Topic = "" },
		"partitions 0":         func(c *Config) { c.Create, c.Partitions = true, 0 },
		"record size 0":        func(c *Config) { c.RecordSize = 0 },
		"record size 7":        func(c *Config) { c.Scenario, c.RecordSize = EndToEnd, 7 },
		"producers 0":          func(c *Config) { c.Producers = 0 },
		"consumers 0":          func(c *Config) { c.Scenario, c.Consumers = Consume, 0 },
		"nor a commit count":   func(c *Config) { c.Scenario, c.Duration = Commit, 0 },
		"never end":            func(c *Config) { c.Duration = 0 },
		"do not fit":           func(c *Config) { c.KeySize, c.Keys = 2, 101 },
		`acks "2"`:             func(c *Config) { c.Acks = "2" },
		`compression "brotli"`: func(c *Config) { c.Compression = "brotli" },
		"negative":             func(c *Config) { c.Rate = -1 },
		"timeout 0s":           func(c *Config) { c.Timeout = 0 },
	}
	for want, mutate := range cases {
		c := DefaultConfig()
		mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Validate() = %v", want, err)
		}
	}
	// Consume needs no producers and accepts any record size with 0.
	c := DefaultConfig()
	c.Scenario, c.Producers, c.RecordSize, c.Duration = Consume, 0, 0, 0
	if err := c.Validate(); err != nil {
		t.Errorf("consume with no size check: %v", err)
	}
}

// The command line spells out every flag of the scenario, quoting what a
// shell would split.
func TestConfigCommandLine(t *testing.T) {
	c := DefaultConfig()
	c.Scenario, c.Group, c.Rate = EndToEnd, "my group", 100
	got := c.CommandLine()
	for _, want := range []string{"stele bench e2e ", "--group 'my group'", "--rate 100", "--consumers 1", "--warmup 5s", "--duration 30s"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	c.Scenario = Consume
	if got := c.CommandLine(); strings.Contains(got, "--producers") || strings.Contains(got, "--acks") {
		t.Errorf("consume command line has producer flags: %q", got)
	}
	// Commit: its group (the default one when unset) and warmup, no
	// producer flags.
	c.Scenario, c.Group = Commit, ""
	got = c.CommandLine()
	for _, want := range []string{"stele bench commit ", "--group stele-bench-commit", "--consumers 1", "--warmup 5s", "--duration 30s"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "--producers") || strings.Contains(got, "--rate") {
		t.Errorf("commit command line has producer flags: %q", got)
	}
}
