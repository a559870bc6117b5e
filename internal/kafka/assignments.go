package kafka

// Manual replica assignments, as CreateTopics and CreatePartitions take
// them. Every broker holds every partition whatever the assignment; it is
// recorded (fsm.Topic.Replicas) so that Metadata reports the replicas as
// assigned and the first live one as the leader, the preferred leader of
// Kafka. The checks and errors are those of Kafka's controller
// (ReplicationControlManager.createTopic, createPartitions and
// validateManualPartitionAssignment); which brokers exist comes from the
// cluster's directory, which the state machine does not know.

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
)

// checkReplicas checks one partition's replicas against the directory:
// every broker registered, none twice, replicas of them (-1: any number),
// at least one alive. partition names it in messages.
func checkReplicas(all, live []BrokerInfo, replicas []int32, want int, partition int32) problem {
	if len(replicas) == 0 {
		return newProblem(kerr.InvalidReplicaAssignment, "The manual partition assignment includes an empty replica list.")
	}
	sorted := slices.Clone(replicas)
	slices.Sort(sorted)
	for i, b := range sorted {
		if !slices.ContainsFunc(all, func(m BrokerInfo) bool { return m.NodeID == b }) {
			return newProblem(kerr.InvalidReplicaAssignment,
				fmt.Sprintf("The manual partition assignment includes broker %d, but no such broker is registered.", b))
		}
		if i > 0 && sorted[i-1] == b {
			return newProblem(kerr.InvalidReplicaAssignment,
				fmt.Sprintf("The manual partition assignment includes the broker %d more than once.", b))
		}
	}
	if want >= 0 && len(replicas) != want {
		return newProblem(kerr.InvalidReplicaAssignment, fmt.Sprintf("The manual partition assignment includes a partition with %d replica(s), "+
			"but this is not consistent with previous partitions, which have %d replica(s).", len(replicas), want))
	}
	if !slices.ContainsFunc(replicas, func(b int32) bool { return slices.ContainsFunc(live, func(m BrokerInfo) bool { return m.NodeID == b }) }) {
		return newProblem(kerr.InvalidReplicaAssignment, fmt.Sprintf("All brokers specified in the manual partition assignment for "+
			"partition %d are fenced or in controlled shutdown.", partition))
	}
	return problem{}
}

// topicAssignments turns CreateTopics' assignments, given by partition
// index in any order, into one replica list per partition.
func (s *Server) topicAssignments(partitions int32, rf int16, given map[int32][]int32, order []int32) ([][]int32, problem) {
	if rf != -1 {
		return nil, newProblem(kerr.InvalidRequest, "A manual partition assignment was specified, but replication factor was not set to -1.")
	}
	if partitions != -1 {
		return nil, newProblem(kerr.InvalidRequest, "A manual partition assignment was specified, but numPartitions was not set to -1.")
	}
	all, live := s.members()
	seen := map[int32]bool{}
	want := -1
	for _, i := range order {
		if seen[i] {
			return nil, newProblem(kerr.InvalidReplicaAssignment, fmt.Sprintf("Found multiple manual partition assignments for partition %d", i))
		}
		seen[i] = true
		if p := checkReplicas(all, live, given[i], want, i); p.failed() {
			return nil, p
		}
		want = len(given[i])
	}
	if len(order) > fsm.MaxPartitions {
		return nil, newProblem(kerr.InvalidPartitions, fmt.Sprintf("number of partitions must be between 1 and %d, got %d", fsm.MaxPartitions, len(order)))
	}
	out := make([][]int32, len(order))
	for i := range out {
		if !seen[int32(i)] {
			return nil, newProblem(kerr.InvalidReplicaAssignment, "partitions should be a consecutive 0-based integer sequence")
		}
		out[i] = given[int32(i)]
	}
	return out, problem{}
}

// partitionAssignments checks CreatePartitions' assignments of the
// partitions to add to t: one per new partition, each as long as the
// topic's partitions' replica lists are reported (their assignment, or
// every broker).
func (s *Server) partitionAssignments(t *fsm.TopicView, count int32, as [][]int32) problem {
	have := int32(len(t.Partitions))
	if count <= have {
		return problem{} // INVALID_PARTITIONS, answered by the count check
	}
	if add := count - have; int32(len(as)) != add {
		return newProblem(kerr.InvalidReplicaAssignment,
			fmt.Sprintf("Attempted to add %d additional partition(s), but only %d assignment(s) were specified.", add, len(as)))
	}
	all, live := s.members()
	want := len(all)
	if len(t.Replicas) > 0 && len(t.Replicas[0]) > 0 {
		want = len(t.Replicas[0])
	}
	for i, a := range as {
		if p := checkReplicas(all, live, a, want, have+int32(i)); p.failed() {
			return p
		}
	}
	return problem{}
}

// partitionReplicas is what Metadata reports of one partition: its
// replicas, in-sync replicas and leader. An assigned partition reports its
// replicas as assigned, its live ones as in sync and the first live one as
// leader; a partition none of whose assigned replicas is alive, and every
// unassigned partition, is led by a live broker chosen from the topic and
// partition, as every broker can serve it.
func partitionReplicas(t *fsm.TopicView, index int32, m membership) (replicas, isr []int32, leaderID int32) {
	var assigned []int32
	if int(index) < len(t.Replicas) {
		assigned = t.Replicas[index]
	}
	if len(assigned) == 0 {
		return m.replicas, m.isr, leader(m.live, t.Name, index)
	}
	for _, b := range assigned {
		if slices.ContainsFunc(m.live, func(l BrokerInfo) bool { return l.NodeID == b }) {
			isr = append(isr, b)
		}
	}
	if len(isr) == 0 {
		l := leader(m.live, t.Name, index)
		return append(slices.Clone(assigned), l), []int32{l}, l
	}
	return assigned, isr, isr[0]
}
