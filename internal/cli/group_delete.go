package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
)

// groupDeleted is the JSON form of one `group delete` result.
type groupDeleted struct {
	Group   string `json:"group"`
	Deleted bool   `json:"deleted"`
	Error   string `json:"error,omitempty"`
}

func newGroupDeleteCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete groups and their committed offsets (kafka-consumer-groups.sh --delete)",
		Long: `Delete groups and their committed offsets (kafka-consumer-groups.sh --delete).
A group that has active members is not deleted (NON_EMPTY_GROUP). Each group is
reported on its own; the exit code is 1 if any could not be deleted.`,
		Example: `  stele group delete billing audit`,
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
				return fmt.Errorf("delete groups: %w", err)
			}
			var (
				out  []groupDeleted
				errs []error
			)
			for _, name := range names {
				r, ok := rs[name]
				d := groupDeleted{Group: name}
				switch {
				case !ok:
					err = fmt.Errorf("delete group %q: the broker did not answer for this group", name)
				case r.Err != nil:
					err = groupError(fmt.Sprintf("delete group %q", name), name, r.Err, r.ErrMessage)
				default:
					d.Deleted, err = true, nil
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
						fmt.Fprintf(cmd.OutOrStdout(), "Deleted group %q.\n", d.Group)
					}
				}
			}
			return errors.Join(errs...)
		},
	}
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
			rs, err := adm.DeleteOffsets(ctx, group, parts)
			if err != nil {
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
