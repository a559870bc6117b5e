package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stele-io/stele/internal/fsm"
)

// groupDeleted is the JSON form of one `group delete` result.
type groupDeleted struct {
	Group   string `json:"group"`
	Deleted bool   `json:"deleted"`
	Error   string `json:"error,omitempty"`
}

func newGroupDeleteCmd(g *globalOptions) *cobra.Command {
	var sign *adminSigning
	c := &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete groups and their committed offsets (kafka-consumer-groups.sh --delete)",
		Long: `Delete groups and their committed offsets (kafka-consumer-groups.sh --delete).
A group that has active members is not deleted (NON_EMPTY_GROUP). Each group is
reported on its own; the exit code is 1 if any could not be deleted.`,
		Example: `  stele group delete billing audit`,
		Args:    minArgs("GROUP"),
		RunE: func(cmd *cobra.Command, names []string) error {
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			names = uniqueSorted(names)
			var rs kadm.DeleteGroupResponses
			if sign.on() {
				rs = kadm.DeleteGroupResponses{}
				for _, name := range names {
					rs[name] = kadm.DeleteGroupResponse{Group: name, Err: sign.submit(cmd.Context(), g, fsm.DeleteGroup{Group: name})}
				}
			} else {
				adm, cl, err := g.newAdmin()
				if err != nil {
					return err
				}
				defer cl.Close()
				ctx, cancel := g.requestContext(cmd)
				defer cancel()
				rs, err = adm.DeleteGroups(ctx, names...)
				if err := partialOK(err); err != nil {
					return fmt.Errorf("delete groups: %w", err)
				}
			}
			return reportGroupsDeleted(cmd, g, names, rs, "group", groupError)
		},
	}
	sign = addSignFlags(c)
	return c
}

// reportGroupsDeleted prints what a deletion of the groups names answered
// (rs), each group's error through errOf, and returns the errors joined;
// kind names the groups for people ("group", "share group").
func reportGroupsDeleted(cmd *cobra.Command, g *globalOptions, names []string, rs kadm.DeleteGroupResponses, kind string,
	errOf func(what, group string, err error, brokerMsg string) error) error {
	var (
		out  []groupDeleted
		errs []error
	)
	for _, name := range names {
		r, ok := rs[name]
		d := groupDeleted{Group: name}
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("delete %s %q: the broker did not answer for this group", kind, name)
		case r.Err != nil:
			err = errOf(fmt.Sprintf("delete %s %q", kind, name), name, r.Err, r.ErrMessage)
		default:
			d.Deleted = true
		}
		if err != nil {
			d.Error = err.Error()
			errs = append(errs, err)
		}
		out = append(out, d)
	}
	if g.jsonOutput() {
		if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	} else {
		for _, d := range out {
			if d.Deleted {
				fmt.Fprintf(cmd.OutOrStdout(), "Deleted %s %q.\n", kind, d.Group)
			}
		}
	}
	return errors.Join(errs...)
}

// offsetDeleted is the JSON form of one partition of `group delete-offsets`.
type offsetDeleted struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Deleted   bool   `json:"deleted"`
	Error     string `json:"error,omitempty"`
}

// offsetsDeleted is the JSON form of `group delete-offsets`.
type offsetsDeleted struct {
	Group      string          `json:"group"`
	Partitions []offsetDeleted `json:"partitions"`
}

func newGroupDeleteOffsetsCmd(g *globalOptions) *cobra.Command {
	var topics []string
	var sign *adminSigning
	c := &cobra.Command{
		Use:   "delete-offsets GROUP --topic T[:P,...]...",
		Short: "Delete committed offsets of a group (kafka-consumer-groups.sh --delete-offsets)",
		Long: `Delete the committed offsets of a group for some topics or partitions
(OffsetDelete, KIP-496; kafka-consumer-groups.sh --delete-offsets). --topic T
deletes the offsets of every partition of T (of every committed partition when
T itself was deleted), --topic T:0,2 those of partitions 0 and 2. The broker
refuses a topic that an active member of the group is subscribed to
(GROUP_SUBSCRIBED_TO_TOPIC); the exit code is 1 if any partition failed.`,
		Example: `  stele group delete-offsets billing --topic orders
  stele group delete-offsets billing --topic orders:0,1 --topic payments`,
		Args: exactArgs("GROUP"),
		RunE: func(cmd *cobra.Command, a []string) error {
			group := a[0]
			if len(topics) == 0 {
				return usageErrorf("say which offsets to delete: --topic T[:P,...] (repeatable)")
			}
			specs, err := parseTopicSpecs(topics)
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
			committed, err := committedOffsets(ctx, adm, group)
			if err != nil {
				return err
			}
			parts, err := resolveTopicSpecs(ctx, adm, specs, committed)
			if err != nil {
				return err
			}
			if err := sign.ready(cmd, g); err != nil {
				return err
			}
			var rs kadm.DeleteOffsetsResponses
			if sign.on() {
				rs = kadm.DeleteOffsetsResponses{}
				for _, tp := range parts.Sorted() {
					for _, p := range tp.Partitions {
						if rs[tp.Topic] == nil {
							rs[tp.Topic] = map[int32]error{}
						}
						rs[tp.Topic][p] = sign.submit(cmd.Context(), g, fsm.OffsetDelete{Group: group, Topic: tp.Topic, Partition: p})
					}
				}
			} else if rs, err = adm.DeleteOffsets(ctx, group, parts); err != nil {
				return groupError(fmt.Sprintf("delete offsets of group %q", group), group, err, "")
			}
			out := offsetsDeleted{Group: group, Partitions: []offsetDeleted{}}
			var errs []error
			for _, tp := range parts.Sorted() {
				for _, p := range slices.Sorted(slices.Values(tp.Partitions)) {
					d := offsetDeleted{Topic: tp.Topic, Partition: p}
					perr, ok := rs.Lookup(tp.Topic, p)
					if !ok {
						perr = errors.New("the broker did not answer for this partition")
					}
					if perr == nil {
						d.Deleted = true
					} else {
						d.Error = perr.Error()
						errs = append(errs, fmt.Errorf("delete offset of group %q topic %q partition %d: %w",
							group, tp.Topic, p, perr))
					}
					out.Partitions = append(out.Partitions, d)
				}
			}
			if g.jsonOutput() {
				err = writeJSON(cmd.OutOrStdout(), out)
			} else {
				err = printOffsetsDeleted(cmd, out)
			}
			if err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().StringArrayVar(&topics, "topic", nil, "topic whose offsets to delete, TOPIC or TOPIC:PARTITION[,PARTITION...] (repeatable)")
	sign = addSignFlags(c)
	return c
}

func printOffsetsDeleted(cmd *cobra.Command, out offsetsDeleted) error {
	tw := newTable(cmd.OutOrStdout())
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tSTATUS")
	for _, d := range out.Partitions {
		status := "deleted"
		if !d.Deleted {
			status = "error: " + d.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", out.Group, d.Topic, d.Partition, status)
	}
	return tw.Flush()
}
