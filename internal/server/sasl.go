package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/kafka"
	"github.com/stele-io/stele/internal/listener"
	"github.com/stele-io/stele/internal/sasl"
)

// DefaultSASLMechanisms are the mechanisms a SASL listener enables when
// --sasl-enabled-mechanisms is not given: every one Stele serves (Kafka's
// own default, GSSAPI, is not one).
var DefaultSASLMechanisms = []string{sasl.Plain, sasl.ScramSHA256, sasl.ScramSHA512}

// servedMechanisms are the SASL mechanisms Stele serves.
var servedMechanisms = []string{sasl.Plain, sasl.ScramSHA256, sasl.ScramSHA512, sasl.OAuthBearer}

// maxPasswordFile bounds an --admin-password-file.
const maxPasswordFile = 1024

// ReadPasswordFile reads a password from a file: its bytes without one
// trailing newline (LF or CRLF). An empty password is refused. Errors name
// the file, never its contents.
func ReadPasswordFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxPasswordFile {
		return nil, fmt.Errorf("%s: %d bytes; a password file holds at most %d", path, st.Size(), maxPasswordFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = []byte(strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: the password is empty", path)
	}
	if strings.ContainsAny(string(b), "\r\n") {
		return nil, fmt.Errorf("%s: the password holds a line break (only one, at its end, is dropped)", path)
	}
	return b, nil
}

// ScramCredentials makes a user's credentials for password, one per SCRAM
// mechanism (mechanisms empty: both), with fresh salts and Kafka's default
// 4096 iterations.
func ScramCredentials(password []byte, mechanisms ...sasl.ScramMechanism) ([]sasl.Credential, error) {
	if len(mechanisms) == 0 {
		mechanisms = sasl.ScramMechanisms
	}
	var out []sasl.Credential
	for _, m := range mechanisms {
		c, err := sasl.NewCredential(m, password, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// validateSASL checks the SASL settings against the listeners.
func (c Config) validateSASL(ls []listener.Listener) error {
	for _, m := range c.SASLMechanisms {
		if !slices.Contains(servedMechanisms, m) {
			return fmt.Errorf("stele/server: --sasl-enabled-mechanisms: %q is not served (Stele serves %s)", m, strings.Join(servedMechanisms, ", "))
		}
	}
	for _, p := range c.SuperUsers {
		if !strings.HasPrefix(p, "User:") || len(p) == len("User:") {
			return fmt.Errorf("stele/server: --super-users: %q is not a principal (User:name)", p)
		}
	}
	if slices.Contains(c.SASLMechanisms, sasl.OAuthBearer) && !c.OAuth.Configured() {
		return fmt.Errorf("stele/server: --sasl-enabled-mechanisms: OAUTHBEARER needs --sasl-oauthbearer-jwks-file or --sasl-oauthbearer-jwks-url (the keys tokens are signed with)")
	}
	if c.OAuth.Configured() {
		if _, err := sasl.NewOAuthValidator(c.OAuth); err != nil {
			flag := "--sasl-oauthbearer-jwks-file"
			if c.OAuth.JWKSURL != "" {
				flag = "--sasl-oauthbearer-jwks-url"
			}
			return fmt.Errorf("stele/server: %s: %w", flag, err)
		}
	}
	if c.MaxReauth < 0 {
		return fmt.Errorf("stele/server: --connections-max-reauth-ms must be at least 0")
	}
	if c.AdminPasswordFile != "" {
		if _, err := ReadPasswordFile(c.AdminPasswordFile); err != nil {
			return fmt.Errorf("stele/server: --admin-password-file: %w", err)
		}
	}
	for _, l := range ls {
		if l.Protocol.SASL() && len(c.SASLMechanisms) == 0 {
			return fmt.Errorf("stele/server: --listeners: %s: --sasl-enabled-mechanisms is empty", l)
		}
	}
	return nil
}

// authenticated reports whether a listener authenticates its clients:
// SASL, or TLS requiring client certificates.
func (c Config) authenticated(ls []listener.Listener) bool {
	for _, l := range ls {
		if l.Protocol.SASL() || l.Protocol.TLS() && c.TLS.ClientAuth == listener.ClientAuthRequired {
			return true
		}
	}
	return false
}

// allowIfNoACL is allow.everyone.if.no.acl.found: as set, else false
// when a listener authenticates its clients.
func (c Config) allowIfNoACL(ls []listener.Listener) bool {
	if c.AllowEveryoneIfNoACL != nil {
		return *c.AllowEveryoneIfNoACL
	}
	return !c.authenticated(ls)
}

// httpSecurity is how the HTTP API authenticates and authorizes: as the
// Kafka listeners do (the same users, super users, ACLs and
// allow.everyone.if.no.acl.found), with Basic credentials taken in the
// clear only when a Kafka listener takes SASL in the clear.
func (c Config) httpSecurity(ls []listener.Listener) (*httpapi.Security, error) {
	pm, err := listener.ParsePrincipalMappingRules(c.PrincipalMappingRules)
	if err != nil {
		return nil, fmt.Errorf("stele/server: %w", err)
	}
	sec := &httpapi.Security{Principals: pm, SuperUsers: c.SuperUsers, AllowIfNoACL: c.allowIfNoACL(ls), FailureDelay: 100 * time.Millisecond}
	for _, l := range ls {
		sec.BasicOverPlaintext = sec.BasicOverPlaintext || l.Protocol == listener.SASLPlaintext
	}
	return sec, nil
}

// bootstrapAdmin creates the admin user from --admin-password-file when the
// state has none, retrying until it is committed, found, or the node
// stops. Every broker of a cluster started with the file may submit it;
// the command applies only to a user that does not exist, so the first
// committed wins and the others change nothing.
func (n *Node) bootstrapAdmin() {
	defer n.bg.Done()
	for attempt := 0; ; attempt++ {
		err := n.createAdmin()
		if err == nil {
			return
		}
		if attempt%10 == 0 {
			n.log.Warn("creating the admin user", "err", err)
		}
		select {
		case <-n.done:
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func (n *Node) createAdmin() error {
	if n.broker.Users().Exists(kafka.AdminUser) {
		return nil
	}
	if v := n.fsm.AppVersion(); v < fsm.SecurityVersion {
		n.log.Warn("--admin-password-file: this chain's app version has no users; upgrade it (stele cluster upgrade --version 3) and restart", "app_version", v)
		return nil
	}
	pw, err := ReadPasswordFile(n.cfg.AdminPasswordFile)
	if err != nil {
		return err
	}
	creds, err := ScramCredentials(pw)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-n.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	r, err := n.broker.SubmitOne(ctx, fsm.AlterScramCredentials{User: kafka.AdminUser, IfAbsent: true, Upserts: creds})
	switch {
	case err != nil:
		return err
	case r.Code == 0:
		n.log.Info("created the admin user", "user", kafka.AdminUser)
		return nil
	case r.Code == kerr.DuplicateResource.Code:
		return nil // another broker's came first
	}
	return errors.New(r.Message)
}
