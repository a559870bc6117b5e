package cli

import (
	"bufio"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// --command-config FILE: the client properties Kafka's tools take
// (kafka-topics.sh --command-config), so that the stele commands reach a
// broker whose listener is TLS or SASL. Read: security.protocol (PLAINTEXT,
// SSL, SASL_PLAINTEXT, SASL_SSL),
// librdkafka's PEM names ssl.ca.location, ssl.certificate.location and
// ssl.key.location, the Java client's PEM stores (ssl.truststore.location
// and ssl.keystore.location with ssl.truststore.type / ssl.keystore.type
// PEM) and ssl.endpoint.identification.algorithm (https, or empty: no
// host name check); SASL_PLAINTEXT and SASL_SSL with sasl.mechanism
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and librdkafka's sasl.username and
// sasl.password or the Java client's sasl.jaas.config. Another sasl.* or
// ssl.* property is refused so that nobody believes it took effect. Other
// properties (client.id, request.timeout.ms ...) are Kafka clients' and
// ignored.

// maxPropertiesBytes bounds a properties file.
const maxPropertiesBytes = 1 << 20

// readProperties reads a Java properties file: key=value, key:value or
// key value lines, # and ! comments, a backslash at the end of a line
// continuing it, and the escapes \t \n \r \f \\ \uXXXX.
func readProperties(path string) (map[string]string, error) {
	return readPropertiesFor("--command-config", path)
}

// readPropertiesFor is readProperties for the flag that names the file.
func readPropertiesFor(flag, path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if len(data) > maxPropertiesBytes {
		return nil, fmt.Errorf("%s %s: %d bytes; a properties file is at most %d", flag, path, len(data), maxPropertiesBytes)
	}
	return parseProperties(string(data))
}

func parseProperties(text string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), maxPropertiesBytes+1)
	var logical strings.Builder
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimLeft(sc.Text(), " \t\f")
		if logical.Len() == 0 && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		// An odd count of backslashes at the end continues the line.
		trail := len(line) - len(strings.TrimRight(line, `\`))
		if trail%2 == 1 {
			logical.WriteString(line[:len(line)-1])
			continue
		}
		logical.WriteString(line)
		k, v, err := splitProperty(logical.String())
		logical.Reset()
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if k != "" {
			out[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if logical.Len() > 0 {
		k, v, err := splitProperty(logical.String())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if k != "" {
			out[k] = v
		}
	}
	return out, nil
}

// splitProperty splits a logical line at its first unescaped =, : or
// whitespace and unescapes both sides.
func splitProperty(line string) (string, string, error) {
	end := len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			end = i
			break
		}
	}
	key, rest := line[:end], line[end:]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	k, err := unescapeProperty(key)
	if err != nil {
		return "", "", err
	}
	v, err := unescapeProperty(rest)
	if err != nil {
		return "", "", err
	}
	if !utf8.ValidString(k) || !utf8.ValidString(v) {
		return "", "", fmt.Errorf("a property that is not UTF-8")
	}
	return k, v, nil
}

func unescapeProperty(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i == len(s)-1 {
			if c != '\\' {
				b.WriteByte(c)
			}
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 >= len(s) {
				return "", fmt.Errorf(`a \u escape needs four hex digits`)
			}
			n, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf(`a \u escape needs four hex digits, got %q`, s[i+1:i+5])
			}
			b.WriteRune(rune(n))
			i += 4
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// supportedSSL are the ssl.* properties --command-config reads.
var supportedSSL = []string{
	"ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
	"ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location", "ssl.keystore.type",
	"ssl.endpoint.identification.algorithm",
}

// supportedSASL are the sasl.* properties --command-config reads.
var supportedSASL = []string{"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config"}

// clientTLSOpts turns client properties into the client's options: none
// for PLAINTEXT, a TLS dialer for SSL, a SASL mechanism for SASL_PLAINTEXT,
// both for SASL_SSL.
func clientTLSOpts(props map[string]string) ([]kgo.Opt, error) {
	var unsupported []string
	for k := range props {
		if strings.HasPrefix(k, "sasl.") && !slices.Contains(supportedSASL, k) || (strings.HasPrefix(k, "ssl.") && !slices.Contains(supportedSSL, k)) {
			unsupported = append(unsupported, k)
		}
	}
	if len(unsupported) > 0 {
		slices.Sort(unsupported)
		return nil, usageErrorf("--command-config: %s: not read by stele (of sasl.*, only %s; of ssl.*, only %s)", strings.Join(unsupported, ", "), strings.Join(supportedSASL, ", "), strings.Join(supportedSSL, ", "))
	}
	var opts []kgo.Opt
	p := strings.ToUpper(props["security.protocol"])
	switch p {
	case "", "PLAINTEXT", "SSL":
		for _, k := range supportedSASL {
			if _, set := props[k]; set {
				return nil, usageErrorf("--command-config: %s is set but security.protocol is %s: SASL needs SASL_PLAINTEXT or SASL_SSL", k, cmp.Or(p, "PLAINTEXT"))
			}
		}
	case "SASL_PLAINTEXT", "SASL_SSL":
		m, err := clientSASL(props)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	default:
		return nil, usageErrorf("--command-config: security.protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", props["security.protocol"])
	}
	if p != "SSL" && p != "SASL_SSL" {
		return opts, nil
	}
	cfg, err := clientTLSConfig(props)
	if err != nil {
		return nil, err
	}
	return append(opts, kgo.DialTLSConfig(cfg)), nil
}

// clientTLSConfig is the TLS configuration of the ssl.* properties: the
// CA servers are verified against (the system's without one), the client
// certificate for mutual TLS, and whether host names are checked.
func clientTLSConfig(props map[string]string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	ca := props["ssl.ca.location"]
	if ts := props["ssl.truststore.location"]; ts != "" {
		if t := props["ssl.truststore.type"]; !strings.EqualFold(t, "PEM") {
			return nil, usageErrorf("--command-config: ssl.truststore.location needs ssl.truststore.type=PEM (JKS and PKCS12 stores are not read); or give ssl.ca.location")
		}
		ca = ts
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--command-config: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--command-config: %s holds no PEM certificate", ca)
		}
	}
	certFile, keyFile := props["ssl.certificate.location"], props["ssl.key.location"]
	if ks := props["ssl.keystore.location"]; ks != "" {
		if t := props["ssl.keystore.type"]; !strings.EqualFold(t, "PEM") {
			return nil, usageErrorf("--command-config: ssl.keystore.location needs ssl.keystore.type=PEM (a file with the certificate chain and its key); or give ssl.certificate.location and ssl.key.location")
		}
		certFile, keyFile = ks, ks
	}
	if (certFile == "") != (keyFile == "") {
		return nil, usageErrorf("--command-config: ssl.certificate.location and ssl.key.location go together")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			// crypto/tls may quote what it could not parse: name the files.
			return nil, fmt.Errorf("--command-config: %s and %s do not load as a PEM certificate and its unencrypted key", certFile, keyFile)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	switch alg := strings.ToLower(props["ssl.endpoint.identification.algorithm"]); alg {
	case "https":
	case "":
		if _, set := props["ssl.endpoint.identification.algorithm"]; set {
			// Kafka's empty value: check the chain, not the host name.
			cfg.InsecureSkipVerify = true
			cfg.VerifyPeerCertificate = verifyChainOnly(cfg.RootCAs)
		}
	default:
		return nil, usageErrorf("--command-config: ssl.endpoint.identification.algorithm %q: want https or empty", alg)
	}
	return cfg, nil
}

// clientSASL is the SASL mechanism the properties name: sasl.mechanism
// (the Java client's; librdkafka's sasl.mechanisms too) PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512, with librdkafka's sasl.username and
// sasl.password or the Java client's sasl.jaas.config (a PlainLoginModule
// or ScramLoginModule with username and password options).
func clientSASL(props map[string]string) (sasl.Mechanism, error) {
	mech := strings.ToUpper(cmp.Or(props["sasl.mechanism"], props["sasl.mechanisms"], "GSSAPI"))
	user, pass, err := clientCredentials(props)
	if err != nil {
		return nil, err
	}
	switch mech {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, usageErrorf("--command-config: sasl.mechanism %s: stele speaks PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512", mech)
}

// clientCredentials are the SASL user name and password of the
// properties: librdkafka's sasl.username and sasl.password, or the Java
// client's sasl.jaas.config.
func clientCredentials(props map[string]string) (user, pass string, err error) {
	mech := strings.ToUpper(cmp.Or(props["sasl.mechanism"], props["sasl.mechanisms"], "GSSAPI"))
	user, pass = props["sasl.username"], props["sasl.password"]
	if jaas := props["sasl.jaas.config"]; jaas != "" {
		u, p, err := parseJAAS(jaas)
		if err != nil {
			return "", "", usageErrorf("--command-config: sasl.jaas.config: %v", err)
		}
		user, pass = cmp.Or(user, u), cmp.Or(pass, p)
	}
	if user == "" || pass == "" {
		return "", "", usageErrorf("--command-config: %s needs a user name and a password: sasl.username and sasl.password, or sasl.jaas.config", mech)
	}
	return user, pass, nil
}

// parseJAAS reads the username and password options of a JAAS login
// module configuration: `<class> required username="u" password="p";`.
func parseJAAS(s string) (user, pass string, err error) {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), ";"))
	class, rest, ok := strings.Cut(s, " ")
	if !ok || !strings.HasSuffix(class, "LoginModule") {
		return "", "", fmt.Errorf("want <LoginModule class> required username=\"...\" password=\"...\";")
	}
	rest = strings.TrimSpace(rest)
	for _, flag := range []string{"required", "requisite", "sufficient", "optional"} {
		if strings.HasPrefix(rest, flag) {
			rest = strings.TrimSpace(rest[len(flag):])
			break
		}
	}
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			return "", "", fmt.Errorf("an option without a value")
		}
		key, after = strings.TrimSpace(key), strings.TrimSpace(after)
		var val string
		if strings.HasPrefix(after, `"`) {
			end := strings.Index(after[1:], `"`)
			if end < 0 {
				return "", "", fmt.Errorf("option %s: an unterminated quote", key)
			}
			val, rest = after[1:1+end], strings.TrimSpace(after[2+end:])
		} else {
			val, rest, _ = strings.Cut(after, " ")
			rest = strings.TrimSpace(rest)
		}
		switch key {
		case "username":
			user = val
		case "password":
			pass = val
		}
	}
	return user, pass, nil
}

// verifyChainOnly checks a server's certificate chain against roots (the
// system's when nil) without its host name, as Kafka clients do with
// ssl.endpoint.identification.algorithm empty.
func verifyChainOnly(roots *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return fmt.Errorf("the broker presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("the broker's certificate does not parse: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
		return err
	}
}
