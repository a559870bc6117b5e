package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// groupMemberDescribed is the JSON form of one member in `group describe`.
// Assignment is what the group leader assigned the member (consumer
// groups; empty for other protocol types).
type groupMemberDescribed struct {
	MemberID   string               `json:"member_id"`
	InstanceID *string              `json:"instance_id"`
	ClientID   string               `json:"client_id"`
	Host       string               `json:"host"`
	Assignment []assignedPartitions `json:"assignment"`
}

// assignedPartitions is a topic and some of its partitions, in JSON.
type assignedPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// groupPartitionDescribed is the JSON form of one partition in `group
// describe`: a partition the group has a committed offset for, is assigned,
// or both. CommittedOffset is -1 when nothing is committed, LogEndOffset -1
// when the broker did not list it, Lag -1 when either is unknown. MemberID,
// ClientID and Host are empty when no member consumes the partition.
type groupPartitionDescribed struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	CommittedOffset int64  `json:"committed_offset"`
	LogEndOffset    int64  `json:"log_end_offset"`
	Lag             int64  `json:"lag"`
	MemberID        string `json:"member_id"`
	ClientID        string `json:"client_id"`
	Host            string `json:"host"`
	Error           string `json:"error,omitempty"`
}

// groupDescribed is the JSON form of one group in `group describe`.
// TotalLag sums the partitions whose lag is known.
type groupDescribed struct {
	Group        string                    `json:"group"`
	State        string                    `json:"state"`
	ProtocolType string                    `json:"protocol_type"`
	Protocol     string                    `json:"protocol"`
	Coordinator  int32                     `json:"coordinator"`
	Members      []groupMemberDescribed    `json:"members"`
	Partitions   []groupPartitionDescribed `json:"partitions"`
	TotalLag     int64                     `json:"total_lag"`
}

func newGroupDescribeCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Describe groups: state, members, committed offsets and lag",
		Long: `Describe consumer groups (kafka-consumer-groups.sh --describe): the state,
the protocol, each member with what it is assigned, and for every partition
that is assigned or has a committed offset: the committed offset, the log end
offset, the lag and the member consuming it ("-" when none). Lag is the log
end offset minus the committed offset ("-" when nothing is committed).`,
		Example: `  stele group describe billing
  stele group describe billing audit --output json`,
		Args: minArgs("GROUP"),
		RunE: func(cmd *cobra.Command, names []string) error {
			adm, cl, err := g.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := g.requestContext(cmd)
			defer cancel()
			out, errs := describeGroups(ctx, adm, uniqueSorted(names))
			if g.jsonOutput() {
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else if err := printGroupsDescribed(cmd.OutOrStdout(), out); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
}

// describeGroups gathers what `group describe` shows. It returns the groups
// it could describe and one error per group it could not.
func describeGroups(ctx context.Context, adm *kadm.Client, names []string) ([]groupDescribed, []error) {
	out := []groupDescribed{}
	described, err := adm.DescribeGroups(ctx, names...)
	if err := partialOK(err); err != nil {
		return out, []error{fmt.Errorf("describe groups: %w", err)}
	}
	var errs []error
	for _, name := range names {
		d, ok := described[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("describe group %q: the broker did not answer for this group", name))
			continue
		case d.Err != nil:
			errs = append(errs, groupError(fmt.Sprintf("describe group %q", name), name, d.Err, d.ErrMessage))
			continue
		}
		committed, err := committedOffsets(ctx, adm, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d.State == "Dead" && len(d.Members) == 0 && len(committed) == 0 {
			// Brokers before DescribeGroups v6 answer "Dead" for a
			// group they do not know.
			errs = append(errs, groupNotFoundError{name})
			continue
		}
		gd, err := describeGroup(ctx, adm, d, committed)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, gd)
	}
	return out, errs
}

// describeGroup builds the description of one group from its DescribeGroups
// answer and its committed offsets, listing the log end offsets of the
// topics involved. An error to list them is returned beside a description
// whose affected partitions carry it.
func describeGroup(ctx context.Context, adm *kadm.Client, d kadm.DescribedGroup, committed kadm.Offsets) (groupDescribed, error) {
	gd := groupDescribed{
		Group: d.Group, State: d.State, ProtocolType: d.ProtocolType, Protocol: d.Protocol,
		Coordinator: d.Coordinator.NodeID, Members: []groupMemberDescribed{}, Partitions: []groupPartitionDescribed{},
	}
	owner := make(map[string]map[int32]*kadm.DescribedGroupMember)
	parts := committed.TopicsSet()
	for i := range d.Members {
		m := &d.Members[i]
		md := groupMemberDescribed{
			MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, Host: m.ClientHost,
			Assignment: []assignedPartitions{},
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				ps := slices.Sorted(slices.Values(t.Partitions))
				md.Assignment = append(md.Assignment, assignedPartitions{Topic: t.Topic, Partitions: ps})
				parts.Add(t.Topic, ps...)
				if owner[t.Topic] == nil {
					owner[t.Topic] = make(map[int32]*kadm.DescribedGroupMember)
				}
				for _, p := range ps {
					owner[t.Topic][p] = m
				}
			}
			slices.SortFunc(md.Assignment, func(a, b assignedPartitions) int { return cmp.Compare(a.Topic, b.Topic) })
		}
		gd.Members = append(gd.Members, md)
	}

	var (
		ends    kadm.ListedOffsets
		listErr error
	)
	if topics := parts.Topics(); len(topics) > 0 {
		ends, listErr = adm.ListEndOffsets(ctx, topics...)
		if listErr = partialOK(listErr); listErr != nil {
			listErr = fmt.Errorf("group %q: list log end offsets: %w", d.Group, listErr)
		}
	}
	for _, tp := range parts.Sorted() {
		for _, p := range slices.Sorted(slices.Values(tp.Partitions)) {
			row := groupPartitionDescribed{Topic: tp.Topic, Partition: p, CommittedOffset: -1, LogEndOffset: -1, Lag: -1}
			if o, ok := committed.Lookup(tp.Topic, p); ok {
				row.CommittedOffset = o.At
			}
			switch e, ok := ends.Lookup(tp.Topic, p); {
			case listErr != nil:
				row.Error = listErr.Error()
			case ok && e.Err == nil:
				row.LogEndOffset = e.Offset
			case ok:
				row.Error = e.Err.Error()
			case len(ends[tp.Topic]) == 1 && ends[tp.Topic][-1].Err != nil: // kadm's mark of a missing topic
				row.Error = ends[tp.Topic][-1].Err.Error()
			default:
				row.Error = kerr.UnknownTopicOrPartition.Error()
			}
			if row.CommittedOffset >= 0 && row.LogEndOffset >= 0 {
				row.Lag = max(row.LogEndOffset-row.CommittedOffset, 0)
				gd.TotalLag += row.Lag
			}
			if m := owner[tp.Topic][p]; m != nil {
				row.MemberID, row.ClientID, row.Host = m.MemberID, m.ClientID, m.ClientHost
			}
			gd.Partitions = append(gd.Partitions, row)
		}
	}
	return gd, listErr
}

func printGroupsDescribed(w io.Writer, groups []groupDescribed) error {
	for i, d := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		protocol := orDash(d.ProtocolType)
		if d.Protocol != "" {
			protocol += "/" + d.Protocol
		}
		fmt.Fprintf(w, "Group: %s\tState: %s\tProtocol: %s\tCoordinator: %d\tMembers: %d\tTotal lag: %d\n",
			d.Group, d.State, protocol, d.Coordinator, len(d.Members), d.TotalLag)
		tw := newTable(w)
		if len(d.Members) == 0 {
			fmt.Fprintln(tw, "(no active members)")
		} else {
			fmt.Fprintln(tw, "MEMBER-ID\tINSTANCE-ID\tCLIENT-ID\tHOST\tASSIGNMENT")
			for _, m := range d.Members {
				inst := "-"
				if m.InstanceID != nil {
					inst = *m.InstanceID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, inst, orDash(m.ClientID), orDash(m.Host),
					formatAssignment(m.Assignment))
			}
		}
		fmt.Fprintln(tw)
		if len(d.Partitions) == 0 {
			fmt.Fprintln(tw, "(no committed offsets and no assigned partitions)")
		} else {
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tMEMBER-ID\tCLIENT-ID\tHOST\tERROR")
			for _, p := range d.Partitions {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition,
					formatOffset(p.CommittedOffset), formatOffset(p.LogEndOffset), formatOffset(p.Lag),
					orDash(p.MemberID), orDash(p.ClientID), orDash(p.Host), orDash(p.Error))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// formatAssignment formats an assignment as "orders:0,1 payments:2" ("-"
// when empty).
func formatAssignment(a []assignedPartitions) string {
	if len(a) == 0 {
		return "-"
	}
	parts := make([]string, len(a))
	for i, tp := range a {
		parts[i] = tp.Topic + ":" + joinInt32s(tp.Partitions)
	}
	return strings.Join(parts, " ")
}
