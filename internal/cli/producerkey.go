package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/pkg/proof"
)

// A producer key file holds the ed25519 seed, base64, on one line.

func readProducerKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("producer key: %w", err)
	}
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("producer key %s: not a base64 ed25519 seed of %d bytes (stele producer-key generate writes one)", path, ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func newProducerKeyCmd(g *globalOptions) *cobra.Command {
	var out string
	gen := &cobra.Command{
		Use:   "generate --out FILE",
		Short: "Make a new ed25519 producer key; print its public key",
		Long: `Write a new ed25519 producer key to FILE (mode 0600; it must not exist) and print
its public key (base64). Register it with stele producer-key register.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageErrorf("--out FILE is required")
			}
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("producer key: %w", err)
			}
			if _, err := fmt.Fprintln(f, base64.StdEncoding.EncodeToString(priv.Seed())); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(pub))
			return err
		},
	}
	gen.Flags().StringVar(&out, "out", "", "the file to write the key to")

	var httpAddr, key, endorse string
	reg := &cobra.Command{
		Use:   "register PRINCIPAL --key FILE [--endorse-with OLDFILE]",
		Short: "Register a producer key for a principal, or rotate it",
		Long: `Register the key in --key for PRINCIPAL through a broker's HTTP API (--http):
the key signs the registration (its holder has it). The first registration of
a name binds it; to replace a key, --endorse-with the current key's file. The
brokers then verify every record signed for PRINCIPAL against it.`,
		Args: exactArgs("PRINCIPAL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			priv, err := readProducerKey(key)
			if err != nil {
				return err
			}
			pub := priv.Public().(ed25519.PublicKey)
			msg := proof.RegistrationMessage(args[0], pub)
			body := map[string][]byte{"public_key": pub, "proof": ed25519.Sign(priv, msg)}
			if endorse != "" {
				old, err := readProducerKey(endorse)
				if err != nil {
					return err
				}
				body["endorsement"] = ed25519.Sign(old, msg)
			}
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			var res struct {
				Height int64 `json:"height"`
			}
			if err := producerKeyRequest(cmd.Context(), g, "PUT", addr, args[0], body, &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered %s for %s at height %d\n", base64.StdEncoding.EncodeToString(pub), args[0], res.Height)
			return nil
		},
	}
	rf := reg.Flags()
	rf.StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	rf.StringVar(&key, "key", "", "the producer key file to register")
	rf.StringVar(&endorse, "endorse-with", "", "the principal's current key file, to rotate it")
	_ = reg.MarkFlagRequired("key")

	var showHTTP string
	show := &cobra.Command{
		Use:   "show PRINCIPAL",
		Short: "Print a principal's registered public key",
		Args:  exactArgs("PRINCIPAL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := httpAddress(cmd, showHTTP)
			if err != nil {
				return err
			}
			var res struct {
				PublicKey []byte `json:"public_key"`
			}
			if err := producerKeyRequest(cmd.Context(), g, "GET", addr, args[0], nil, &res); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(res.PublicKey))
			return err
		},
	}
	show.Flags().StringVar(&showHTTP, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")

	return newGroupCmd("producer-key", "Producer keys for signed records (docs/signed-producers.md)", gen, reg, show)
}

// producerKeyRequest sends a request to /v1/producer-keys/{principal}.
func producerKeyRequest(ctx context.Context, g *globalOptions, method, addr, principal string, body any, out any) error {
	return jsonRequest(ctx, g, method, httpBase(addr)+"/v1/producer-keys/"+url.PathEscape(principal), body, out)
}

// jsonRequest sends body (nil: none) as JSON to url and decodes a 2xx
// answer into out; another answer is an error carrying the broker's
// "error" text, or the status (an *httpStatusError).
func jsonRequest(ctx context.Context, g *globalOptions, method, url string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	return doJSON(g, req, out)
}

// doJSON sends req and decodes its JSON answer into out, or answers its
// refusal as an httpStatusError.
func doJSON(g *globalOptions, req *http.Request, out any) error {
	cl, err := g.httpClient(0)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := resp.Status
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &httpStatusError{Status: resp.StatusCode, Message: msg}
	}
	return json.Unmarshal(data, out)
}

// httpStatusError is an HTTP API's refusal: its status and its "error"
// text.
type httpStatusError struct {
	Status  int
	Message string
}

func (e *httpStatusError) Error() string { return e.Message }
