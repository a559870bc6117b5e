package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/pkg/proof"
)

// stateVerify is what `stele verify --group/--end/--config` proves, chosen
// by its flags; run proves it and prints what was proven.
type stateVerify struct {
	group  string
	topic  string
	end    bool
	config bool
	table  bool
}

func (s *stateVerify) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&s.group, "group", "", "prove GROUP's committed offsets (of --topic, or of every topic the brokers list for it) instead of a record")
	f.StringVar(&s.topic, "topic", "", "with --group: the topic whose committed offsets to prove (every partition, committed or not)")
	f.BoolVar(&s.end, "end", false, "prove TOPIC PARTITION's log start offset and high watermark instead of a record")
	f.BoolVar(&s.config, "config", false, "prove TOPIC's partition count and configs instead of a record")
	f.BoolVar(&s.table, "table", false, "prove TOPIC KEY's value in a table topic (GET /v1/tables), or that it has none or was deleted")
}

// chosen reports whether a state proof was asked for, and checks the
// arguments it takes.
func (s *stateVerify) chosen(args []string) (bool, error) {
	n := 0
	for _, on := range []bool{s.group != "", s.end, s.config, s.table} {
		if on {
			n++
		}
	}
	switch {
	case n == 0:
		if s.topic != "" {
			return false, usageErrorf("--topic goes with --group")
		}
		return false, nil
	case n > 1:
		return true, usageErrorf("give one of --group, --end, --config and --table")
	case s.group != "" && len(args) != 0:
		return true, usageErrorf("--group takes no arguments (the topic is --topic)")
	case s.end && len(args) != 2:
		return true, usageErrorf("--end takes TOPIC PARTITION")
	case s.config && len(args) != 1:
		return true, usageErrorf("--config takes TOPIC")
	case s.table && len(args) != 2:
		return true, usageErrorf("--table takes TOPIC KEY")
	}
	return true, nil
}

// provenState is the JSON output of a state proof.
type provenState struct {
	What       string `json:"what"`
	Height     int64  `json:"height"`
	HeaderHash string `json:"signed_header_hash"`
	BlockTime  string `json:"signed_header_time"`
	Validators int    `json:"validators"`
	ChainID    string `json:"chain_id"`
	Topic      string `json:"topic,omitempty"`
	// --config
	TopicID    string            `json:"topic_id,omitempty"`
	Partitions *int32            `json:"partitions,omitempty"`
	Configs    map[string]string `json:"configs,omitempty"`
	// --end
	Partition      *int32 `json:"partition,omitempty"`
	LogStartOffset *int64 `json:"log_start_offset,omitempty"`
	HighWatermark  *int64 `json:"high_watermark,omitempty"`
	// --table: the key, what it is proven to be (value, deleted or
	// absent), its latest version and value
	Key       string `json:"key,omitempty"`
	KeyState  string `json:"state,omitempty"`
	Version   *int64 `json:"version,omitempty"`
	Timestamp *int64 `json:"timestamp,omitempty"`
	Value     []byte `json:"value,omitempty"`
	ValueHash string `json:"value_sha256,omitempty"`
	// --group
	Group   string         `json:"group,omitempty"`
	Offsets []provenOffset `json:"offsets,omitempty"`
	// Unproven is what the proof does not cover.
	Unproven string `json:"unproven,omitempty"`
}

type provenOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    *int64 `json:"offset"` // nil: proven to have no committed offset
	Metadata  string `json:"metadata,omitempty"`
}

func (s *stateVerify) run(ctx context.Context, cmd *cobra.Command, g *globalOptions, cl *proof.Client, args []string) error {
	switch {
	case s.table:
		tv, value, err := cl.ProveTable(ctx, args[0], []byte(args[1]))
		if err != nil {
			return err
		}
		out := &provenState{What: "table", Height: tv.Height, HeaderHash: fmt.Sprintf("%X", tv.HeaderHash),
			BlockTime: time.UnixMilli(tv.Time).UTC().Format(time.RFC3339Nano), Validators: tv.Validators, ChainID: cl.Trust.ChainID,
			Topic: args[0], Key: args[1], Partitions: &tv.Topic.Partitions, KeyState: "absent"}
		if tv.Found {
			l := tv.Latest
			out.Partition, out.Version, out.Timestamp = &l.Partition, &l.Offset, &l.Timestamp
			out.KeyState = "deleted"
			if !l.Deleted {
				out.KeyState, out.Value, out.ValueHash = "value", value, hex.EncodeToString(l.ValueHash[:])
				out.Unproven = "the record's headers (only its value is proven, by its SHA-256)"
			}
		}
		return printState(cmd.OutOrStdout(), g.jsonOutput(), out)
	case s.config:
		v, t, err := proveTopic(ctx, cl, args[0])
		if err != nil {
			return err
		}
		out := s.header(cl, v, "config")
		out.Topic, out.TopicID, out.Partitions, out.Configs = args[0], hex.EncodeToString(t.ID[:]), &t.Partitions, t.Configs
		return printState(cmd.OutOrStdout(), g.jsonOutput(), out)
	case s.end:
		part, err := strconv.ParseInt(args[1], 10, 32)
		if err != nil || part < 0 {
			return usageErrorf("invalid PARTITION %q: want a partition number", args[1])
		}
		v, err := cl.ProveState(ctx, proof.TopicKey(args[0]), proof.PartitionKey(args[0], int32(part)))
		if err != nil {
			return err
		}
		tv, pv := v.Values[string(proof.TopicKey(args[0]))], v.Values[string(proof.PartitionKey(args[0], int32(part)))]
		if tv == nil || pv == nil {
			return fmt.Errorf("proven: %s-%d does not exist at height %d", args[0], part, v.Height)
		}
		p, err := proof.DecodePartition(pv)
		if err != nil {
			return fmt.Errorf("the proven partition does not decode: %w", err)
		}
		out := s.header(cl, v, "end")
		p32 := int32(part)
		out.Topic, out.Partition, out.LogStartOffset, out.HighWatermark = args[0], &p32, &p.LogStartOffset, &p.HighWatermark
		return printState(cmd.OutOrStdout(), g.jsonOutput(), out)
	}
	topics := []string{s.topic}
	unproven := ""
	if s.topic == "" {
		listed, err := listGroupTopics(ctx, g, s.group)
		if err != nil {
			return err
		}
		topics = listed
		unproven = "the topics were listed by the brokers (OffsetFetch): a broker could leave one out; give --topic to prove every partition of one"
	}
	var out *provenState
	for _, topic := range topics {
		_, t, err := proveTopic(ctx, cl, topic)
		if err != nil {
			return err
		}
		keys := make([][]byte, t.Partitions)
		for p := range keys {
			keys[p] = proof.OffsetKey(s.group, topic, int32(p))
		}
		for lo := 0; lo < len(keys); lo += proof.MaxStateProofKeys {
			hi := min(lo+proof.MaxStateProofKeys, len(keys))
			v, err := cl.ProveState(ctx, keys[lo:hi]...)
			if err != nil {
				return err
			}
			if out == nil {
				out = s.header(cl, v, "group")
				out.Group, out.Unproven = s.group, unproven
			}
			for p := lo; p < hi; p++ {
				po := provenOffset{Topic: topic, Partition: int32(p)}
				if raw := v.Values[string(keys[p])]; raw != nil {
					o, err := proof.DecodeCommittedOffset(raw)
					if err != nil {
						return fmt.Errorf("the proven offset of %s-%d does not decode: %w", topic, p, err)
					}
					po.Offset, po.Metadata = &o.Offset, o.Metadata
				}
				out.Offsets = append(out.Offsets, po)
			}
		}
	}
	if out == nil {
		return fmt.Errorf("group %q has no committed offsets the brokers list; give --topic to prove a topic's partitions have none", s.group)
	}
	return printState(cmd.OutOrStdout(), g.jsonOutput(), out)
}

func (s *stateVerify) header(cl *proof.Client, v *proof.VerifiedState, what string) *provenState {
	return &provenState{What: what, Height: v.Height, HeaderHash: fmt.Sprintf("%X", v.HeaderHash),
		BlockTime: time.UnixMilli(v.Time).UTC().Format(time.RFC3339Nano), Validators: v.Validators, ChainID: cl.Trust.ChainID}
}

// proveTopic proves a topic's state; a topic proven absent is an error.
func proveTopic(ctx context.Context, cl *proof.Client, topic string) (*proof.VerifiedState, proof.Topic, error) {
	v, err := cl.ProveState(ctx, proof.TopicKey(topic))
	if err != nil {
		return nil, proof.Topic{}, err
	}
	raw := v.Values[string(proof.TopicKey(topic))]
	if raw == nil {
		return nil, proof.Topic{}, fmt.Errorf("proven: topic %q does not exist at height %d", topic, v.Height)
	}
	t, err := proof.DecodeTopic(raw)
	if err != nil {
		return nil, proof.Topic{}, fmt.Errorf("the proven topic %q does not decode: %w", topic, err)
	}
	return v, t, nil
}

// listGroupTopics asks the brokers which topics group has offsets for.
func listGroupTopics(ctx context.Context, g *globalOptions, group string) ([]string, error) {
	adm, cl, err := g.newAdmin()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	resp, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing group %q's topics: %w", group, err)
	}
	var topics []string
	for t := range resp {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	return topics, nil
}

func printState(w io.Writer, asJSON bool, s *provenState) error {
	if asJSON {
		return json.NewEncoder(w).Encode(s)
	}
	switch s.What {
	case "config":
		fmt.Fprintf(w, "verified topic %s (id %s): %d partitions\n", s.Topic, s.TopicID, *s.Partitions)
		keys := make([]string, 0, len(s.Configs))
		for k := range s.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s=%s\n", k, s.Configs[k])
		}
	case "table":
		switch s.KeyState {
		case "value":
			fmt.Fprintf(w, "verified %s key %q: value %q (sha256 %s)\n  its latest version: %s-%d offset %d, timestamp %d\n",
				s.Topic, s.Key, s.Value, s.ValueHash, s.Topic, *s.Partition, *s.Version, *s.Timestamp)
		case "deleted":
			fmt.Fprintf(w, "verified %s key %q: deleted (its latest version is a tombstone, %s-%d offset %d)\n", s.Topic, s.Key, s.Topic, *s.Partition, *s.Version)
		default:
			fmt.Fprintf(w, "verified %s key %q: no value (none of its %d partitions has a version of it)\n", s.Topic, s.Key, *s.Partitions)
		}
		if s.Unproven != "" {
			fmt.Fprintf(w, "  not proven: %s\n", s.Unproven)
		}
	case "end":
		fmt.Fprintf(w, "verified %s-%d: log start offset %d, high watermark %d\n", s.Topic, *s.Partition, *s.LogStartOffset, *s.HighWatermark)
	case "group":
		fmt.Fprintf(w, "verified group %s's committed offsets:\n", s.Group)
		for _, o := range s.Offsets {
			if o.Offset == nil {
				fmt.Fprintf(w, "  %s-%d: none\n", o.Topic, o.Partition)
			} else {
				fmt.Fprintf(w, "  %s-%d: %d\n", o.Topic, o.Partition, *o.Offset)
			}
		}
		if s.Unproven != "" {
			fmt.Fprintf(w, "  not proven: %s\n", s.Unproven)
		}
	}
	_, err := fmt.Fprintf(w, "  in the state after height %d; its app hash signed in header %s (%s)\n"+
		"  by more than 2/3 of the %d validators of chain %q\n", s.Height, s.HeaderHash, s.BlockTime, s.Validators, s.ChainID)
	return err
}
