package cli

// stele cluster rotate-key N (docs/cluster.md, "Rotating a broker's key"):
// on broker N's host, write its next validator key into its data
// directory (cometbft's NextKeyFile) and submit the membership change that
// replaces its key by that one, signed like every membership change. The
// broker switches keys by itself once the chain names the new one
// (internal/consensus/cometbft's rotation.go).

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/httpapi"
)

type clusterRotateOptions struct {
	clusterMembershipOptions
	data string
}

func newClusterRotateKeyCmd(g *globalOptions) *cobra.Command {
	var o clusterRotateOptions
	cmd := &cobra.Command{
		Use:   "rotate-key N (--data DATADIR | --dir CLUSTERDIR) [--key FILE... | --admin-key FILE]",
		Short: "Replace broker N's validator key by a new one, keeping its node id",
		Long: `Replace the validator key of broker N (its node id) without changing its id,
its addresses or its power. Run it on the broker's host: it writes a new
key into the broker's data directory (--data DATADIR, or CLUSTERDIR/nodeN
with --dir) as cometbft/config/priv_validator_key.next.json, then submits
the membership change that makes the chain name it (app version 9),
signed like any membership change: with the cluster administrator's key
(--admin-key), with every validator key under --dir, or with --key files;
when those hold 2/3 of the voting power or less, the printed 'stele
cluster approve CHANGE' adds other validators' votes on their hosts.
Running it again before the change is applied reuses the key written.

Once applied, the old key is out for good (listed as removed,
"key-rotated"): it signs nothing the chain counts and is never promoted
again. The running broker signs batches with the new key at once and
blocks from two heights later, when CometBFT counts the new key, and then
replaces its key files with the new key's, so a restart keeps it; nothing
needs restarting. The rotation is refused while the validators signing
without broker N could not keep a quorum (another broker down).`,
		Example: `  stele cluster rotate-key 2 --dir ./cluster
  stele cluster rotate-key 2 --data /var/lib/stele --http 10.0.0.1:9192 --admin-key ./admin.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, g, args[0]) },
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&o.data, "data", "", "broker N's data directory on this host (default: CLUSTERDIR/nodeN with --dir)")
	return cmd
}

func (o *clusterRotateOptions) run(cmd *cobra.Command, g *globalOptions, node string) error {
	id, err := strconv.ParseInt(node, 10, 32)
	if err != nil || id < 0 {
		return usageErrorf("%q: give the broker's node id (stele cluster status lists them)", node)
	}
	if o.adminKey == "" && o.dir == "" && len(o.keys) == 0 {
		return usageErrorf("give --dir CLUSTERDIR or --key FILE: a membership change is signed by validators (or --admin-key)")
	}
	data := o.data
	if data == "" {
		if o.dir == "" {
			return usageErrorf("give --data DATADIR, broker %d's data directory on this host (or --dir CLUSTERDIR)", id)
		}
		nodes, err := readClusterNodes(o.dir)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if int64(n.file.NodeID) == id {
				data = n.dir
			}
		}
		if data == "" {
			return fmt.Errorf("--dir %s holds no node directory of broker %d: give --data", o.dir, id)
		}
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
	if target.HTTP == "" {
		return fmt.Errorf("broker %d has no HTTP address in the directory: a single node has no key to rotate this way", id)
	}
	home := filepath.Join(data, "cometbft")
	_, current, err := cometbft.ValidatorKey(home)
	if err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	}
	if !strings.EqualFold(hex.EncodeToString(current[:]), target.Address) {
		return fmt.Errorf("--data %s holds validator %X, and the chain names %s for broker %d: give broker %d's data directory", data, current, target.Address, id, id)
	}
	next, err := cometbft.WriteNextKey(home)
	if err != nil {
		return err
	}
	var mv httpapi.MembershipView
	if err := membershipRequest(ctx, g, http.MethodGet, addr, nil, &mv); err != nil {
		return err
	}
	req := httpapi.MembershipRequest{ChainID: mv.ChainID, Epoch: mv.Epoch, Validator: strings.ToLower(target.Address),
		Broker: &httpapi.BrokerView{NodeID: int32(id), PubKey: hex.EncodeToString(next), Kafka: target.Kafka, HTTP: target.HTTP, Rack: target.Rack}}
	if !g.jsonOutput() {
		fmt.Fprintf(cmd.ErrOrStderr(), "broker %d's next key is %X, in %s\n", id, fsm.ValidatorAddress(next), filepath.Join(home, cometbft.NextKeyFile))
	}
	before := mv.Epoch
	if err := (membershipSigner{dir: o.dir, keys: o.keys, adminKey: o.adminKey}).submit(ctx, g, addr, &req, &mv); err != nil {
		return err
	}
	return printChangeResult(cmd.OutOrStdout(), g, mv, before, describeChange(req), req)
}

// isRotation reports whether req replaces a broker's key: its broker's key
// is not the validator it names.
func isRotation(req httpapi.MembershipRequest) bool {
	if req.Broker == nil {
		return false
	}
	pub, err := hex.DecodeString(req.Broker.PubKey)
	if err != nil {
		return false
	}
	a := fsm.ValidatorAddress(pub)
	return !strings.EqualFold(hex.EncodeToString(a[:]), req.Validator)
}
