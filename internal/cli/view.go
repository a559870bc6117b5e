package cli

// Views (docs/subjects.md): topics whose records the state machine copies
// from their sources' records whose subject matches a pattern. A view is a
// topic created with the stele.view.* configs, so `stele view` is a thin
// wrapper over CreateTopics, Metadata, DescribeConfigs, ListOffsets and
// DeleteTopics; it works only against Stele.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stele-io/stele/internal/subject"
)

// The topic configs that make a topic a view (internal/fsm/topics/views.go).
const (
	viewFromConfig    = "stele.view.from"
	viewSubjectConfig = "stele.view.subject"
	viewOrderConfig   = "stele.view.order"
)

// viewDef is what a view's stele.view.* configs say.
type viewDef struct {
	From    []string
	Subject string
	Order   string
}

// viewCreated is the JSON form of `view create`.
type viewCreated struct {
	View       string   `json:"view"`
	ID         string   `json:"id,omitempty"`
	From       []string `json:"from"`
	Subject    string   `json:"subject"`
	Order      string   `json:"order"`
	Partitions int32    `json:"partitions"`
}

// viewListed is the JSON form of one `view list` entry.
type viewListed struct {
	View       string   `json:"view"`
	From       []string `json:"from"`
	Subject    string   `json:"subject"`
	Order      string   `json:"order"`
	Partitions int      `json:"partitions"`
}

// viewPartition is the JSON form of one partition in `view describe`.
// Offsets are -1 when the broker did not report them.
type viewPartition struct {
	Partition      int32  `json:"partition"`
	LogStartOffset int64  `json:"log_start_offset"`
	LogEndOffset   int64  `json:"log_end_offset"`
	Error          string `json:"error,omitempty"`
}

// viewDescribed is the JSON form of one view in `view describe`.
type viewDescribed struct {
	View       string          `json:"view"`
	ID         string          `json:"id,omitempty"`
	From       []string        `json:"from"`
	Subject    string          `json:"subject"`
	Order      string          `json:"order"`
	Partitions []viewPartition `json:"partitions"`
}

// viewDeleted is the JSON form of one `view delete` result.
type viewDeleted struct {
	View    string `json:"view"`
	Deleted bool   `json:"deleted"`
	Error   string `json:"error,omitempty"`
}

// notViewError says a topic exists but is not a view.
type notViewError struct{ topic string }

func (e notViewError) Error() string {
	return fmt.Sprintf("topic %q is not a view (see 'stele view list'; 'stele topic' commands act on other topics)", e.topic)
}

// newViewCmd returns `stele view`.
func newViewCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("view", "Create, list, describe and delete views: read-only topics over a subject pattern",
		newViewCreateCmd(g),
		newViewListCmd(g),
		newViewDescribeCmd(g),
		newViewDeleteCmd(g),
	)
}

func newViewCreateCmd(g *globalOptions) *cobra.Command {
	var from, pattern string
	order := newEnumFlag("partition", "partition", "global")
	c := &cobra.Command{
		Use:   "create NAME --from TOPIC[,TOPIC...]",
		Short: "Create a view of the records of topics whose subject matches a pattern",
		Long: `Create view NAME: a read-only topic to which the state machine copies the
records of the --from topics whose subject matches --subject, each with a
header stele-source=topic/partition/offset. Under --order partition source
partition p feeds view partition p (the view has as many partitions as its
widest source); under --order global the view has one partition, in the
chain's order. Any Kafka consumer reads it. Its sources must exist and be
readable by the principal; they cannot be deleted while the view exists
('stele topic delete --cascade' deletes the views with them).`,
		Example: `  stele view create fr --from orders,audit --subject 'orders.*.fr.>'
  stele view create all-orders --from orders --order global`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, a []string) error {
			name := a[0]
			if name == "" {
				return usageErrorf("view name must not be empty")
			}
			sources := splitViewSources(from)
			if len(sources) == 0 {
				return usageErrorf("missing --from: name the view's source topics (--from orders[,audit...])")
			}
			if _, err := subject.ParsePattern(pattern); err != nil {
				return usageErrorf("invalid --subject %q: %v", pattern, err)
			}
			joined := strings.Join(sources, ",")
			cfg := map[string]*string{
				viewFromConfig:    &joined,
				viewSubjectConfig: &pattern,
				viewOrderConfig:   &order.value,
			}
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			// A view's partitions and replicas are not the client's to say.
			rs, err := adm.CreateTopics(ctx, -1, -1, cfg, name)
			if err != nil {
				return fmt.Errorf("create view %q: %w", name, err)
			}
			r, err := rs.On(name, nil)
			if err != nil {
				return fmt.Errorf("create view %q: the broker did not answer for this topic", name)
			}
			if r.Err != nil {
				return brokerError(fmt.Sprintf("create view %q", name), r.Err, r.ErrMessage)
			}
			out := viewCreated{View: name, From: sources, Subject: pattern, Order: order.value, Partitions: r.NumPartitions}
			if r.ID != ([16]byte{}) {
				out.ID = r.ID.String()
			}
			w := cmd.OutOrStdout()
			if g.jsonOutput() {
				return writeJSON(w, out)
			}
			_, err = fmt.Fprintf(w, "Created view %q of %s (subject %s, %s order, %d partitions).\n",
				out.View, strings.Join(out.From, ", "), out.Subject, out.Order, out.Partitions)
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&from, "from", "", "the source topics, comma-separated (required)")
	f.StringVar(&pattern, "subject", ">", "the subject pattern of the records copied (* one token, > the rest)")
	f.Var(order, "order", "partition: source partition p feeds view partition p; global: one partition in the chain's order")
	return c
}

func newViewListCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List views with their sources, subject pattern, order and partitions",
		Example: `  stele view list --output json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			tds, views, err := listViews(ctx, adm)
			if err != nil {
				return err
			}
			out := []viewListed{}
			for _, name := range slices.Sorted(maps.Keys(views)) {
				v := views[name]
				out = append(out, viewListed{View: name, From: v.From, Subject: v.Subject, Order: v.Order,
					Partitions: len(tds[name].Partitions)})
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tFROM\tSUBJECT\tORDER\tPARTITIONS")
			for _, v := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", v.View, strings.Join(v.From, ","), v.Subject, v.Order, v.Partitions)
			}
			return tw.Flush()
		},
	}
}

func newViewDescribeCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe [NAME...]",
		Short: "Describe views: sources, subject pattern, order, each partition's offsets",
		Long: `Describe views: their sources, subject pattern and order, and each
partition's log start and end offsets. With no NAME, every view is
described. A NAME that does not exist or is not a view is reported on
stderr and makes the exit code 1; the others are still described.`,
		Example: `  stele view describe fr
  stele view describe --output json`,
		RunE: func(cmd *cobra.Command, names []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			out, errs := describeViews(ctx, adm, uniqueSorted(names))
			if g.jsonOutput() {
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else if err := printViewsDescribed(cmd.OutOrStdout(), out); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
}

func newViewDeleteCmd(g *globalOptions) *cobra.Command {
	var ifExists bool
	var sign *adminSigning
	c := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete views (a topic that is not a view is refused)",
		Long: `Delete views. A NAME that is a topic but not a view is refused and not
deleted (delete it with 'stele topic delete'). Every other view is still
deleted; the exit code is 1 if any was not.`,
		Example: `  stele view delete fr --if-exists
  stele view delete fr --sign admin.key --principal admin   # under stele.admin.signed=true`,
		Args: minArgs("NAME"),
		RunE: func(cmd *cobra.Command, names []string) error {
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			tds, views, err := listViews(ctx, adm)
			cancel()
			if err != nil {
				return err
			}
			names = uniqueSorted(names)
			refused := map[string]error{}
			var del []string
			for _, name := range names {
				_, isView := views[name]
				td, listed := tds[name]
				switch {
				case isView:
					del = append(del, name)
				case !listed || isUnknownTopic(td.Err):
					del = append(del, name) // the broker says whether it exists
				case td.Err != nil:
					refused[name] = brokerError(fmt.Sprintf("delete view %q", name), td.Err, "")
				default:
					refused[name] = notViewError{name}
				}
			}
			rs, err := deleteTopicsInOrder(cmd, g, sign, adm, del)
			if err != nil {
				return err
			}
			var (
				out  []viewDeleted
				errs []error
			)
			for _, name := range names {
				d := viewDeleted{View: name}
				r, ok := rs[name]
				err := refused[name]
				if err == nil {
					d.Deleted, err = deleteOutcome("view", name, r, ok, ifExists) // topic.go
				}
				if err != nil {
					d.Error = err.Error()
					errs = append(errs, err)
				}
				out = append(out, d)
			}
			if err := printViewsDeleted(cmd, g, out); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVar(&ifExists, "if-exists", false, "succeed for views that do not exist")
	sign = addSignFlags(c)
	return c
}

func printViewsDeleted(cmd *cobra.Command, g *globalOptions, out []viewDeleted) error {
	if g.jsonOutput() {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	for _, d := range out {
		if d.Deleted {
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Deleted view %q.\n", d.View); err != nil {
				return err
			}
		} else if d.Error == "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "View %q does not exist; nothing to delete.\n", d.View)
		}
	}
	return nil
}

// listViews lists the topics, and the views among them by name with what
// their configs say. A topic whose configs cannot be read is taken for one
// that is not a view (the broker still refuses to delete a view's source).
func listViews(ctx context.Context, adm *kadm.Client) (kadm.TopicDetails, map[string]viewDef, error) {
	tds, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list topics: %w", err)
	}
	var names []string
	for _, td := range tds.Sorted() {
		if td.Err == nil {
			names = append(names, td.Topic)
		}
	}
	views := map[string]viewDef{}
	if len(names) == 0 {
		return tds, views, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err := partialOK(err); err != nil {
		return nil, nil, fmt.Errorf("describe topic configs: %w", err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		v := viewDef{Subject: ">", Order: "partition"}
		for _, c := range rc.Configs {
			if c.Value == nil || *c.Value == "" {
				continue
			}
			switch c.Key {
			case viewFromConfig:
				v.From = splitViewSources(*c.Value)
			case viewSubjectConfig:
				v.Subject = *c.Value
			case viewOrderConfig:
				v.Order = *c.Value
			}
		}
		if len(v.From) > 0 {
			views[rc.Name] = v
		}
	}
	return tds, views, nil
}

// describeViews gathers what `view describe` shows: the views named (all
// of them when names is empty), and one error per name it could not
// describe (or one for the whole request).
func describeViews(ctx context.Context, adm *kadm.Client, names []string) ([]viewDescribed, []error) {
	out := []viewDescribed{}
	tds, views, err := listViews(ctx, adm)
	if err != nil {
		return out, []error{err}
	}
	var (
		errs []error
		good []string
	)
	if len(names) == 0 {
		good = slices.Sorted(maps.Keys(views))
	}
	for _, name := range names {
		td, listed := tds[name]
		_, isView := views[name]
		switch {
		case isView:
			good = append(good, name)
		case !listed || isUnknownTopic(td.Err):
			errs = append(errs, topicNotFoundError{name})
		case td.Err != nil:
			errs = append(errs, brokerError(fmt.Sprintf("describe view %q", name), td.Err, ""))
		default:
			errs = append(errs, notViewError{name})
		}
	}
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
	for _, name := range good {
		td, v := tds[name], views[name]
		d := viewDescribed{View: name, From: v.From, Subject: v.Subject, Order: v.Order, Partitions: []viewPartition{}}
		if td.ID != ([16]byte{}) {
			d.ID = td.ID.String()
		}
		for _, p := range td.Partitions.Sorted() {
			vp := viewPartition{Partition: p.Partition, LogStartOffset: -1, LogEndOffset: -1}
			if p.Err != nil {
				vp.Error = p.Err.Error()
			}
			if o, ok := starts.Lookup(name, p.Partition); ok && o.Err == nil {
				vp.LogStartOffset = o.Offset
			}
			if o, ok := ends.Lookup(name, p.Partition); ok && o.Err == nil {
				vp.LogEndOffset = o.Offset
			}
			d.Partitions = append(d.Partitions, vp)
		}
		out = append(out, d)
	}
	return out, errs
}

func printViewsDescribed(w io.Writer, views []viewDescribed) error {
	for i, d := range views {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "View: %s\tFrom: %s\tSubject: %s\tOrder: %s\tPartitions: %d\n",
			d.View, strings.Join(d.From, ","), d.Subject, d.Order, len(d.Partitions))
		tw := newTable(w)
		fmt.Fprintln(tw, "PARTITION\tLOG-START\tLOG-END\tERROR")
		for _, p := range d.Partitions {
			errText := p.Error
			if errText == "" {
				errText = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", p.Partition, formatOffset(p.LogStartOffset),
				formatOffset(p.LogEndOffset), errText)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// cascadeOrder is the order `topic delete --cascade` deletes names in: the
// views among them and the views of any of them first (sorted), then the
// other names (sorted). viewOf maps each view deleted to its sources.
func cascadeOrder(views map[string]viewDef, names []string) (order []string, viewOf map[string][]string) {
	named := map[string]bool{}
	for _, n := range names {
		named[n] = true
	}
	viewOf = map[string][]string{}
	for name, v := range views {
		if named[name] {
			viewOf[name] = v.From
			continue
		}
		for _, src := range v.From {
			if named[src] {
				viewOf[name] = v.From
				break
			}
		}
	}
	order = slices.Sorted(maps.Keys(viewOf))
	for _, n := range uniqueSorted(names) {
		if _, isView := viewOf[n]; !isView {
			order = append(order, n)
		}
	}
	return order, viewOf
}

// splitViewSources splits a stele.view.from list: comma-separated, spaces
// around a name ignored, empty names dropped.
func splitViewSources(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}
