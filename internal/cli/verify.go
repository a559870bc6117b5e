package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// trustOptions are the flags that say what a verifying command trusts.
type trustOptions struct {
	httpAddr string
	genesis  string
}

func (o *trustOptions) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&o.httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port, for proofs (env "+httpEnv+")")
	f.StringVar(&o.genesis, "genesis", "", "the cluster's genesis.json to trust (default: the one pinned on first use in the user's config directory)")
}

// client returns a proof client for the broker at --http that trusts
// --genesis, or else the genesis pinned for the broker's chain, pinning it
// (with a warning on stderr) on first use.
func (o *trustOptions) client(ctx context.Context, cmd *cobra.Command, g *globalOptions) (*proof.Client, error) {
	timeout := g.timeout
	addr, err := httpAddress(cmd, o.httpAddr)
	if err != nil {
		return nil, err
	}
	hc, err := g.httpClient(30 * time.Second)
	if err != nil {
		return nil, err
	}
	c := &proof.Client{HTTP: httpBase(addr), HC: hc}
	if o.genesis != "" {
		if c.Trust, err = proof.TrustGenesisFile(o.genesis); err != nil {
			return nil, err
		}
		return c, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return nil, fmt.Errorf("no --genesis and no user config directory to pin one in: %w", err)
	}
	dir = filepath.Join(dir, "stele", "trust")
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t, pinned, err := c.PinTrust(pctx, dir)
	if err != nil {
		return nil, err
	}
	if pinned {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: trusting the validators of chain %q as broker %s describes them, on first use;\n"+
			"         pinned in %s. Pass --genesis FILE to trust a copy you got another way.\n",
			t.ChainID, addr, filepath.Join(dir, t.ChainID+".json"))
	}
	c.Trust = t
	return c, nil
}

// verifiedRecord is `stele verify`'s JSON output.
type verifiedRecord struct {
	Topic      string            `json:"topic"`
	TopicID    string            `json:"topic_id"`
	Partition  int32             `json:"partition"`
	Offset     int64             `json:"offset"`
	Timestamp  int64             `json:"timestamp"`
	Key        *string           `json:"key"`
	Value      *string           `json:"value"`
	Headers    map[string]string `json:"headers,omitempty"`
	BaseOffset int64             `json:"batch_base_offset"`
	LastOffset int64             `json:"batch_last_offset"`
	Height     int64             `json:"height"`
	HeaderHash string            `json:"signed_header_hash"`
	BlockTime  string            `json:"signed_header_time"`
	Validators int               `json:"validators"`
	ChainID    string            `json:"chain_id"`
}

func newVerifyCmd(g *globalOptions) *cobra.Command {
	var (
		o trustOptions
		s stateVerify
	)
	recordArgs := exactArgs("TOPIC", "PARTITION", "OFFSET")
	c := &cobra.Command{
		Use:   "verify TOPIC PARTITION OFFSET | --group GROUP [--topic TOPIC] | --end TOPIC PARTITION | --config TOPIC",
		Short: "Prove a record, committed offsets, a partition's offsets or a topic's configs against the validators' signatures, trusting no broker",
		Long: `Fetch the proof of the record at TOPIC PARTITION OFFSET from a broker's HTTP
API (--http) and check it without trusting that broker: the batch holding the
record must be under the app hash of the block that appended it, and that app
hash signed by more than two thirds of the validators' voting power in the
header of the next height. The validators are those of --genesis FILE (the
cluster's config/genesis.json), or else of the genesis pinned on first use in
the user's config directory (stele/trust/<chain id>.json), with a warning.

With --group, --end or --config it proves state instead, from the
authenticated state the app hash commits to: GROUP's committed offsets of
every partition of --topic (a partition without one is proven to have none;
without --topic, of the topics the brokers at --brokers list for the group,
a list that is not itself proven), TOPIC PARTITION's log start offset and
high watermark, or TOPIC's partition count and configs.

It prints what was proven and where; anything unproven is an error (exit 1).
docs/trust.md says what a proof guarantees and what it does not.`,
		Example: `  stele verify orders 0 1500 --genesis cluster/node0/cometbft/config/genesis.json
  stele verify orders 0 1500 --http 10.0.0.5:8080 --output json
  stele verify --group billing --topic orders
  stele verify --end orders 0
  stele verify --config orders`,
		Args: func(cmd *cobra.Command, args []string) error {
			if state, err := s.chosen(args); state || err != nil {
				return err
			}
			return recordArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if state, _ := s.chosen(args); state {
				ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
				defer cancel()
				cl, err := o.client(ctx, cmd, g)
				if err != nil {
					return err
				}
				return s.run(ctx, cmd, g, cl, args)
			}
			part, err := strconv.ParseInt(args[1], 10, 32)
			if err != nil || part < 0 {
				return usageErrorf("invalid PARTITION %q: want a partition number", args[1])
			}
			off, err := strconv.ParseInt(args[2], 10, 64)
			if err != nil || off < 0 {
				return usageErrorf("invalid OFFSET %q: want an offset, 0 or more", args[2])
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			cl, err := o.client(ctx, cmd, g)
			if err != nil {
				return err
			}
			v, err := cl.Prove(ctx, args[0], int32(part), off)
			if err != nil {
				return err
			}
			_, recs, err := record.Records(v.Batch)
			if err != nil {
				return fmt.Errorf("the proven batch does not decode: %w", err)
			}
			for _, r := range recs {
				if r.Offset == off {
					return printVerified(cmd.OutOrStdout(), g.jsonOutput(), cl.Trust, v, r)
				}
			}
			return errors.New("the proven batch holds no record at that offset (removed by compaction)")
		},
	}
	o.register(c)
	s.register(c)
	return c
}

func printVerified(w io.Writer, asJSON bool, t *proof.Trust, v *proof.Verified, r record.Record) error {
	out := verifiedRecord{
		Topic: v.Topic, TopicID: hex.EncodeToString(v.TopicID[:]), Partition: v.Partition,
		Offset: r.Offset, Timestamp: r.Timestamp,
		BaseOffset: v.BaseOffset, LastOffset: v.LastOffset, Height: v.Height,
		HeaderHash: fmt.Sprintf("%X", v.HeaderHash), BlockTime: time.UnixMilli(v.Time).UTC().Format(time.RFC3339Nano),
		Validators: v.Validators, ChainID: t.ChainID,
	}
	if r.Key != nil {
		k := string(r.Key)
		out.Key = &k
	}
	if r.Value != nil {
		val := string(r.Value)
		out.Value = &val
	}
	for _, h := range r.Headers {
		if out.Headers == nil {
			out.Headers = map[string]string{}
		}
		out.Headers[h.Key] = string(h.Value)
	}
	if asJSON {
		return json.NewEncoder(w).Encode(out)
	}
	show := func(s *string) string {
		if s == nil {
			return "null"
		}
		return strconv.Quote(*s)
	}
	_, err := fmt.Fprintf(w, "verified %s-%d offset %d: key %s value %s\n"+
		"  batch %d-%d, appended at height %d; its app hash signed in header %s (%s)\n"+
		"  by more than 2/3 of the %d validators of chain %q\n",
		out.Topic, out.Partition, out.Offset, show(out.Key), show(out.Value),
		out.BaseOffset, out.LastOffset, out.Height, out.HeaderHash, out.BlockTime, out.Validators, out.ChainID)
	return err
}
