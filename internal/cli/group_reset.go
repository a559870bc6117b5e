package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stele-io/stele/internal/fsm"
)

// resetOptions are the flags of `stele group reset-offsets`.
type resetOptions struct {
	topics     []string
	allTopics  bool
	toEarliest bool
	toLatest   bool
	toOffset   int64
	toDatetime string
	shiftBy    int64
	execute    bool
	sign       *adminSigning

	// Filled by validate.
	mode   string // the one --to-*/--shift-by flag given
	millis int64  // --to-datetime as Unix milliseconds
	specs  []topicSpec
}

// resetModes are the flags that say where to move the offsets; exactly one
// is given.
var resetModes = []string{"to-earliest", "to-latest", "to-offset", "to-datetime", "shift-by"}

// offsetReset is the JSON form of one partition of `group reset-offsets`.
// CurrentOffset is -1 when the group has no committed offset there. Error
// is set when --execute failed to commit this partition.
type offsetReset struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset int64  `json:"current_offset"`
	NewOffset     int64  `json:"new_offset"`
	Error         string `json:"error,omitempty"`
}

// offsetResetPlan is the JSON form of `group reset-offsets`: the plan, and
// whether it was committed (--execute).
type offsetResetPlan struct {
	Group      string        `json:"group"`
	Executed   bool          `json:"executed"`
	Partitions []offsetReset `json:"partitions"`
}

func newGroupResetOffsetsCmd(g *globalOptions) *cobra.Command {
	o := &resetOptions{}
	c := &cobra.Command{
		Use:   "reset-offsets GROUP (--topic T[:P,...]... | --all-topics) (--to-earliest | --to-latest | --to-offset N | --to-datetime T | --shift-by N) [--execute]",
		Short: "Move the committed offsets of an inactive group (kafka-consumer-groups.sh --reset-offsets)",
		Long: `Move the committed offsets of a group (kafka-consumer-groups.sh --reset-offsets).

Without --execute this is a dry run: it prints the plan (topic, partition,
current offset, new offset) and commits nothing. With --execute it commits the
new offsets. New offsets are kept within the log (from the log start to the
log end offset), as Kafka does. Like Kafka, it refuses a group that has active
members: stop the group's consumers first (the group must be Empty).

--topic T resets every partition of T, --topic T:0,2 only partitions 0 and 2;
--all-topics resets every partition the group has a committed offset for.
--to-datetime takes RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T14:00:00+02:00)
or Kafka's YYYY-MM-DDTHH:mm:SS.sss (UTC unless a zone follows) and moves to the
first offset whose timestamp is at or after it (the log end if none is).
--shift-by N moves each committed offset by N (negative: back); it needs a
committed offset on every partition.`,
		Example: `  stele group reset-offsets billing --topic orders --to-earliest
  stele group reset-offsets billing --topic orders:0,1 --shift-by -100 --execute
  stele group reset-offsets billing --all-topics --to-datetime 2024-05-01T00:00:00.000 --execute`,
		Args: exactArgs("GROUP"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := o.validate(cmd); err != nil {
				return err
			}
			return runResetOffsets(cmd, g, o, a[0])
		},
	}
	f := c.Flags()
	f.StringArrayVar(&o.topics, "topic", nil, "topic to reset, TOPIC or TOPIC:PARTITION[,PARTITION...] (repeatable)")
	f.BoolVar(&o.allTopics, "all-topics", false, "reset every partition the group has a committed offset for")
	f.BoolVar(&o.toEarliest, "to-earliest", false, "move to the log start offset")
	f.BoolVar(&o.toLatest, "to-latest", false, "move to the log end offset")
	f.Int64Var(&o.toOffset, "to-offset", 0, "move to this offset")
	f.StringVar(&o.toDatetime, "to-datetime", "", "move to the first offset at or after this time (RFC 3339 or YYYY-MM-DDTHH:mm:SS.sss)")
	f.Int64Var(&o.shiftBy, "shift-by", 0, "move the committed offset by this many records (negative: back)")
	f.BoolVar(&o.execute, "execute", false, "commit the new offsets (default: dry run, print the plan only)")
	o.sign = addSignFlags(c)
	return c
}

// validate checks the flag combination and parses --topic and --to-datetime.
func (o *resetOptions) validate(cmd *cobra.Command) error {
	var given []string
	for _, m := range resetModes {
		if cmd.Flags().Changed(m) {
			given = append(given, "--"+m)
		}
	}
	switch {
	case len(given) == 0:
		return usageErrorf("say where to move the offsets: one of --%s", strings.Join(resetModes, ", --"))
	case len(given) > 1:
		return usageErrorf("give only one of %s", strings.Join(given, ", "))
	case len(o.topics) == 0 && !o.allTopics:
		return usageErrorf("say which offsets to reset: --topic T[:P,...] or --all-topics")
	case len(o.topics) > 0 && o.allTopics:
		return usageErrorf("give either --topic or --all-topics, not both")
	}
	o.mode = strings.TrimPrefix(given[0], "--")
	if o.mode == "to-datetime" {
		ms, err := parseDateTime(o.toDatetime)
		if err != nil {
			return usageError{err}
		}
		o.millis = ms
	}
	specs, err := parseTopicSpecs(o.topics)
	if err != nil {
		return err
	}
	o.specs = specs
	return nil
}

func runResetOffsets(cmd *cobra.Command, g *globalOptions, o *resetOptions, group string) error {
	if err := o.sign.ready(cmd, g); err != nil {
		return err
	}
	adm, cl, err := g.newAdmin()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.requestContext(cmd)
	defer cancel()

	// Kafka resets only a group that is Empty (or does not exist yet): the
	// members of an active group would overwrite the new offsets with
	// their own commits.
	state, err := groupState(ctx, adm, group)
	if err != nil {
		return err
	}
	if state != "Empty" && state != "Dead" {
		return groupActiveError{group: group, state: state}
	}
	committed, err := committedOffsets(ctx, adm, group)
	if err != nil {
		return err
	}
	var parts kadm.TopicsSet
	if o.allTopics {
		if parts = committed.TopicsSet(); len(parts) == 0 {
			return fmt.Errorf("group %q has no committed offsets: nothing to reset (name topics with --topic)", group)
		}
	} else if parts, err = resolveTopicSpecs(ctx, adm, o.specs, nil); err != nil {
		return err
	}

	plan, err := o.plan(ctx, adm, parts, committed)
	if err != nil {
		return err
	}
	out := offsetResetPlan{Group: group, Partitions: plan}
	var commitErr error
	if o.execute {
		out.Executed = true
		if o.sign.on() {
			commitErr = commitPlanSigned(cmd, g, o.sign, group, out.Partitions)
		} else {
			commitErr = commitPlan(ctx, adm, group, out.Partitions)
		}
	}
	if g.jsonOutput() {
		if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	} else if err := printResetPlan(cmd, out); err != nil {
		return err
	}
	return commitErr
}

// plan computes the new offset of every partition in parts. Offsets are
// clamped to [log start, log end] as Kafka's tool does.
func (o *resetOptions) plan(ctx context.Context, adm *kadm.Client, parts kadm.TopicsSet, committed kadm.Offsets) ([]offsetReset, error) {
	topics := parts.Topics()
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list log start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list log end offsets: %w", err)
	}
	var byTime kadm.ListedOffsets
	if o.mode == "to-datetime" {
		if byTime, err = adm.ListOffsetsAfterMilli(ctx, o.millis, topics...); err != nil {
			return nil, fmt.Errorf("list offsets by time: %w", err)
		}
	}
	lookup := func(l kadm.ListedOffsets, what, t string, p int32) (int64, error) {
		lo, ok := l.Lookup(t, p)
		switch {
		case !ok:
			if miss, ok := l.Lookup(t, -1); ok && isUnknownTopic(miss.Err) {
				return 0, topicNotFoundError{t}
			}
			return 0, fmt.Errorf("the broker did not list the %s offset of topic %q partition %d", what, t, p)
		case lo.Err != nil:
			return 0, brokerError(fmt.Sprintf("list the %s offset of topic %q partition %d", what, t, p), lo.Err, "")
		}
		return lo.Offset, nil
	}

	var (
		out  []offsetReset
		errs []error
	)
	for _, tp := range parts.Sorted() {
		for _, p := range slices.Sorted(slices.Values(tp.Partitions)) {
			t := tp.Topic
			r := offsetReset{Topic: t, Partition: p, CurrentOffset: -1}
			if c, ok := committed.Lookup(t, p); ok {
				r.CurrentOffset = c.At
			}
			start, err1 := lookup(starts, "log start", t, p)
			end, err2 := lookup(ends, "log end", t, p)
			if err := errors.Join(err1, err2); err != nil {
				errs = append(errs, err)
				continue
			}
			var target int64
			switch o.mode {
			case "to-earliest":
				target = start
			case "to-latest":
				target = end
			case "to-offset":
				target = o.toOffset
			case "to-datetime":
				// kadm answers the log end for a partition with no
				// record at or after the time, as Kafka's tool uses.
				if target, err = lookup(byTime, "by-time", t, p); err != nil {
					errs = append(errs, err)
					continue
				}
			case "shift-by":
				if r.CurrentOffset < 0 {
					errs = append(errs, fmt.Errorf("cannot shift the offset of topic %q partition %d: "+
						"the group has no committed offset there (use --to-offset or --to-earliest)", t, p))
					continue
				}
				target = r.CurrentOffset + o.shiftBy
			}
			r.NewOffset = min(max(target, start), end)
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// commitPlan commits the new offsets of plan for group and records each
// partition's error in the plan; it returns the errors joined.
func commitPlan(ctx context.Context, adm *kadm.Client, group string, plan []offsetReset) error {
	offsets := make(kadm.Offsets)
	for _, r := range plan {
		offsets.AddOffset(r.Topic, r.Partition, r.NewOffset, -1)
	}
	resps, err := adm.CommitOffsets(ctx, group, offsets)
	if err != nil {
		return groupError(fmt.Sprintf("commit offsets of group %q", group), group, err, "")
	}
	var errs []error
	for i := range plan {
		r := &plan[i]
		resp, ok := resps.Lookup(r.Topic, r.Partition)
		switch {
		case !ok:
			err = fmt.Errorf("commit offset of group %q topic %q partition %d: the broker did not answer for it",
				group, r.Topic, r.Partition)
		case resp.Err != nil:
			err = groupError(fmt.Sprintf("commit offset of group %q topic %q partition %d", group, r.Topic, r.Partition),
				group, resp.Err, "")
		default:
			continue
		}
		r.Error = err.Error()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// commitPlanSigned commits plan as signed commands, one a partition
// (stele.admin.signed: a commit from outside a group's generation is a
// reset), and records each partition's error in the plan.
func commitPlanSigned(cmd *cobra.Command, g *globalOptions, sign *adminSigning, group string, plan []offsetReset) error {
	var errs []error
	for i := range plan {
		r := &plan[i]
		c := fsm.OffsetCommit{Group: group, Generation: -1, Topic: r.Topic, Partition: r.Partition, Offset: r.NewOffset, LeaderEpoch: -1}
		if err := sign.submit(cmd.Context(), g, c); err != nil {
			err = fmt.Errorf("commit offset of group %q topic %q partition %d: %w", group, r.Topic, r.Partition, err)
			r.Error = err.Error()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func printResetPlan(cmd *cobra.Command, out offsetResetPlan) error {
	tw := newTable(cmd.OutOrStdout())
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tNEW-OFFSET\tERROR")
	for _, r := range out.Partitions {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", out.Group, r.Topic, r.Partition,
			formatOffset(r.CurrentOffset), r.NewOffset, orDash(r.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !out.Executed {
		fmt.Fprintf(cmd.ErrOrStderr(), "Dry run: nothing was committed. Add --execute to commit these offsets.\n")
	}
	return nil
}

// groupActiveError refuses to reset the offsets of a group that has
// members; errors.Is(err, errGroupActive) is true for it.
type groupActiveError struct{ group, state string }

func (e groupActiveError) Error() string {
	return fmt.Sprintf("cannot reset the offsets of group %q: it has active members (state %s); "+
		"offsets can only be reset while the group is inactive (Empty), so stop its consumers first", e.group, e.state)
}

func (e groupActiveError) Unwrap() error { return errGroupActive }

// kafkaDateTime matches Kafka's --to-datetime format, YYYY-MM-DDTHH:mm:SS.sss
// (Utils.getDateTime), with the fraction and the zone optional: the zone
// is Z, ±hh, ±hhmm or ±hh:mm, UTC when absent.
var kafkaDateTime = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)(Z|[+-]\d{2}(?::?\d{2})?)?$`)

// parseDateTime parses a --to-datetime value into Unix milliseconds: RFC
// 3339, or Kafka's YYYY-MM-DDTHH:mm:SS.sss with an optional zone (UTC when
// there is none, as Kafka's tool assumes).
func parseDateTime(s string) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli(), nil
	}
	m := kafkaDateTime.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("invalid --to-datetime %q: want RFC 3339 (2024-05-01T12:00:00Z) or YYYY-MM-DDTHH:mm:SS.sss", s)
	}
	zone := m[2]
	switch {
	case zone == "" || zone == "Z":
		zone = "Z"
	case len(zone) == 3: // ±hh
		zone += ":00"
	case len(zone) == 5: // ±hhmm
		zone = zone[:3] + ":" + zone[3:]
	}
	t, err := time.Parse(time.RFC3339Nano, m[1]+zone)
	if err != nil {
		return 0, fmt.Errorf("invalid --to-datetime %q: %w", s, err)
	}
	return t.UnixMilli(), nil
}
