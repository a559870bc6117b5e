package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/cometbft/cometbft/types"
	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

// stele cluster demote|promote N (docs/cluster.md, "Membership"): vote,
// with validator keys, to set broker N's voting power (0 for demote); the
// change is applied once validators holding more than 2/3 of the power
// voted for it (POST /v1/cluster/membership).

type clusterMembershipOptions struct {
	http     string
	dir      string
	keys     []string
	adminKey string
	power    int64
	remove   bool
}

func newClusterDemoteCmd(g *globalOptions) *cobra.Command {
	var o clusterMembershipOptions
	cmd := &cobra.Command{
		Use:   "demote N (--dir CLUSTERDIR | --key FILE... | --admin-key FILE)",
		Short: "Make broker N a replica: it follows the chain and serves reads, and no longer votes",
		Long: `Vote, with validator keys, to make broker N (its node id) a replica: its
voting power becomes 0, so it no longer votes, proposes or certifies
batches, and Metadata makes it lead no partition; it keeps applying the
chain and serving reads, and 'stele cluster promote' makes it a validator
again. The change is applied once validators holding more than 2/3 of the
voting power voted for it: run the command with every key at hand
(--dir signs with every node's key under a directory 'stele cluster init'
wrote), or on each validator's host with its own --key; each vote adds up
until there are enough. --admin-key signs with the cluster administrator's
key that 'stele cluster init' wrote to DIR/admin.key, which the genesis
names: that signature alone applies the change. It is refused, whoever signs, when it would leave
no validator, or when the validators signing now would not hold more than
2/3 of the power it leaves (demoting a broker while another is down).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, g, args[0], false) },
	}
	o.flags(cmd)
	return cmd
}

func newClusterRemoveCmd(g *globalOptions) *cobra.Command {
	o := clusterMembershipOptions{remove: true}
	cmd := &cobra.Command{
		Use:   "remove N (--dir CLUSTERDIR | --key FILE... | --admin-key FILE)",
		Short: "Take broker N out of the cluster for good: it stops serving",
		Long: `Vote, with validator keys (or the cluster administrator's key), to take
broker N (its node id) out of the cluster: its voting power becomes 0, it
is no longer listed in Metadata (clients move to the other brokers at
their next metadata refresh), and its stele serve stops with exit status
11 and will not start again on that data directory; its key is never
promoted again. Votes add up as for 'stele cluster demote', under the same
guards (the validators left that are signing must hold more than 2/3 of
the power).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, g, args[0], false) },
	}
	o.flags(cmd)
	return cmd
}

func newClusterPromoteCmd(g *globalOptions) *cobra.Command {
	var o clusterMembershipOptions
	cmd := &cobra.Command{
		Use:   "promote N [--power P] (--dir CLUSTERDIR | --key FILE... | --admin-key FILE)",
		Short: "Make replica N a validator again (or change a validator's voting power)",
		Long: `Vote, with validator keys, to give broker N (its node id) voting power
--power (default: its power in the genesis), making a replica a validator
again; CometBFT counts it from two heights after the change. Votes add up
as for 'stele cluster demote'. A key voted out for misbehavior is never
promoted: it needs a new key. Promote a replica that has caught up: until
it signs, the validators must hold more than 2/3 of the power without it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, g, args[0], true) },
	}
	o.flags(cmd)
	cmd.Flags().Int64Var(&o.power, "power", 0, "the voting power to give it (default: its genesis power)")
	return cmd
}

func (o *clusterMembershipOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.http, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	f.StringVar(&o.dir, "dir", "", "sign with every validator's key under this cluster directory")
	f.StringArrayVar(&o.keys, "key", nil, "sign with this validator key file (repeatable)")
	f.StringVar(&o.adminKey, "admin-key", "", "sign with the cluster administrator's key (DIR/admin.key of stele cluster init), which applies the change alone")
}

func (o *clusterMembershipOptions) run(cmd *cobra.Command, g *globalOptions, node string, promote bool) error {
	id, err := strconv.ParseInt(node, 10, 32)
	if err != nil || id < 0 {
		return usageErrorf("%q: give the broker's node id (stele cluster status lists them)", node)
	}
	addr, err := httpAddress(cmd, o.http)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	var st httpapi.ClusterStatus
	if err := jsonRequest(ctx, g, http.MethodGet, httpBase(addr)+"/v1/cluster", nil, &st); err != nil {
		return fmt.Errorf("GET %s/v1/cluster: %w", addr, err)
	}
	var target *httpapi.ValidatorView
	voters := map[string]bool{}
	for i, v := range st.Validators {
		if v.NodeID != nil && int64(*v.NodeID) == id {
			target = &st.Validators[i]
		}
		if v.Power > 0 {
			voters[strings.ToUpper(v.Address)] = true
		}
	}
	if target == nil {
		return fmt.Errorf("broker %d is not in the cluster (stele cluster status lists the brokers)", id)
	}
	power := int64(0)
	if promote {
		if power = o.power; power == 0 {
			if power, err = genesisPower(ctx, g, addr, target.Address); err != nil {
				return err
			}
		}
	}
	var mv httpapi.MembershipView
	if err := membershipRequest(ctx, g, http.MethodGet, addr, nil, &mv); err != nil {
		return err
	}
	var keys []validatorKey
	if o.adminKey == "" || o.dir != "" || len(o.keys) > 0 {
		if keys, err = validatorKeys(o.dir, o.keys, "a membership change"); err != nil {
			return err
		}
	}
	raw, err := hex.DecodeString(target.Address)
	if err != nil || len(raw) != 20 {
		return fmt.Errorf("the broker lists validator %q for broker %d: not a 20-byte address", target.Address, id)
	}
	ch := fsm.MembershipChange{Epoch: mv.Epoch, Validator: [20]byte(raw), Power: power}
	ch.Remove = o.remove
	req := httpapi.MembershipRequest{ChainID: mv.ChainID, Epoch: ch.Epoch, Validator: hex.EncodeToString(raw), Power: power, Remove: o.remove}
	for _, k := range keys {
		// Only validators vote: under --dir the replicas' keys (the
		// target's own, when it is promoted) are left out.
		if !voters[strings.ToUpper(hex.EncodeToString(k.addr[:]))] {
			continue
		}
		s := fsm.SignMembership(mv.ChainID, ch, k.addr, k.key)
		req.Signatures = append(req.Signatures, httpapi.UpgradeSignature{Validator: hex.EncodeToString(s.Validator[:]), Signature: s.Signature[:]})
	}
	if o.adminKey != "" {
		k, err := readProducerKey(o.adminKey)
		if err != nil {
			return fmt.Errorf("--admin-key: %w", err)
		}
		req.AdminSignature = ed25519.Sign(k, fsm.MembershipStatement(mv.ChainID, ch))
	}
	if len(req.Signatures) == 0 && req.AdminSignature == nil {
		return fmt.Errorf("none of the keys given is a validator's now: only validators, or the cluster administrator's key, vote for membership changes")
	}
	before := mv.Epoch
	if err := membershipRequest(ctx, g, http.MethodPost, addr, req, &mv); err != nil {
		return err
	}
	return printMembership(cmd.OutOrStdout(), g, mv, before, id, power, o.remove)
}

// genesisPower is the genesis voting power of the validator at address.
func genesisPower(ctx context.Context, g *globalOptions, addr, validator string) (int64, error) {
	var raw json.RawMessage
	if err := jsonRequest(ctx, g, http.MethodGet, httpBase(addr)+"/v1/cluster/genesis", nil, &raw); err != nil {
		return 0, fmt.Errorf("GET %s/v1/cluster/genesis: %w", addr, err)
	}
	doc, err := types.GenesisDocFromJSON(raw)
	if err != nil {
		return 0, fmt.Errorf("the broker's genesis: %w", err)
	}
	for _, v := range doc.Validators {
		if strings.EqualFold(v.Address.String(), validator) {
			return v.Power, nil
		}
	}
	return 0, fmt.Errorf("validator %s is not in the genesis: give --power", validator)
}

func membershipRequest(ctx context.Context, g *globalOptions, method, addr string, body, out any) error {
	if err := jsonRequest(ctx, g, method, httpBase(addr)+"/v1/cluster/membership", body, out); err != nil {
		return fmt.Errorf("%s %s/v1/cluster/membership: %w", method, addr, err)
	}
	return nil
}

func printMembership(w io.Writer, g *globalOptions, mv httpapi.MembershipView, before uint64, id, power int64, remove bool) error {
	if g.jsonOutput() {
		return writeJSON(w, mv)
	}
	role := "a replica (power 0)"
	switch {
	case remove:
		role = "removed from the cluster"
	case power > 0:
		role = fmt.Sprintf("a validator of power %d", power)
	}
	if mv.Epoch > before {
		fmt.Fprintf(w, "applied at height %d: broker %d is %s; CometBFT counts it from two heights later (membership epoch %d)\n", mv.Height, id, role, mv.Epoch)
		return nil
	}
	fmt.Fprintf(w, "vote recorded at height %d: broker %d to be %s once validators holding more than 2/3 of the power vote for it; votes so far:\n", mv.Height, id, role)
	for _, v := range mv.Votes {
		fmt.Fprintf(w, "  %s: validator %s to power %d (epoch %d)\n", v.Voter, v.Validator, v.Power, v.Epoch)
	}
	return nil
}
