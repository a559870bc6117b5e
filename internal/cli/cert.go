package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/listener"
)

// stele cert: a local certificate authority for TLS listeners
// (docs/security.md): `stele cert ca --out DIR` writes DIR/ca.crt and
// DIR/ca.key; `stele cert issue --ca DIR --name NAME [--dns H] [--ip A]
// --out DIR` writes DIR/NAME.crt and DIR/NAME.key, signed by it.

func newCertCmd(g *globalOptions) *cobra.Command {
	var caOut, caName string
	ca := &cobra.Command{
		Use:   "ca --out DIR",
		Short: "Make a local certificate authority: DIR/ca.crt and DIR/ca.key",
		Long: `Make a self-signed certificate authority (ECDSA P-256, valid 10 years) and write
its certificate to DIR/ca.crt and its private key to DIR/ca.key (mode 0600).
Neither file may exist. Give ca.crt to clients (ssl.ca.location) and to
brokers (--ssl-ca), keep ca.key to issue certificates with stele cert issue.`,
		Example: `  stele cert ca --out certs`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if caOut == "" {
				return usageErrorf("--out DIR is required")
			}
			p, err := listener.NewCA(caName, time.Now())
			if err != nil {
				return err
			}
			return writeCert(cmd, p, filepath.Join(caOut, listener.CACertFile), filepath.Join(caOut, listener.CAKeyFile), caName)
		},
	}
	ca.Flags().StringVar(&caOut, "out", "", "the directory to write ca.crt and ca.key to")
	ca.Flags().StringVar(&caName, "name", "Stele local CA", "the CA certificate's common name")

	var caDir, name, out string
	var dns []string
	var ips []net.IP
	issue := &cobra.Command{
		Use:   "issue --ca DIR --name NAME [--dns HOST]... [--ip ADDR]... --out DIR",
		Short: "Issue a certificate signed by a local CA: DIR/NAME.crt and DIR/NAME.key",
		Long: `Issue a certificate (ECDSA P-256, valid 2 years or until the CA expires) with
subject CN=NAME, signed by the CA in --ca DIR (stele cert ca), and write it to
--out DIR as NAME.crt and NAME.key (mode 0600). Neither file may exist.

It serves both ends of TLS: a broker's listener (--ssl-cert, --ssl-key), which
clients check against the --dns names and --ip addresses given, and a client's
certificate for mutual TLS, whose principal is User:CN=NAME (mapped by the
broker's ssl.principal.mapping.rules).`,
		Example: `  stele cert issue --ca certs --name broker0 --dns localhost --ip 127.0.0.1 --out certs
  stele cert issue --ca certs --name alice --out certs`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case caDir == "":
				return usageErrorf("--ca DIR is required (stele cert ca makes one)")
			case name == "":
				return usageErrorf("--name NAME is required")
			case out == "":
				return usageErrorf("--out DIR is required")
			case filepath.Base(name) != name || name == "." || name == "..":
				return usageErrorf("--name %q: a name, not a path (it names the files NAME.crt and NAME.key)", name)
			}
			ca, err := listener.ReadPair(filepath.Join(caDir, listener.CACertFile), filepath.Join(caDir, listener.CAKeyFile))
			if err != nil {
				return err
			}
			p, err := listener.Issue(ca, name, dns, ips, time.Now())
			if err != nil {
				return err
			}
			return writeCert(cmd, p, filepath.Join(out, name+".crt"), filepath.Join(out, name+".key"), name)
		},
	}
	issue.Flags().StringVar(&caDir, "ca", "", "the CA's directory (ca.crt and ca.key, from stele cert ca)")
	issue.Flags().StringVar(&name, "name", "", "the certificate's common name, and its files' name")
	issue.Flags().StringSliceVar(&dns, "dns", nil, "a DNS name clients reach the holder at (repeat or comma-separate)")
	issue.Flags().IPSliceVar(&ips, "ip", nil, "an IP address clients reach the holder at (repeat or comma-separate)")
	issue.Flags().StringVar(&out, "out", "", "the directory to write NAME.crt and NAME.key to")
	var revCA string
	revoke := &cobra.Command{
		Use:   "revoke --ca DIR CERT...",
		Short: "Revoke certificates of a local CA: DIR/ca.crl lists them",
		Long: `Add the certificates given (PEM files the CA in --ca DIR issued) to the CA's
revocation list, DIR/ca.crl, signed by the CA (made when absent, valid a
year; revoking again renews it). Brokers started with --ssl-crl DIR/ca.crl
refuse those certificates at the handshake, and read the file again when it
changes: no restart.`,
		Example: `  stele cert revoke --ca certs certs/alice.crt`,
		Args:    minArgs("CERT"),
		RunE: func(cmd *cobra.Command, files []string) error {
			if revCA == "" {
				return usageErrorf("--ca DIR is required")
			}
			ca, err := listener.ReadPair(filepath.Join(revCA, listener.CACertFile), filepath.Join(revCA, listener.CAKeyFile))
			if err != nil {
				return err
			}
			path := filepath.Join(revCA, listener.CRLFile)
			prev, err := os.ReadFile(path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			var certs [][]byte
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				certs = append(certs, b)
			}
			crl, err := listener.Revoke(ca, prev, certs, time.Now())
			if err != nil {
				return err
			}
			// Written whole, then renamed: a broker reloading it never
			// reads half a list.
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, crl, 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, path); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked %d certificate(s): %s\n", len(files), path)
			return err
		},
	}
	revoke.Flags().StringVar(&revCA, "ca", "", "the CA's directory (ca.crt and ca.key); its ca.crl is written there")
	return newGroupCmd("cert", "Make a local certificate authority and the certificates TLS listeners and clients use", ca, issue, revoke)
}

// writeCert writes a certificate and its key and says so.
func writeCert(cmd *cobra.Command, p listener.PEMPair, crt, key, name string) error {
	if err := listener.WritePair(p, crt, key); err != nil {
		return err
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (CN=%s, valid until %s)\n", crt, key, name, p.NotAfter.UTC().Format(time.DateOnly))
	return err
}
