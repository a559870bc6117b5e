package listener

import (
	"crypto/x509"
	"fmt"
	"regexp"
	"strings"
)

// Anonymous is the principal of a connection that presented no
// credentials: a PLAINTEXT one, or a TLS one without a client certificate,
// as in Kafka.
const Anonymous = "User:ANONYMOUS"

// PrincipalMapper turns a client certificate's subject into a user name,
// as Kafka's `ssl.principal.mapping.rules` do: a comma-separated list of
// rules tried in order, each
//
//	RULE:pattern/replacement/[L|U]
//
// where pattern is a regular expression that must match the whole
// distinguished name (RFC 2253, e.g. `CN=alice,OU=eng,O=Acme`),
// replacement may use its groups ($1, $2 ...), and L or U makes the result
// lower or upper case; or DEFAULT, the distinguished name itself. A name
// no rule matches is refused. Patterns use Go's regexp syntax (RE2), which
// covers what Java's does for such patterns but look-around.
type PrincipalMapper struct {
	rules []mappingRule
}

type mappingRule struct {
	def         bool // DEFAULT
	pattern     *regexp.Regexp
	replacement string
	caseChange  byte // 0, 'L' or 'U'
}

// maxRulesLen bounds a rule list.
const maxRulesLen = 64 << 10

// ParsePrincipalMappingRules reads a rule list; "" is DEFAULT alone.
func ParsePrincipalMappingRules(s string) (*PrincipalMapper, error) {
	if len(s) > maxRulesLen {
		return nil, fmt.Errorf("%w: ssl.principal.mapping.rules of %d bytes; at most %d", ErrSpec, len(s), maxRulesLen)
	}
	m := &PrincipalMapper{}
	rest := strings.TrimSpace(s)
	if rest == "" {
		rest = "DEFAULT"
	}
	for rest != "" {
		var r mappingRule
		var err error
		r, rest, err = parseRule(rest)
		if err != nil {
			return nil, err
		}
		m.rules = append(m.rules, r)
		rest = strings.TrimSpace(rest)
		if rest == "" {
			break
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%w: ssl.principal.mapping.rules: %q follows a rule; rules are separated by commas", ErrSpec, truncate(rest))
		}
		rest = strings.TrimSpace(rest[1:])
		if rest == "" {
			return nil, fmt.Errorf("%w: ssl.principal.mapping.rules ends with a comma", ErrSpec)
		}
	}
	return m, nil
}

// parseRule reads the rule at the start of s and returns what follows it.
// A pattern and a replacement run to the next '/': they cannot contain
// one, as in Kafka's rule syntax; a pattern may contain commas.
func parseRule(s string) (mappingRule, string, error) {
	if rest, ok := strings.CutPrefix(s, "DEFAULT"); ok {
		return mappingRule{def: true}, rest, nil
	}
	body, ok := strings.CutPrefix(s, "RULE:")
	if !ok {
		return mappingRule{}, "", fmt.Errorf("%w: ssl.principal.mapping.rules: %q is neither RULE:pattern/replacement/[LU] nor DEFAULT", ErrSpec, truncate(s))
	}
	fields := strings.SplitN(body, "/", 3)
	if len(fields) < 3 {
		return mappingRule{}, "", fmt.Errorf("%w: ssl.principal.mapping.rules: %q is not RULE:pattern/replacement/[LU]", ErrSpec, truncate(s))
	}
	pattern, replacement, rest := fields[0], fields[1], fields[2]
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return mappingRule{}, "", fmt.Errorf("%w: ssl.principal.mapping.rules: pattern %q: %v", ErrSpec, truncate(pattern), err)
	}
	r := mappingRule{pattern: re, replacement: replacement}
	if len(rest) > 0 && (rest[0] == 'L' || rest[0] == 'U') {
		r.caseChange, rest = rest[0], rest[1:]
	}
	return r, rest, nil
}

// Map returns the user name of a certificate subject dn: the first rule
// that matches decides.
func (m *PrincipalMapper) Map(dn string) (string, error) {
	for _, r := range m.rules {
		if r.def {
			return dn, nil
		}
		idx := r.pattern.FindStringSubmatchIndex(dn)
		if idx == nil {
			continue
		}
		out := string(r.pattern.ExpandString(nil, r.replacement, dn, idx))
		switch r.caseChange {
		case 'L':
			out = strings.ToLower(out)
		case 'U':
			out = strings.ToUpper(out)
		}
		return out, nil
	}
	return "", fmt.Errorf("stele/listener: no ssl.principal.mapping.rules rule matches the certificate subject %q", dn)
}

// CertificatePrincipal is the principal of a TLS client that presented
// cert: "User:" and its subject mapped by m.
func CertificatePrincipal(m *PrincipalMapper, cert *x509.Certificate) (string, error) {
	name, err := m.Map(cert.Subject.String())
	if err != nil {
		return "", err
	}
	return "User:" + name, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
