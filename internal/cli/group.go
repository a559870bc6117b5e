package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// This file holds `stele group` (kafka-consumer-groups.sh), `group list`,
// and what the group subcommands share: group lookups, the --topic
// T[:P[,P...]] syntax and the group errors. describe is in
// group_describe.go, reset-offsets in group_reset.go, delete and
// delete-offsets in group_delete.go.

// errGroupActive is the cause of the refusal to reset the offsets of a group
// that has members (errors.Is(err, errGroupActive)).
var errGroupActive = errors.New("stele/cli: consumer group is active")

// groupStates are the group states a broker reports (Kafka's GroupState,
// classic and KIP-848 groups), in their canonical spelling. --state accepts
// them in any case.
var groupStates = []string{
	"PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling",
}

// newConsumerGroupCmd returns `stele group`, the counterpart of
// kafka-consumer-groups.sh.
func newConsumerGroupCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("group", "List, describe, reset offsets of and delete consumer groups",
		newGroupListCmd(g),
		newGroupDescribeCmd(g),
		newGroupResetOffsetsCmd(g),
		newGroupDeleteCmd(g),
		newGroupDeleteOffsetsCmd(g),
	)
}

// groupListed is the JSON form of one `group list` entry. GroupType
// (classic, consumer, share) is given by brokers that know KIP-848.
type groupListed struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	GroupType    string `json:"group_type,omitempty"`
	Coordinator  int32  `json:"coordinator"`
}

func newGroupListCmd(g *globalOptions) *cobra.Command {
	var states []string
	c := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups with their state (kafka-consumer-groups.sh --list)",
		Long: `List the groups of every broker with their state and protocol type
(kafka-consumer-groups.sh --list --state). --state keeps only groups in the
given states (KIP-518): repeat it or separate states with commas; states are
` + strings.Join(groupStates, ", ") + ` (any case).`,
		Example: `  stele group list
  stele group list --state Empty,Dead --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := parseGroupStates(states)
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
			listed, listErr := adm.ListGroups(ctx, filter...)
			if err := partialOK(listErr); err != nil {
				return fmt.Errorf("list groups: %w", err)
			}
			out := []groupListed{}
			for _, l := range listed.Sorted() {
				// Brokers before ListGroups v4 ignore the filter.
				if len(filter) > 0 && !slices.Contains(filter, l.State) {
					continue
				}
				out = append(out, groupListed{
					Group: l.Group, State: l.State, ProtocolType: l.ProtocolType,
					GroupType: l.GroupType, Coordinator: l.Coordinator,
				})
			}
			if g.jsonOutput() {
				err = writeJSON(cmd.OutOrStdout(), out)
			} else {
				err = printGroupsListed(cmd, out)
			}
			if err != nil {
				return err
			}
			if listErr != nil { // some brokers did not answer
				return fmt.Errorf("list groups: the list may be incomplete: %w", listErr)
			}
			return nil
		},
	}
	c.Flags().StringSliceVar(&states, "state", nil,
		"only groups in these states (repeatable, or comma-separated): "+strings.Join(groupStates, "|"))
	return c
}

func printGroupsListed(cmd *cobra.Command, out []groupListed) error {
	tw := newTable(cmd.OutOrStdout())
	fmt.Fprintln(tw, "GROUP\tSTATE\tPROTOCOL-TYPE")
	for _, l := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Group, orDash(l.State), orDash(l.ProtocolType))
	}
	return tw.Flush()
}

// parseGroupStates canonicalises --state values (case-insensitive, as Kafka's
// tool parses them); an unknown state is a usage error.
func parseGroupStates(in []string) ([]string, error) {
	var out []string
	for _, s := range in {
		s = strings.TrimSpace(s)
		i := slices.IndexFunc(groupStates, func(st string) bool { return strings.EqualFold(st, s) })
		if i < 0 {
			return nil, usageErrorf("invalid --state %q: valid states are %s", s, strings.Join(groupStates, ", "))
		}
		if !slices.Contains(out, groupStates[i]) {
			out = append(out, groupStates[i])
		}
	}
	return out, nil
}

// groupNotFoundError says a group does not exist. It matches
// kerr.GroupIDNotFound with errors.Is.
type groupNotFoundError struct{ group string }

func (e groupNotFoundError) Error() string {
	return fmt.Sprintf("group %q does not exist (see 'stele group list')", e.group)
}

// Is makes errors.Is(err, kerr.GroupIDNotFound) true.
func (e groupNotFoundError) Is(target error) bool { return target == kerr.GroupIDNotFound }

// groupError turns the error a broker gave for an operation on a group into
// the error a person reads: GROUP_ID_NOT_FOUND becomes groupNotFoundError,
// NON_EMPTY_GROUP says what to do, anything else names the Kafka error.
func groupError(what, group string, err error, brokerMsg string) error {
	switch {
	case errors.Is(err, kerr.GroupIDNotFound) && brokerMsg != "":
		// Kafka 4 says so of a KIP-848 group, which DescribeGroups
		// does not describe: pass on why.
		return fmt.Errorf("%w (broker says: %s)", groupNotFoundError{group}, brokerMsg)
	case errors.Is(err, kerr.GroupIDNotFound):
		return groupNotFoundError{group}
	case errors.Is(err, kerr.NonEmptyGroup):
		return fmt.Errorf("%s: %w (group %q has active members; stop its consumers first)", what, err, group)
	}
	return brokerError(what, err, brokerMsg)
}

// groupState returns the state of group, "Dead" when it does not exist. A
// classic group is described (DescribeGroups); a group the broker does not
// describe as classic (Kafka 4 answers GROUP_ID_NOT_FOUND there for a
// KIP-848 consumer group) is looked up in ListGroups, so that its state is
// still known.
func groupState(ctx context.Context, adm *kadm.Client, group string) (string, error) {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "", fmt.Errorf("describe group %q: %w", group, err)
	}
	d, ok := described[group]
	switch {
	case !ok:
		return "", fmt.Errorf("describe group %q: the broker did not answer for this group", group)
	case d.Err == nil && d.State != "Dead":
		return d.State, nil
	case d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound):
		return "", groupError(fmt.Sprintf("describe group %q", group), group, d.Err, d.ErrMessage)
	}
	listed, err := adm.ListGroups(ctx)
	if err = partialOK(err); err != nil {
		return "", fmt.Errorf("list groups: %w", err)
	}
	if l, ok := listed[group]; ok && l.State != "" {
		return l.State, nil
	}
	return "Dead", nil
}

// committedOffsets returns the offsets group has committed (partitions whose
// committed offset is -1 are left out). A group that does not exist has none.
func committedOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.Offsets, error) {
	fetched, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return kadm.Offsets{}, nil
	}
	if err != nil {
		return nil, groupError(fmt.Sprintf("fetch committed offsets of group %q", group), group, err, "")
	}
	out := make(kadm.Offsets)
	var errs []error
	fetched.Each(func(o kadm.OffsetResponse) {
		switch {
		case o.Err != nil:
			errs = append(errs, brokerError(fmt.Sprintf("fetch committed offset of group %q topic %q partition %d",
				group, o.Topic, o.Partition), o.Err, ""))
		case o.At >= 0:
			out.Add(o.Offset)
		}
	})
	return out, errors.Join(errs...)
}

// topicSpec is one --topic T[:P[,P...]]; partitions is nil for all of them.
type topicSpec struct {
	topic      string
	partitions []int32
}

// parseTopicSpec parses T or T:P[,P...]. Kafka topic names cannot hold a
// ':', so the last ':' separates the partitions.
func parseTopicSpec(s string) (topicSpec, error) {
	topic, parts, hasParts := s, "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		topic, parts, hasParts = s[:i], s[i+1:], true
	}
	if strings.TrimSpace(topic) == "" {
		return topicSpec{}, usageErrorf("invalid --topic %q: want TOPIC or TOPIC:PARTITION[,PARTITION...]", s)
	}
	spec := topicSpec{topic: topic}
	if !hasParts {
		return spec, nil
	}
	for _, p := range strings.Split(parts, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || n < 0 {
			return topicSpec{}, usageErrorf("invalid --topic %q: partition %q is not a number from 0", s, p)
		}
		if !slices.Contains(spec.partitions, int32(n)) {
			spec.partitions = append(spec.partitions, int32(n))
		}
	}
	return spec, nil
}

// parseTopicSpecs parses every --topic and merges those that name the same
// topic (a topic named without partitions means all of them).
func parseTopicSpecs(in []string) ([]topicSpec, error) {
	var out []topicSpec
	for _, s := range in {
		spec, err := parseTopicSpec(s)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(out, func(o topicSpec) bool { return o.topic == spec.topic })
		switch {
		case i < 0:
			out = append(out, spec)
		case out[i].partitions == nil || spec.partitions == nil:
			out[i].partitions = nil
		default:
			for _, p := range spec.partitions {
				if !slices.Contains(out[i].partitions, p) {
					out[i].partitions = append(out[i].partitions, p)
				}
			}
		}
	}
	return out, nil
}

// resolveTopicSpecs turns specs into partitions, checking that each topic and
// partition exists. A topic the broker does not know is taken from committed
// instead when it is there (the offsets of a deleted topic can still be
// deleted); otherwise it is a topicNotFoundError.
func resolveTopicSpecs(ctx context.Context, adm *kadm.Client, specs []topicSpec, committed kadm.Offsets) (kadm.TopicsSet, error) {
	topics := make([]string, len(specs))
	for i, s := range specs {
		topics[i] = s.topic
	}
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("look up topics: %w", err)
	}
	set := make(kadm.TopicsSet)
	var errs []error
	for _, s := range specs {
		td, ok := tds[s.topic]
		var (
			exists      []int32
			onlyCommits bool
		)
		switch {
		case ok && td.Err == nil:
			for _, p := range td.Partitions.Sorted() {
				exists = append(exists, p.Partition)
			}
		case ok && !isUnknownTopic(td.Err):
			errs = append(errs, brokerError(fmt.Sprintf("look up topic %q", s.topic), td.Err, ""))
			continue
		case len(committed[s.topic]) > 0:
			onlyCommits = true
			for p := range committed[s.topic] {
				exists = append(exists, p)
			}
		default:
			errs = append(errs, topicNotFoundError{s.topic})
			continue
		}
		if s.partitions == nil {
			set.Add(s.topic, exists...)
			continue
		}
		for _, p := range s.partitions {
			switch {
			case slices.Contains(exists, p):
				set.Add(s.topic, p)
			case onlyCommits:
				errs = append(errs, fmt.Errorf("topic %q does not exist and the group has no committed offset for its partition %d",
					s.topic, p))
			default:
				errs = append(errs, fmt.Errorf("topic %q has %d partitions (0 to %d); partition %d does not exist",
					s.topic, len(exists), len(exists)-1, p))
			}
		}
	}
	return set, errors.Join(errs...)
}

// orDash returns s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
