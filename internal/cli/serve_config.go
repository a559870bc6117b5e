package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/server"
)

// stele serve --config FILE: a Kafka broker's server.properties, so that a
// Kafka user brings the file they have. The settings Stele has are read
// under Kafka's names (brokerProperties, below); a flag given on the
// command line wins over the file, and the file over the defaults (a
// cluster's node file, DATA/stele.json, is read after it and wins over
// it). A property whose setting Stele does not have is logged and
// ignored, as a Kafka broker ignores unknown properties, except those
// that would leave a user believing something is done that is not (an
// encrypted or non-PEM store), which refuse to start.

// brokerProperty is a server.properties key: the serve flag it stands for
// and how its value is set into the configuration.
type brokerProperty struct {
	flag string
	set  func(c *server.Config, v string) error
}

// brokerProperties are the server.properties keys stele serve reads.
var brokerProperties = map[string]brokerProperty{
	"listeners":            {"listeners", func(c *server.Config, v string) error { c.Listeners = v; return nil }},
	"advertised.listeners": {"advertised-listeners", func(c *server.Config, v string) error { c.AdvertisedListeners = v; return nil }},
	"listener.security.protocol.map": {"listener-security-protocol-map", func(c *server.Config, v string) error {
		_, err := listener.ParseProtocolMap(v)
		c.ListenerProtocolMap = v
		return err
	}},
	"log.dirs":       {"data", setDataDir},
	"log.dir":        {"data", setDataDir},
	"node.id":        {"node-id", setInt32(func(c *server.Config) *int32 { return &c.NodeID })},
	"broker.id":      {"node-id", setInt32(func(c *server.Config) *int32 { return &c.NodeID })},
	"num.partitions": {"num-partitions", setInt32(func(c *server.Config) *int32 { return &c.DefaultPartitions })},
	"auto.create.topics.enable": {"auto-create-topics", func(c *server.Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		c.AutoCreateTopics = b
		return err
	}},
	"max.connections":              {"max-connections", setInt(func(c *server.Config) *int { return &c.MaxConnections })},
	"max.connections.per.ip":       {"max-connections-per-ip", setInt(func(c *server.Config) *int { return &c.MaxConnectionsPerIP })},
	"max.connection.creation.rate": {"max-connection-creation-rate", setInt(func(c *server.Config) *int { return &c.MaxConnectionCreationRate })},
	"max.connections.per.ip.overrides": {"max-connections-per-ip-overrides", func(c *server.Config, v string) error {
		c.MaxConnectionsPerIPOverrides = v
		return nil
	}},
	// A PEM keystore holds the certificate chain and its key in one file,
	// which Go reads as both.
	"ssl.keystore.location":   {"ssl-cert", func(c *server.Config, v string) error { c.TLS.Cert, c.TLS.Key = v, v; return nil }},
	"ssl.truststore.location": {"ssl-ca", func(c *server.Config, v string) error { c.TLS.CA = v; return nil }},
	"ssl.client.auth": {"ssl-client-auth", func(c *server.Config, v string) error {
		c.TLS.ClientAuth = listener.ClientAuth(strings.TrimSpace(v))
		return nil
	}},
	"ssl.principal.mapping.rules": {"ssl-principal-mapping-rules", func(c *server.Config, v string) error { c.PrincipalMappingRules = v; return nil }},
	"sasl.enabled.mechanisms": {"sasl-enabled-mechanisms", func(c *server.Config, v string) error {
		c.SASLMechanisms = splitList(v, ",")
		return nil
	}},
	"allow.everyone.if.no.acl.found": {"allow-everyone-if-no-acl-found", func(c *server.Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		c.AllowEveryoneIfNoACL = &b
		return err
	}},
	// Stele's authorizer always runs (the ACLs are replicated state): a
	// Kafka file naming its StandardAuthorizer asks for what it gets.
	"authorizer.class.name": {"", func(*server.Config, string) error { return nil }},
	"sasl.oauthbearer.jwks.endpoint.url": {"sasl-oauthbearer-jwks-file", func(c *server.Config, v string) error {
		v = strings.TrimSpace(v)
		if strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://") {
			c.OAuth.JWKSURL = v
			return nil
		}
		c.OAuth.JWKSFile = strings.TrimPrefix(v, "file:")
		return nil
	}},
	"sasl.oauthbearer.jwks.endpoint.refresh.ms": {"sasl-oauthbearer-jwks-refresh", func(c *server.Config, v string) error {
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || ms <= 0 {
			return fmt.Errorf("want a number of milliseconds above 0")
		}
		c.OAuth.Refresh = time.Duration(ms) * time.Millisecond
		return nil
	}},
	"sasl.oauthbearer.expected.issuer": {"sasl-oauthbearer-expected-issuer", func(c *server.Config, v string) error { c.OAuth.Issuer = strings.TrimSpace(v); return nil }},
	"sasl.oauthbearer.expected.audience": {"sasl-oauthbearer-expected-audience", func(c *server.Config, v string) error {
		c.OAuth.Audience = splitList(v, ",")
		return nil
	}},
	"sasl.oauthbearer.sub.claim.name": {"sasl-oauthbearer-sub-claim-name", func(c *server.Config, v string) error { c.OAuth.SubClaim = strings.TrimSpace(v); return nil }},
	"super.users":                     {"super-users", func(c *server.Config, v string) error { c.SuperUsers = splitList(v, ";"); return nil }},
	"connections.max.reauth.ms": {"connections-max-reauth-ms", func(c *server.Config, v string) error {
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		c.MaxReauth = time.Duration(ms) * time.Millisecond
		return err
	}},
}

// checkedProperties must hold a given value for the file to be read: the
// PEM store types (JKS and PKCS12 are not read).
var checkedProperties = map[string]string{
	"ssl.keystore.type":   "PEM",
	"ssl.truststore.type": "PEM",
}

// refusedProperties would promise what Stele does not do yet: their
// presence refuses the file, with why.
var refusedProperties = map[string]string{
	"ssl.keystore.password": "the keystore is read as an unencrypted PEM file (ssl.keystore.type=PEM)",
	"ssl.key.password":      "the key is read as an unencrypted PEM file",
}

// applyServerProperties sets into cfg every property of props that Stele
// reads and whose flag was not given (changed), and returns the keys it
// ignored, in order.
func applyServerProperties(cfg *server.Config, props map[string]string, changed func(string) bool) ([]string, error) {
	var ignored []string
	for _, k := range sortedKeysOf(props) {
		v := props[k]
		if why, refused := refusedProperties[k]; refused {
			return nil, usageErrorf("--config: %s: %s", k, why)
		}
		if want, ok := checkedProperties[k]; ok {
			if !strings.EqualFold(strings.TrimSpace(v), want) {
				return nil, usageErrorf("--config: %s=%s: only %s is read", k, v, want)
			}
			continue
		}
		p, ok := brokerProperties[k]
		if !ok {
			ignored = append(ignored, k)
			continue
		}
		if changed(p.flag) {
			continue
		}
		if err := p.set(cfg, v); err != nil {
			return nil, usageErrorf("--config: %s: %v", k, err)
		}
	}
	return ignored, nil
}

func setDataDir(c *server.Config, v string) error {
	dirs := splitList(v, ",")
	if len(dirs) != 1 {
		return fmt.Errorf("Stele keeps its data in one directory, got %d", len(dirs))
	}
	c.DataDir = dirs[0]
	return nil
}

func setInt(field func(*server.Config) *int) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		*field(c) = n
		return err
	}
}

func setInt32(field func(*server.Config) *int32) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		*field(c) = int32(n)
		return err
	}
}

// splitList splits a list property, dropping blanks around and between.
func splitList(v, sep string) []string {
	var out []string
	for _, s := range strings.Split(v, sep) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeysOf(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
