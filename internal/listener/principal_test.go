package listener

import (
	"errors"
	"strings"
	"testing"
)

// TestPrincipalMapping: the rules of Kafka's documentation and of its
// SslPrincipalMapper tests map as Kafka maps them.
func TestPrincipalMapping(t *testing.T) {
	m, err := ParsePrincipalMappingRules(`RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,
		RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,
		RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT`)
	if err != nil {
		t.Fatal(err)
	}
	for dn, want := range map[string]string{
		"CN=kafka-svc,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown": "kafka-svc",
		"CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US":       "duke@javasoft",
		"OU=JavaSoft,CN=Duke": "DUKE",
		"OU=nobody":           "OU=nobody",
	} {
		if got, err := m.Map(dn); err != nil || got != want {
			t.Errorf("Map(%q) = %q, %v; want %q", dn, got, err, want)
		}
	}
	def, err := ParsePrincipalMappingRules("")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := def.Map("CN=alice,O=Acme"); got != "CN=alice,O=Acme" {
		t.Errorf("DEFAULT maps to %q", got)
	}
	only, err := ParsePrincipalMappingRules(`RULE:^CN=([a-z]+)$/$1/`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := only.Map("CN=Alice"); err == nil {
		t.Error("a name no rule matches was mapped")
	}
	for rules, why := range map[string]string{
		"RULE:^CN=(.*$/$1/":         "pattern",
		"RULE:^CN=(.*)$/$1":         "RULE:pattern/replacement/[LU]",
		"RULE:a/b/X":                "separated by commas",
		"DEFAULT,":                  "ends with a comma",
		"NOTARULE":                  "neither",
		"DEFAULT DEFAULT":           "separated by commas",
		strings.Repeat("x", 70_000): "at most",
	} {
		if _, err := ParsePrincipalMappingRules(rules); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), why) {
			t.Errorf("ParsePrincipalMappingRules(%q): %v, want %q", rules, err, why)
		}
	}
}

// FuzzPrincipalMapping: a rule list (server configuration) parses or
// fails with ErrSpec, and a parsed one maps any subject without panicking.
func FuzzPrincipalMapping(f *testing.F) {
	f.Add(`RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`, "CN=a,OU=ServiceUsers")
	f.Add(`RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L`, "CN=A,OU=B")
	f.Add("", "CN=x")
	f.Fuzz(func(t *testing.T, rules, dn string) {
		m, err := ParsePrincipalMappingRules(rules)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("%q: %v is not ErrSpec", rules, err)
			}
			return
		}
		m.Map(dn)
	})
}
