package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// This file holds `stele share-group` (kafka-share-groups.sh): list,
// describe, reset-offsets, delete and delete-offsets of share groups
// (KIP-932, docs/share-groups.md), over the Kafka admin APIs any broker
// serving share groups answers.

func newShareGroupCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("share-group", "List, describe, reset offsets of and delete share groups",
		newShareGroupListCmd(g),
		newShareGroupDescribeCmd(g),
		newShareGroupResetCmd(g),
		newShareGroupDeleteCmd(g),
		newShareGroupDeleteOffsetsCmd(g),
	)
}

// shareGroupListed is the JSON form of one `share-group list` entry.
type shareGroupListed struct {
	Group string `json:"group"`
	State string `json:"state"`
}

func newShareGroupListCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List share groups with their state (kafka-share-groups.sh --list)",
		Example: `  stele share-group list --output json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			listed, listErr := adm.ListGroupsByType(ctx, []string{"share"})
			if err := partialOK(listErr); err != nil {
				return fmt.Errorf("list share groups: %w", err)
			}
			out := []shareGroupListed{}
			for _, l := range listed.Sorted() {
				out = append(out, shareGroupListed{Group: l.Group, State: l.State})
			}
			if g.jsonOutput() {
				err = writeJSON(cmd.OutOrStdout(), out)
			} else {
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "GROUP\tSTATE")
				for _, l := range out {
					fmt.Fprintf(tw, "%s\t%s\n", l.Group, l.State)
				}
				err = tw.Flush()
			}
			if err == nil && listErr != nil {
				err = fmt.Errorf("list share groups: the list may be incomplete: %w", listErr)
			}
			return err
		},
	}
}

// shareGroupDescribed is the JSON form of one group of `share-group
// describe`.
type shareGroupDescribed struct {
	Group      string               `json:"group"`
	State      string               `json:"state"`
	Epoch      int32                `json:"epoch"`
	Assignor   string               `json:"assignor"`
	Members    []shareMemberInfo    `json:"members"`
	Partitions []shareOffsetDetails `json:"partitions"`
	Error      string               `json:"error,omitempty"`
}

type shareMemberInfo struct {
	MemberID   string               `json:"member_id"`
	ClientID   string               `json:"client_id"`
	Host       string               `json:"host"`
	Epoch      int32                `json:"epoch"`
	Topics     []string             `json:"subscribed_topics"`
	Assignment []assignedPartitions `json:"assignment"`
}

// shareOffsetDetails is a share partition's start offset (SPSO) and lag.
type shareOffsetDetails struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	StartOffset int64  `json:"start_offset"`
	Lag         int64  `json:"lag"`
}

func newShareGroupDescribeCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Describe share groups: members, assignments, start offsets and lag (kafka-share-groups.sh --describe)",
		Long: `Describe share groups: their state and epoch, each member with the
partitions assigned to it, and each share partition's start offset (the
first record still in flight: every record before it is done) and lag
(records at or past it not yet done).`,
		Example: `  stele share-group describe workers
  stele share-group describe workers --output json`,
		Args: minArgs("GROUP"),
		RunE: func(cmd *cobra.Command, names []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			names = uniqueSorted(names)
			out, errs := describeShareGroups(ctx, adm, names)
			if g.jsonOutput() {
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else if err := printShareGroups(cmd.OutOrStdout(), out); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
}

func describeShareGroups(ctx context.Context, adm *kadm.Client, names []string) ([]shareGroupDescribed, []error) {
	var errs []error
	described, err := adm.DescribeShareGroups(ctx, names...)
	if err := partialOK(err); err != nil {
		return nil, []error{fmt.Errorf("describe share groups: %w", err)}
	}
	offsets, err := adm.DescribeShareGroupOffsets(ctx, names...)
	if err := partialOK(err); err != nil {
		return nil, []error{fmt.Errorf("describe share group offsets: %w", err)}
	}
	out := []shareGroupDescribed{}
	for _, name := range names {
		d := shareGroupDescribed{Group: name, Members: []shareMemberInfo{}, Partitions: []shareOffsetDetails{}}
		dg, ok := described[name]
		switch {
		case !ok:
			err = fmt.Errorf("describe share group %q: the broker did not answer for it", name)
		case dg.Err != nil:
			err = shareGroupError(fmt.Sprintf("describe share group %q", name), name, dg.Err, "")
		default:
			err = nil
			d.State, d.Epoch, d.Assignor = dg.GroupState, dg.GroupEpoch, dg.Assignor
			for _, m := range dg.Members {
				mi := shareMemberInfo{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Epoch: m.MemberEpoch,
					Topics: m.SubscribedTopicNames, Assignment: []assignedPartitions{}}
				for _, tp := range m.Assignment.Sorted() {
					mi.Assignment = append(mi.Assignment, assignedPartitions{Topic: tp.Topic, Partitions: slices.Sorted(slices.Values(tp.Partitions))})
				}
				d.Members = append(d.Members, mi)
			}
			if do, ok := offsets[name]; ok && do.Err == nil {
				for _, t := range slices.Sorted(maps.Keys(do.Offsets)) {
					for _, p := range slices.Sorted(maps.Keys(do.Offsets[t])) {
						o := do.Offsets[t][p]
						if o.Err == nil {
							d.Partitions = append(d.Partitions, shareOffsetDetails{Topic: t, Partition: p, StartOffset: o.StartOffset, Lag: o.Lag})
						}
					}
				}
			}
		}
		if err != nil {
			d.Error = err.Error()
			errs = append(errs, err)
		}
		out = append(out, d)
	}
	return out, errs
}

func printShareGroups(w io.Writer, groups []shareGroupDescribed) error {
	for i, d := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if d.Error != "" {
			continue
		}
		fmt.Fprintf(w, "GROUP %s  STATE %s  EPOCH %d  MEMBERS %d\n", d.Group, d.State, d.Epoch, len(d.Members))
		tw := newTable(w)
		fmt.Fprintln(tw, "MEMBER-ID\tCLIENT-ID\tHOST\tEPOCH\tASSIGNMENT")
		for _, m := range d.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.MemberID, orDash(m.ClientID), orDash(m.Host), m.Epoch, formatAssignment(m.Assignment))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		tw = newTable(w)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tSTART-OFFSET\tLAG")
		for _, p := range d.Partitions {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", p.Topic, p.Partition, p.StartOffset, p.Lag)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// shareStartOffsets are group's share-partition start offsets, as
// committed offsets are for `group reset-offsets`.
func shareStartOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.Offsets, error) {
	described, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describe share group offsets: %w", err)
	}
	out := kadm.Offsets{}
	d, ok := described[group]
	if !ok || d.Err != nil {
		return out, nil // a group not there yet has none
	}
	for t, ps := range d.Offsets {
		for p, o := range ps {
			if o.Err == nil && o.StartOffset >= 0 {
				out.AddOffset(t, p, o.StartOffset, -1)
			}
		}
	}
	return out, nil
}

func newShareGroupResetCmd(g *globalOptions) *cobra.Command {
	o := &resetOptions{}
	c := &cobra.Command{
		Use:   "reset-offsets GROUP (--topic T[:P,...]... | --all-topics) (--to-earliest | --to-latest | --to-offset N | --to-datetime T) [--execute]",
		Short: "Move the start offsets of an empty share group (kafka-share-groups.sh --reset-offsets)",
		Long: `Move the share-partition start offsets of a share group
(kafka-share-groups.sh --reset-offsets): the group delivers records again
from there, and forgets what was in flight.

Without --execute this is a dry run that prints the plan. New offsets are
kept within the log. The group must be empty (no member): stop its
consumers first. --all-topics resets every partition the group has state
for; --topic T every partition of T (the group is made if it does not
exist yet, as Kafka does).`,
		Example: `  stele share-group reset-offsets workers --topic jobs --to-earliest --execute
  stele share-group reset-offsets workers --all-topics --to-datetime 2026-12-01T00:00:00Z`,
		Args: exactArgs("GROUP"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := o.validate(cmd); err != nil {
				return err
			}
			if o.mode == "shift-by" {
				return usageErrorf("--shift-by does not go with share groups: give --to-earliest, --to-latest, --to-offset or --to-datetime")
			}
			return runShareReset(cmd, g, o, a[0])
		},
	}
	f := c.Flags()
	f.StringArrayVar(&o.topics, "topic", nil, "topic to reset, TOPIC or TOPIC:PARTITION[,PARTITION...] (repeatable)")
	f.BoolVar(&o.allTopics, "all-topics", false, "reset every partition the group has state for")
	f.BoolVar(&o.toEarliest, "to-earliest", false, "move to the log start offset")
	f.BoolVar(&o.toLatest, "to-latest", false, "move to the log end offset")
	f.Int64Var(&o.toOffset, "to-offset", 0, "move to this offset")
	f.StringVar(&o.toDatetime, "to-datetime", "", "move to the first offset at or after this time (RFC 3339 or YYYY-MM-DDTHH:mm:SS.sss)")
	f.Int64Var(&o.shiftBy, "shift-by", 0, "not for share groups")
	_ = f.MarkHidden("shift-by")
	f.BoolVar(&o.execute, "execute", false, "set the new offsets (default: dry run, print the plan only)")
	return c
}

func runShareReset(cmd *cobra.Command, g *globalOptions, o *resetOptions, group string) error {
	adm, cl, err := g.newAdmin()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.requestContext(cmd)
	defer cancel()
	current, err := shareStartOffsets(ctx, adm, group)
	if err != nil {
		return err
	}
	var parts kadm.TopicsSet
	if o.allTopics {
		parts = make(kadm.TopicsSet)
		current.Each(func(off kadm.Offset) { parts.Add(off.Topic, off.Partition) })
		if len(parts) == 0 {
			return fmt.Errorf("share group %q has no share partitions: name them with --topic", group)
		}
	} else if parts, err = resolveTopicSpecs(ctx, adm, o.specs, nil); err != nil {
		return err
	}
	plan, err := o.plan(ctx, adm, parts, current)
	if err != nil {
		return err
	}
	out := offsetResetPlan{Group: group, Partitions: plan}
	var execErr error
	if o.execute {
		offsets := make(kadm.Offsets)
		for _, r := range plan {
			offsets.AddOffset(r.Topic, r.Partition, r.NewOffset, -1)
		}
		rs, err := adm.AlterShareGroupOffsets(ctx, group, offsets)
		if err != nil {
			return shareGroupError(fmt.Sprintf("reset the start offsets of share group %q", group), group, err, "")
		}
		for i := range plan {
			if e, ok := rs.Lookup(plan[i].Topic, plan[i].Partition); ok && e != nil {
				plan[i].Error = e.Error()
				execErr = errors.Join(execErr, fmt.Errorf("share group %q topic %q partition %d: %w", group, plan[i].Topic, plan[i].Partition, e))
			}
		}
		out.Executed = true
	}
	if g.jsonOutput() {
		if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	} else if err := printResetPlan(cmd, out); err != nil {
		return err
	}
	return execErr
}

func newShareGroupDeleteCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete empty share groups with their state and configs (kafka-share-groups.sh --delete)",
		Long: `Delete share groups (kafka-share-groups.sh --delete): their share
partitions' state and their configs. A group with members is not deleted
(NON_EMPTY_GROUP). The exit code is 1 if any could not be deleted.`,
		Example: `  stele share-group delete workers`,
		Args:    minArgs("GROUP"),
		RunE: func(cmd *cobra.Command, names []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			names = uniqueSorted(names)
			rs, err := adm.DeleteGroups(ctx, names...)
			if err := partialOK(err); err != nil {
				return fmt.Errorf("delete share groups: %w", err)
			}
			return reportGroupsDeleted(cmd, g, names, rs, "share group", shareGroupError)
		},
	}
}

func newShareGroupDeleteOffsetsCmd(g *globalOptions) *cobra.Command {
	var topics []string
	c := &cobra.Command{
		Use:   "delete-offsets GROUP --topic T...",
		Short: "Forget an empty share group's state of topics (kafka-share-groups.sh --delete-offsets)",
		Long: `Forget the share partitions of topics of an empty share group: the group
starts them again where share.auto.offset.reset says.`,
		Example: `  stele share-group delete-offsets workers --topic jobs`,
		Args:    exactArgs("GROUP"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if len(topics) == 0 {
				return usageErrorf("say which topics: --topic T (repeatable)")
			}
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			topics = uniqueSorted(topics)
			rs, err := adm.DeleteShareGroupOffsets(ctx, a[0], topics...)
			if err != nil {
				return shareGroupError(fmt.Sprintf("delete the offsets of share group %q", a[0]), a[0], err, "")
			}
			var errs []error
			for _, t := range topics {
				if e, ok := rs.Lookup(t); ok && e != nil {
					errs = append(errs, fmt.Errorf("share group %q topic %q: %w", a[0], t, e))
				} else if !g.jsonOutput() {
					fmt.Fprintf(cmd.OutOrStdout(), "Deleted the offsets of share group %q for topic %q.\n", a[0], t)
				}
			}
			if g.jsonOutput() {
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"group": a[0], "topics": topics, "errors": errorStrings(errs)}); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().StringArrayVar(&topics, "topic", nil, "a topic whose share partitions to forget (repeatable)")
	return c
}

// shareGroupError is groupError for a share group: GROUP_ID_NOT_FOUND
// points at `stele share-group list`.
func shareGroupError(what, group string, err error, brokerMsg string) error {
	if errors.Is(err, kerr.GroupIDNotFound) {
		if brokerMsg != "" {
			return fmt.Errorf("%w (broker says: %s)", shareGroupNotFoundError{group}, brokerMsg)
		}
		return shareGroupNotFoundError{group}
	}
	return groupError(what, group, err, brokerMsg)
}

// shareGroupNotFoundError says a share group does not exist; it matches
// kerr.GroupIDNotFound with errors.Is.
type shareGroupNotFoundError struct{ group string }

func (e shareGroupNotFoundError) Error() string {
	return fmt.Sprintf("share group %q does not exist (see 'stele share-group list')", e.group)
}

// Is makes errors.Is(err, kerr.GroupIDNotFound) true.
func (e shareGroupNotFoundError) Is(target error) bool { return target == kerr.GroupIDNotFound }

func errorStrings(errs []error) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}
