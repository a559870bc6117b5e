package cli

// Signed administration (docs/security.md, "Signed administration"): the
// commands that change what stele.admin.signed gates take --sign FILE
// --principal NAME; with them, each change is built as the state machine's
// command, signed with the principal's producer key for the cluster's
// chain, and submitted to a broker's HTTP API (POST /v1/admin/signed,
// --http), where every broker checks the signature and the principal's
// ACLs in the deterministic apply. Without --sign the command speaks
// Kafka, as kafka-topics.sh and its siblings do. A tenant's user signs
// with the names its tenant's clients use (sign_tenant.go).

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/pkg/proof"
)

// adminSigning is the --sign, --principal and --http flags of a command
// that can be signed, and, once ready, the key and chain it signs with.
type adminSigning struct {
	keyFile   string
	principal string
	http      string

	key   ed25519.PrivateKey
	addr  string
	chain string
	seq   uint64
}

// addSignFlags adds --sign, --principal and --http to cmd.
func addSignFlags(cmd *cobra.Command) *adminSigning {
	s := &adminSigning{}
	f := cmd.Flags()
	f.StringVar(&s.keyFile, "sign", "", "sign the change with this producer key, as required under stele.admin.signed=true, and submit it over --http (docs/security.md#signed-administration)")
	f.StringVar(&s.principal, "principal", "", "with --sign: the principal the key is registered for (its ACL principal is User:NAME)")
	f.StringVar(&s.http, "http", defaultHTTP, "with --sign: a broker's HTTP API host:port (env "+httpEnv+")")
	return s
}

// on reports whether --sign was given.
func (s *adminSigning) on() bool { return s.keyFile != "" }

// ready checks the flags, reads the key and asks the broker for the chain
// to sign for.
func (s *adminSigning) ready(cmd *cobra.Command, g *globalOptions) error {
	if (s.keyFile == "") != (s.principal == "") {
		return usageErrorf("--sign and --principal go together")
	}
	if !s.on() {
		return nil
	}
	if err := proof.ValidPrincipal(s.principal); err != nil {
		return usageErrorf("--principal: %v", err)
	}
	var err error
	if s.key, err = readProducerKey(s.keyFile); err != nil {
		return err
	}
	if s.addr, err = httpAddress(cmd, s.http); err != nil {
		return err
	}
	var st httpapi.SignedAdminStatus
	if err := jsonRequest(cmd.Context(), g, "GET", httpBase(s.addr)+"/v1/admin/signed", nil, &st); err != nil {
		return fmt.Errorf("signed administration: %w", err)
	}
	s.chain = st.ChainID
	return nil
}

// signedRefusal is a signed command the cluster refused: Err is Kafka's
// error of the state machine's code (errors.Is finds it).
type signedRefusal struct {
	Command string
	Err     error
	Message string
}

func (e *signedRefusal) Error() string {
	return fmt.Sprintf("signed %s refused: %v: %s", e.Command, e.Err, e.Message)
}

func (e *signedRefusal) Unwrap() error { return e.Err }

// submit signs c and submits it; a refusal is a *signedRefusal.
func (s *adminSigning) submit(ctx context.Context, g *globalOptions, c fsm.Command) error {
	_, err := s.submitResult(ctx, g, c)
	return err
}

// submitResult is submit, answering the broker's account of the outcome
// too (what a deletion removed).
func (s *adminSigning) submitResult(ctx context.Context, g *globalOptions, c fsm.Command) (httpapi.SignedAdminResult, error) {
	var res httpapi.SignedAdminResult
	if s.key == nil {
		return res, errors.New("signed administration: the signer is not ready (a bug: ready was not called)")
	}
	c = asTenant(signerTenant(s.principal), c) // sign_tenant.go
	b := fsm.EncodeCommand(c)
	s.seq = max(s.seq+1, uint64(time.Now().UnixNano()))
	body, err := json.Marshal(httpapi.SignedAdminRequest{Principal: s.principal, Seq: s.seq, Command: b,
		Signature: ed25519.Sign(s.key, proof.AdminMessage(s.chain, s.principal, s.seq, b))})
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", httpBase(s.addr)+"/v1/admin/signed", bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	cl, err := g.httpClient(0)
	if err != nil {
		return res, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return res, fmt.Errorf("signed %s: %w", fsm.KindName(c.Kind()), err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(data, &res) != nil {
		return res, fmt.Errorf("signed %s: %s", fsm.KindName(c.Kind()), resp.Status)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return res, nil
	case res.Code != 0:
		err := kerr.ErrorForCode(res.Code)
		if err == nil || errors.Is(err, kerr.UnknownServerError) && res.Code != kerr.UnknownServerError.Code {
			err = fmt.Errorf("error code %d", res.Code)
		}
		return res, &signedRefusal{Command: fsm.KindName(c.Kind()), Err: err, Message: res.Error}
	case res.Error != "":
		return res, fmt.Errorf("signed %s: %s", fsm.KindName(c.Kind()), res.Error)
	}
	return res, fmt.Errorf("signed %s: %s", fsm.KindName(c.Kind()), resp.Status)
}
