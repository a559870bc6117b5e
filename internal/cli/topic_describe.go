package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// partitionDescribed is the JSON form of one partition in `topic describe`.
// Offsets are -1 when the broker did not report them.
type partitionDescribed struct {
	Partition       int32   `json:"partition"`
	Leader          int32   `json:"leader"`
	LeaderEpoch     int32   `json:"leader_epoch"`
	Replicas        []int32 `json:"replicas"`
	ISR             []int32 `json:"isr"`
	OfflineReplicas []int32 `json:"offline_replicas"`
	LogStartOffset  int64   `json:"log_start_offset"`
	LogEndOffset    int64   `json:"log_end_offset"`
	Error           string  `json:"error,omitempty"`
}

// topicDescribed is the JSON form of one topic in `topic describe`. Configs
// holds only the topic's overrides (source DYNAMIC_TOPIC_CONFIG); a
// sensitive value is null.
type topicDescribed struct {
	Topic             string               `json:"topic"`
	ID                string               `json:"id,omitempty"`
	Internal          bool                 `json:"internal"`
	ReplicationFactor int                  `json:"replication_factor"`
	Partitions        []partitionDescribed `json:"partitions"`
	Configs           map[string]*string   `json:"configs"`
}

func newTopicDescribeCmd(g *globalOptions) *cobra.Command {
	var internal bool
	c := &cobra.Command{
		Use:   "describe [NAME...]",
		Short: "Describe topics: partitions, leaders, replicas, ISR, offsets, config overrides",
		Long: `Describe topics (kafka-topics.sh --describe): for each partition its leader,
replicas, in-sync replicas and log start/end offsets, and the topic's config
overrides. With no NAME, every topic is described.`,
		Example: `  stele topic describe orders
  stele topic describe --output json`,
		RunE: func(cmd *cobra.Command, names []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			out, errs := describeTopics(ctx, adm, uniqueSorted(names), internal)
			if g.jsonOutput() {
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else if err := printTopicsDescribed(cmd.OutOrStdout(), out); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVar(&internal, "internal", false, "with no NAME, include internal topics")
	return c
}

// describeTopics gathers what `topic describe` shows. It returns the topics
// it could describe and one error per topic it could not (or one error for
// the whole request).
func describeTopics(ctx context.Context, adm *kadm.Client, names []string, internal bool) ([]topicDescribed, []error) {
	list := adm.ListTopics
	if internal && len(names) == 0 {
		list = adm.ListTopicsWithInternal
	}
	tds, err := list(ctx, names...)
	if err != nil {
		return []topicDescribed{}, []error{fmt.Errorf("describe topics: %w", err)}
	}
	var (
		errs []error
		good []string
	)
	for _, name := range names {
		if _, ok := tds[name]; !ok {
			errs = append(errs, fmt.Errorf("describe topic %q: the broker did not answer for this topic", name))
		}
	}
	for _, td := range tds.Sorted() {
		switch {
		case td.Err == nil:
			good = append(good, td.Topic)
		case isUnknownTopic(td.Err):
			errs = append(errs, topicNotFoundError{td.Topic})
		default:
			errs = append(errs, brokerError(fmt.Sprintf("describe topic %q", td.Topic), td.Err, ""))
		}
	}
	out := []topicDescribed{}
	if len(good) == 0 {
		return out, errs
	}

	starts, err := adm.ListStartOffsets(ctx, good...)
	if err := partialOK(err); err != nil {
		return out, append(errs, fmt.Errorf("list log start offsets: %w", err))
	}
	ends, err := adm.ListEndOffsets(ctx, good...)
	if err := partialOK(err); err != nil {
		return out, append(errs, fmt.Errorf("list log end offsets: %w", err))
	}
	configs, err := adm.DescribeTopicConfigs(ctx, good...)
	if err := partialOK(err); err != nil {
		return out, append(errs, fmt.Errorf("describe topic configs: %w", err))
	}

	for _, name := range good {
		td := tds[name]
		d := topicDescribed{
			Topic: name, Internal: td.IsInternal, ReplicationFactor: td.Partitions.NumReplicas(),
			Partitions: []partitionDescribed{}, Configs: map[string]*string{},
		}
		if td.ID != ([16]byte{}) {
			d.ID = td.ID.String()
		}
		for _, p := range td.Partitions.Sorted() {
			pd := partitionDescribed{
				Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: orEmpty(p.Replicas), ISR: orEmpty(p.ISR), OfflineReplicas: orEmpty(p.OfflineReplicas),
				LogStartOffset: -1, LogEndOffset: -1,
			}
			if p.Err != nil {
				pd.Error = p.Err.Error()
			}
			if o, ok := starts.Lookup(name, p.Partition); ok && o.Err == nil {
				pd.LogStartOffset = o.Offset
			}
			if o, ok := ends.Lookup(name, p.Partition); ok && o.Err == nil {
				pd.LogEndOffset = o.Offset
			}
			d.Partitions = append(d.Partitions, pd)
		}
		if rc, err := configs.On(name, nil); err == nil {
			if rc.Err != nil {
				errs = append(errs, brokerError(fmt.Sprintf("describe configs of topic %q", name), rc.Err, rc.ErrMessage))
			}
			for _, c := range rc.Configs {
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					d.Configs[c.Key] = c.Value
				}
			}
		}
		out = append(out, d)
	}
	return out, errs
}

// partialOK drops a *kadm.ShardErrors error, whose results are partial but
// usable (missing entries show as unknown), and returns any other error.
func partialOK(err error) error {
	var se *kadm.ShardErrors
	if errors.As(err, &se) && !se.AllFailed {
		return nil
	}
	return err
}

func printTopicsDescribed(w io.Writer, topics []topicDescribed) error {
	for i, d := range topics {
		if i > 0 {
			fmt.Fprintln(w)
		}
		id := d.ID
		if id == "" {
			id = "-"
		}
		fmt.Fprintf(w, "Topic: %s\tID: %s\tPartitions: %d\tReplicationFactor: %d\tInternal: %t\n",
			d.Topic, id, len(d.Partitions), d.ReplicationFactor, d.Internal)
		fmt.Fprintf(w, "Configs: %s\n", formatConfigMap(d.Configs, ","))
		tw := newTable(w)
		fmt.Fprintln(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tLOG-START\tLOG-END\tERROR")
		for _, p := range d.Partitions {
			errText := p.Error
			if errText == "" {
				errText = "-"
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Partition, p.Leader, p.LeaderEpoch,
				joinInt32s(p.Replicas), joinInt32s(p.ISR), formatOffset(p.LogStartOffset),
				formatOffset(p.LogEndOffset), errText)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// formatConfigMap formats configs as "k=v" joined by sep, sorted by key
// ("-" when empty); a nil (sensitive) value shows as "(sensitive)".
func formatConfigMap(m map[string]*string, sep string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := "(sensitive)"
		if m[k] != nil {
			v = *m[k]
		}
		parts[i] = k + "=" + v
	}
	return strings.Join(parts, sep)
}
