package cli

// The client of the brokers' HTTP APIs (`--http`): a plain host:port is
// reached over http, an https:// one over TLS with --command-config's
// ssl.* files (its CA, and its certificate for mutual TLS); the SASL user
// and password of --command-config go along as HTTP Basic credentials —
// over https, or over http when security.protocol is SASL_PLAINTEXT (the
// user chose to send them in the clear already). docs/security.md, "The
// HTTP API".

import (
	"net/http"
	"strings"
	"time"
)

// httpBase is the base URL of a --http value: as given when it names its
// scheme, else http://.
func httpBase(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimSuffix(addr, "/")
	}
	return "http://" + addr
}

// httpClient returns the client for the HTTP APIs, with timeout (0: none).
func (g *globalOptions) httpClient(timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	cl := &http.Client{Timeout: timeout, Transport: tr}
	if g.commandConfig == "" {
		return cl, nil
	}
	props, err := readProperties(g.commandConfig)
	if err != nil {
		return nil, usageError{err}
	}
	if _, err := clientTLSOpts(props); err != nil { // checks every property
		return nil, err
	}
	if tr.TLSClientConfig, err = clientTLSConfig(props); err != nil {
		return nil, err
	}
	proto := strings.ToUpper(props["security.protocol"])
	if proto == "SASL_PLAINTEXT" || proto == "SASL_SSL" {
		user, pass, err := clientCredentials(props)
		if err != nil {
			return nil, err
		}
		cl.Transport = basicAuth{next: tr, user: user, pass: pass, plaintext: proto == "SASL_PLAINTEXT"}
	}
	return cl, nil
}

// basicAuth adds Basic credentials to requests over https (and over http
// when plaintext).
type basicAuth struct {
	next       http.RoundTripper
	user, pass string
	plaintext  bool
}

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" || b.plaintext {
		r = r.Clone(r.Context())
		r.SetBasicAuth(b.user, b.pass)
	}
	return b.next.RoundTrip(r)
}
