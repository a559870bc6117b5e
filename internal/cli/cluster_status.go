package cli

// `stele cluster status` (docs/cluster.md, "Cluster status"): every
// broker of the chain with its role, voting power, the last height its
// signature is in and whether that is recent enough for it to lead
// partitions, from a broker's GET /v1/cluster. Every broker answers the
// same for the brokers (the chain's record); the height and peers are the
// answering broker's.

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/httpapi"
)

func newClusterStatusCmd(g *globalOptions) *cobra.Command {
	var httpFlag string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the cluster's brokers: role, voting power, last signed height, whether each is signing",
		Long: `List every broker of the cluster as the chain records it: its node id,
its role (validator: it votes; replica: added or demoted, it follows the
chain and serves reads; removed: taken out, voted out for misbehavior, or
a key rotated out), its voting power, the last height whose commit
carries its signature (a replica's: the height its last statement that it
has caught up named) and whether that commit (or statement) is within the
live window (10 s of block time) of the last block, which is what makes a
broker lead partitions in Metadata. A broker that is down or cut off shows
signing "no" once the window has passed. Asks one broker's HTTP API
(GET /v1/cluster, --http); the table is the same from every broker, the
height above it is the answering broker's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := httpAddress(cmd, httpFlag)
			if err != nil {
				return err
			}
			var st httpapi.ClusterStatus
			if err := jsonRequest(cmd.Context(), g, http.MethodGet, httpBase(addr)+"/v1/cluster", nil, &st); err != nil {
				return fmt.Errorf("GET %s/v1/cluster: %w", addr, err)
			}
			return printClusterStatus(cmd.OutOrStdout(), g, st)
		},
	}
	cmd.Flags().StringVar(&httpFlag, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func printClusterStatus(w io.Writer, g *globalOptions, st httpapi.ClusterStatus) error {
	if g.jsonOutput() {
		return writeJSON(w, st)
	}
	fmt.Fprintf(w, "chain %s at height %d (app version %d), as broker %d sees it\n", st.ChainID, st.Height, st.AppVersion, st.NodeID)
	if len(st.Validators) == 0 {
		fmt.Fprintln(w, "no validators known yet: the broker is still starting")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "BROKER\tROLE\tPOWER\tHEIGHT\tSIGNING\tLAST SIGNED\tKAFKA\tVALIDATOR")
	signing, power, total, voting := 0, int64(0), int64(0), 0
	var removed []httpapi.ValidatorView
	for _, v := range st.Validators {
		if v.Removed != nil {
			removed = append(removed, v)
		}
		if v.Role == httpapi.RoleValidator {
			voting++
		}
		id, yes := "-", "no"
		if v.NodeID != nil {
			id = strconv.Itoa(int(*v.NodeID))
		}
		if v.Signing {
			yes = "yes"
			if v.Role == httpapi.RoleValidator {
				signing++
				power += v.Power
			}
		}
		total += v.Power
		last := "-"
		if v.LastSignedHeight > 0 {
			last = strconv.FormatInt(v.LastSignedHeight, 10)
		}
		kafkaAddr := v.Kafka
		if kafkaAddr == "" {
			kafkaAddr = "-"
		}
		height := "-"
		if v.Height != nil {
			height = strconv.FormatInt(*v.Height, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", id, v.Role, v.Power, height, yes, last, kafkaAddr, v.Address)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d of %d validators signing, %d of %d voting power (more than 2/3 commits blocks)\n", signing, voting, power, total)
	for _, v := range removed {
		switch {
		case v.Removed.Reason == "key-rotated":
			fmt.Fprintf(w, "validator %s replaced by its broker's new key at height %d\n", v.Address, v.Removed.Height)
			continue
		case v.Removed.EvidenceHeight == 0:
			fmt.Fprintf(w, "validator %s removed from the cluster at height %d\n", v.Address, v.Removed.Height)
			continue
		}
		fmt.Fprintf(w, "validator %s voted out at height %d: %s at height %d\n", v.Address, v.Removed.Height, v.Removed.Reason, v.Removed.EvidenceHeight)
	}
	return nil
}
