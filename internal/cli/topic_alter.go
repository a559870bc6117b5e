package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

// topicAltered is the JSON form of `topic alter`.
type topicAltered struct {
	Topic      string            `json:"topic"`
	Partitions int               `json:"partitions,omitempty"`
	Set        map[string]string `json:"set,omitempty"`
	Deleted    []string          `json:"deleted,omitempty"`
}

func newTopicAlterCmd(g *globalOptions) *cobra.Command {
	var (
		partitions int
		sets       []string
		deletes    []string
	)
	c := &cobra.Command{
		Use:   "alter NAME",
		Short: "Add partitions or change config overrides of a topic",
		Long: `Alter a topic (kafka-topics.sh --alter): --partitions sets the new total number
of partitions (it can only grow); --config and --delete-config change config
overrides with an incremental alter (IncrementalAlterConfigs), leaving other
overrides as they are.`,
		Example: `  stele topic alter orders --partitions 12
  stele topic alter orders --config retention.ms=3600000 --delete-config cleanup.policy`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			if partitions == 0 && len(sets) == 0 && len(deletes) == 0 {
				return usageErrorf("nothing to alter: give --partitions, --config or --delete-config")
			}
			if partitions < 0 {
				return usageErrorf("invalid --partitions %d: must be the new total number of partitions", partitions)
			}
			ops, err := alterOps(sets, "--config", deletes, "--delete-config")
			if err != nil {
				return err
			}
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()

			out := topicAltered{Topic: name}
			if partitions > 0 {
				if err := setPartitions(ctx, adm, name, partitions); err != nil {
					return err
				}
				out.Partitions = partitions
			}
			if len(ops) > 0 {
				rs, err := adm.AlterTopicConfigs(ctx, ops, name)
				if err := alterConfigsError(fmt.Sprintf("topic %q", name), name, rs, err); err != nil {
					return err
				}
				out.Set, out.Deleted = summarizeOps(ops)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Altered topic %q%s.\n", name, describeAlteration(out))
			return err
		},
	}
	f := c.Flags()
	f.IntVar(&partitions, "partitions", 0, "new total number of partitions (only grows)")
	f.StringArrayVar(&sets, "config", nil, "set a config override key=value (repeatable)")
	f.StringArrayVar(&deletes, "delete-config", nil, "remove a config override, back to the default (repeatable)")
	return c
}

// setPartitions grows topic to n partitions (kadm UpdatePartitions).
func setPartitions(ctx context.Context, adm *kadm.Client, topic string, n int) error {
	rs, err := adm.UpdatePartitions(ctx, n, topic)
	if err != nil {
		return fmt.Errorf("set partitions of topic %q: %w", topic, err)
	}
	r, ok := rs[topic]
	switch {
	case !ok:
		return fmt.Errorf("set partitions of topic %q: the broker did not answer for this topic", topic)
	case r.Err == nil:
		return nil
	case isUnknownTopic(r.Err):
		return topicNotFoundError{topic}
	default:
		return brokerError(fmt.Sprintf("set partitions of topic %q to %d", topic, n), r.Err, r.ErrMessage)
	}
}

// alterOps builds the incremental alter operations for k=v sets and key
// deletes, sorted by key so requests are reproducible. A key both set and
// deleted, or given twice, is a usage error.
func alterOps(sets []string, setFlag string, deletes []string, deleteFlag string) ([]kadm.AlterConfig, error) {
	m, err := parseConfigs(sets, setFlag)
	if err != nil {
		return nil, err
	}
	var ops []kadm.AlterConfig
	for k, v := range m {
		ops = append(ops, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: v})
	}
	seen := make(map[string]bool, len(deletes))
	for _, k := range deletes {
		k = strings.TrimSpace(k)
		switch {
		case k == "":
			return nil, usageErrorf("%s needs a config name", deleteFlag)
		case m[k] != nil:
			return nil, usageErrorf("config %q is both set (%s) and deleted (%s)", k, setFlag, deleteFlag)
		case seen[k]:
			return nil, usageErrorf("%s %q is given twice", deleteFlag, k)
		}
		seen[k] = true
		ops = append(ops, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	return ops, nil
}

// alterConfigsError turns the answer to an incremental alter of resource
// name into an error, or nil when it succeeded. what names the resource for
// people ("topic \"orders\"", "broker 1").
func alterConfigsError(what, name string, rs kadm.AlterConfigsResponses, err error) error {
	if err != nil {
		return fmt.Errorf("alter configs of %s: %w", what, err)
	}
	r, err := rs.On(name, nil)
	switch {
	case err != nil:
		return fmt.Errorf("alter configs of %s: the broker did not answer for it", what)
	case r.Err == nil:
		return nil
	case isUnknownTopic(r.Err) && strings.HasPrefix(what, "topic "):
		return topicNotFoundError{name}
	default:
		return brokerError("alter configs of "+what, r.Err, r.ErrMessage)
	}
}

// summarizeOps splits ops back into the configs set and the keys deleted.
func summarizeOps(ops []kadm.AlterConfig) (map[string]string, []string) {
	var (
		set     map[string]string
		deleted []string
	)
	for _, op := range ops {
		if op.Op == kadm.DeleteConfig {
			deleted = append(deleted, op.Name)
			continue
		}
		if set == nil {
			set = make(map[string]string)
		}
		set[op.Name] = *op.Value
	}
	return set, deleted
}

// describeAlteration renders what an alter changed for a person.
func describeAlteration(a topicAltered) string {
	var parts []string
	if a.Partitions > 0 {
		parts = append(parts, fmt.Sprintf("partitions now %d", a.Partitions))
	}
	if len(a.Set) > 0 {
		m := make(map[string]*string, len(a.Set))
		for k, v := range a.Set {
			m[k] = &v
		}
		parts = append(parts, "set "+formatConfigMap(m, ", "))
	}
	if len(a.Deleted) > 0 {
		parts = append(parts, "deleted "+strings.Join(a.Deleted, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}
