package cli

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
)

// newTopicCmd returns `stele topic`, the counterpart of kafka-topics.sh.
func newTopicCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("topic", "Create, list, describe, alter and delete topics",
		newTopicCreateCmd(g),
		newTopicListCmd(g),
		newTopicDescribeCmd(g),
		newTopicAlterCmd(g),
		newTopicDeleteCmd(g),
	)
}

// topicCreated is the JSON form of `topic create`.
type topicCreated struct {
	Topic             string            `json:"topic"`
	ID                string            `json:"id,omitempty"`
	Partitions        int32             `json:"partitions"`
	ReplicationFactor int16             `json:"replication_factor"`
	Created           bool              `json:"created"`
	AlreadyExisted    bool              `json:"already_existed"`
	ValidateOnly      bool              `json:"validate_only"`
	Configs           map[string]string `json:"configs,omitempty"`
}

func newTopicCreateCmd(g *globalOptions) *cobra.Command {
	var (
		partitions   int32
		replication  int16
		configs      []string
		ifNotExists  bool
		validateOnly bool
	)
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic (kafka-topics.sh --create)",
		Example: `  stele topic create orders --partitions 6 --config retention.ms=86400000
  stele topic create orders --if-not-exists`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			if name == "" {
				return usageErrorf("topic name must not be empty")
			}
			if partitions == 0 || partitions < -1 {
				return usageErrorf("invalid --partitions %d: must be at least 1, or -1 for the broker default", partitions)
			}
			if replication == 0 || replication < -1 {
				return usageErrorf("invalid --replication-factor %d: must be at least 1, or -1 for the broker default", replication)
			}
			cfg, err := parseConfigs(configs, "--config")
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

			create := adm.CreateTopics
			if validateOnly {
				create = adm.ValidateCreateTopics
			}
			rs, err := create(ctx, partitions, replication, cfg, name)
			if err != nil {
				return fmt.Errorf("create topic %q: %w", name, err)
			}
			r, err := rs.On(name, nil)
			if err != nil {
				return fmt.Errorf("create topic %q: the broker did not answer for this topic", name)
			}
			out := topicCreated{
				Topic: name, Partitions: r.NumPartitions, ReplicationFactor: r.ReplicationFactor,
				ValidateOnly: validateOnly,
			}
			switch {
			case r.Err == nil:
				out.Created = !validateOnly
			case ifNotExists && errors.Is(r.Err, kerr.TopicAlreadyExists):
				out.AlreadyExisted = true
				out.Partitions, out.ReplicationFactor = 0, 0
			default:
				return brokerError(fmt.Sprintf("create topic %q", name), r.Err, r.ErrMessage)
			}
			if r.ID != ([16]byte{}) {
				out.ID = r.ID.String()
			}
			if len(cfg) > 0 {
				out.Configs = make(map[string]string, len(cfg))
				for k, v := range cfg {
					out.Configs[k] = *v
				}
			}
			return printTopicCreated(cmd, g, out)
		},
	}
	f := c.Flags()
	f.Int32Var(&partitions, "partitions", 1, "number of partitions (-1: the broker's default)")
	f.Int16Var(&replication, "replication-factor", -1, "replicas per partition (-1: the broker's default)")
	f.StringArrayVar(&configs, "config", nil, "topic config override key=value (repeatable)")
	f.BoolVar(&ifNotExists, "if-not-exists", false, "succeed if the topic already exists")
	f.BoolVar(&validateOnly, "validate-only", false, "ask the broker to validate the request without creating the topic")
	return c
}

func printTopicCreated(cmd *cobra.Command, g *globalOptions, out topicCreated) error {
	w := cmd.OutOrStdout()
	if g.jsonOutput() {
		return writeJSON(w, out)
	}
	var err error
	switch {
	case out.AlreadyExisted:
		_, err = fmt.Fprintf(w, "Topic %q already exists.\n", out.Topic)
	case out.ValidateOnly:
		_, err = fmt.Fprintf(w, "Topic %q can be created (%d partitions, replication factor %d); nothing was created.\n",
			out.Topic, out.Partitions, out.ReplicationFactor)
	default:
		_, err = fmt.Fprintf(w, "Created topic %q (%d partitions, replication factor %d).\n",
			out.Topic, out.Partitions, out.ReplicationFactor)
	}
	return err
}

// topicListed is the JSON form of one `topic list` entry.
type topicListed struct {
	Topic             string `json:"topic"`
	ID                string `json:"id,omitempty"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	Internal          bool   `json:"internal"`
}

func newTopicListCmd(g *globalOptions) *cobra.Command {
	var internal bool
	c := &cobra.Command{
		Use:     "list",
		Short:   "List topics (kafka-topics.sh --list)",
		Example: `  stele topic list --output json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			list := adm.ListTopics
			if internal {
				list = adm.ListTopicsWithInternal
			}
			tds, err := list(ctx)
			if err != nil {
				return fmt.Errorf("list topics: %w", err)
			}
			out := []topicListed{}
			for _, td := range tds.Sorted() {
				if td.Err != nil {
					continue // a topic that failed to load is reported by describe
				}
				t := topicListed{
					Topic: td.Topic, Partitions: len(td.Partitions),
					ReplicationFactor: td.Partitions.NumReplicas(), Internal: td.IsInternal,
				}
				if td.ID != ([16]byte{}) {
					t.ID = td.ID.String()
				}
				out = append(out, t)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tREPLICATION-FACTOR\tINTERNAL")
			for _, t := range out {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%t\n", t.Topic, t.Partitions, t.ReplicationFactor, t.Internal)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&internal, "internal", false, "include internal topics such as __consumer_offsets")
	return c
}

// topicDeleted is the JSON form of one `topic delete` result. ViewOf is
// set for a view deleted with --cascade: its sources.
type topicDeleted struct {
	Topic   string   `json:"topic"`
	Deleted bool     `json:"deleted"`
	Error   string   `json:"error,omitempty"`
	ViewOf  []string `json:"view_of,omitempty"`
}

func newTopicDeleteCmd(g *globalOptions) *cobra.Command {
	var ifExists, cascade bool
	var sign *adminSigning
	c := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete topics (kafka-topics.sh --delete)",
		Long: `Delete topics (kafka-topics.sh --delete). A topic that is the source of a
view is deleted only after the view: --cascade deletes those views first,
in the same request (one signed command each, views first, under --sign).`,
		Example: `  stele topic delete orders payments --if-exists
  stele topic delete orders --cascade   # and the views of orders
  stele topic delete orders --sign admin.key --principal admin   # under stele.admin.signed=true`,
		Args: minArgs("NAME"),
		RunE: func(cmd *cobra.Command, names []string) error {
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			var adm *kadm.Client
			if !sign.on() || cascade {
				a, cl, err := g.newAdmin()
				if err != nil {
					return err
				}
				defer cl.Close()
				adm = a
			}
			order, viewOf := uniqueSorted(names), map[string][]string{}
			if cascade {
				ctx, cancel := g.requestContext(cmd)
				_, views, err := listViews(ctx, adm) // view.go
				cancel()
				if err != nil {
					return err
				}
				order, viewOf = cascadeOrder(views, names)
			}
			rs, err := deleteTopicsInOrder(cmd, g, sign, adm, order)
			if err != nil {
				return err
			}
			var (
				out  []topicDeleted
				errs []error
			)
			for _, name := range order {
				r, ok := rs[name]
				d := topicDeleted{Topic: name, ViewOf: viewOf[name]}
				d.Deleted, err = deleteOutcome("topic", name, r, ok, ifExists)
				if err != nil {
					d.Error = err.Error()
					errs = append(errs, err)
				}
				out = append(out, d)
			}
			if err := printTopicsDeleted(cmd, g, out); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVar(&ifExists, "if-exists", false, "succeed for topics that do not exist")
	c.Flags().BoolVar(&cascade, "cascade", false, "delete the views of these topics first, in the same request")
	sign = addSignFlags(c)
	return c
}

// deleteOutcome says whether the deletion of topic (or view: what) name
// answered by r (ok: the broker answered for it) deleted it, or why not;
// a name that does not exist is no error with --if-exists.
func deleteOutcome(what, name string, r kadm.DeleteTopicResponse, ok, ifExists bool) (bool, error) {
	switch {
	case !ok:
		return false, fmt.Errorf("delete %s %q: the broker did not answer for this topic", what, name)
	case r.Err == nil:
		return true, nil
	case isUnknownTopic(r.Err) && ifExists:
		return false, nil
	case isUnknownTopic(r.Err):
		return false, topicNotFoundError{name}
	default:
		return false, brokerError(fmt.Sprintf("delete %s %q", what, name), r.Err, r.ErrMessage)
	}
}

// deleteTopicsInOrder deletes names in the order given, so that views go
// before their sources: in one DeleteTopics request (kadm sends the topics
// in order, and the broker applies them in order), or under --sign as one
// signed command each, in turn. adm may be nil under --sign.
func deleteTopicsInOrder(cmd *cobra.Command, g *globalOptions, sign *adminSigning, adm *kadm.Client, names []string) (kadm.DeleteTopicResponses, error) {
	if sign.on() {
		rs := kadm.DeleteTopicResponses{}
		for _, name := range names {
			err := sign.submit(cmd.Context(), g, fsm.DeleteTopic{Name: name})
			rs[name] = kadm.DeleteTopicResponse{Topic: name, Err: err}
		}
		return rs, nil
	}
	ctx, cancel := g.requestContext(cmd)
	defer cancel()
	rs, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("delete topics: %w", err)
	}
	return rs, nil
}

func printTopicsDeleted(cmd *cobra.Command, g *globalOptions, out []topicDeleted) error {
	if g.jsonOutput() {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	for _, d := range out {
		switch {
		case d.Deleted && len(d.ViewOf) > 0:
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Deleted view %q (a view of %s).\n", d.Topic, strings.Join(d.ViewOf, ", ")); err != nil {
				return err
			}
		case d.Deleted:
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Deleted topic %q.\n", d.Topic); err != nil {
				return err
			}
		case d.Error == "":
			fmt.Fprintf(cmd.ErrOrStderr(), "Topic %q does not exist; nothing to delete.\n", d.Topic)
		}
	}
	return nil
}

// uniqueSorted returns the distinct names in order.
func uniqueSorted(names []string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	return slices.Compact(out)
}
