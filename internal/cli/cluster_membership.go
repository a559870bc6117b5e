package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/cometbft/cometbft/types"
	"github.com/spf13/cobra"

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
batches; it keeps applying the chain and serving reads, leads partitions
while it says it has caught up (from app version 10), as every replica
does, and 'stele cluster promote' makes it a validator
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
--power (default: its power in the genesis, or for a broker added since,
the power every genesis validator has), making a replica a validator
again; CometBFT counts it from two heights after the change. Votes add up
as for 'stele cluster demote'. A key voted out for misbehavior is never
promoted: it needs a new key. Promote a replica that has caught up: until
it signs, the validators must hold more than 2/3 of the power without it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, g, args[0], true) },
	}
	o.flags(cmd)
	cmd.Flags().Int64Var(&o.power, "power", 0, "the voting power to give it (default: its genesis power, or the genesis validators' for a broker added since)")
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
	target, err := brokerStatus(ctx, g, addr, id)
	if err != nil {
		return err
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
	if o.adminKey == "" && o.dir == "" && len(o.keys) == 0 {
		return usageErrorf("give --dir CLUSTERDIR or --key FILE: a membership change is signed by validators (or --admin-key)")
	}
	req := httpapi.MembershipRequest{ChainID: mv.ChainID, Epoch: mv.Epoch, Validator: strings.ToLower(target.Address), Power: power, Remove: o.remove}
	before := mv.Epoch
	if err := (membershipSigner{dir: o.dir, keys: o.keys, adminKey: o.adminKey}).submit(ctx, g, addr, &req, &mv); err != nil {
		return err
	}
	return printChangeResult(cmd.OutOrStdout(), g, mv, before, membershipWhat(id, power, o.remove), req)
}

// brokerStatus is broker id's row of GET /v1/cluster, asked of the broker
// at addr.
func brokerStatus(ctx context.Context, g *globalOptions, addr string, id int64) (*httpapi.ValidatorView, error) {
	var st httpapi.ClusterStatus
	if err := jsonRequest(ctx, g, http.MethodGet, httpBase(addr)+"/v1/cluster", nil, &st); err != nil {
		return nil, fmt.Errorf("GET %s/v1/cluster: %w", addr, err)
	}
	for i, v := range st.Validators {
		if v.NodeID != nil && int64(*v.NodeID) == id {
			return &st.Validators[i], nil
		}
	}
	return nil, fmt.Errorf("broker %d is not in the cluster (stele cluster status lists the brokers)", id)
}

// membershipWhat says what a demote, promote or remove does to broker id.
func membershipWhat(id, power int64, remove bool) string {
	switch {
	case remove:
		return fmt.Sprintf("broker %d removed from the cluster", id)
	case power > 0:
		return fmt.Sprintf("broker %d a validator of power %d", id, power)
	}
	return fmt.Sprintf("broker %d a replica (power 0)", id)
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
	same := int64(0)
	for i, v := range doc.Validators {
		if strings.EqualFold(v.Address.String(), validator) {
			return v.Power, nil
		}
		if i == 0 || v.Power == same {
			same = v.Power
		} else {
			same = -1
		}
	}
	if same > 0 {
		return same, nil // a broker added later: the power every genesis validator has
	}
	return 0, fmt.Errorf("validator %s is not in the genesis and the genesis validators' powers differ: give --power", validator)
}

func membershipRequest(ctx context.Context, g *globalOptions, method, addr string, body, out any) error {
	if err := jsonRequest(ctx, g, method, httpBase(addr)+"/v1/cluster/membership", body, out); err != nil {
		return fmt.Errorf("%s %s/v1/cluster/membership: %w", method, addr, err)
	}
	return nil
}
