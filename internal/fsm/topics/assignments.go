package topics

// Manual replica assignments (CreateTopics and CreatePartitions with
// explicit replicas). Every broker holds every partition whatever the
// assignment: it is recorded so that Metadata reports the replicas as the
// client assigned them and the first one as the partition's preferred
// leader. Which broker ids exist is the front-end's to check (the broker
// directory is not in the state machine); this file checks what can be
// checked without it, with Kafka's controller's errors
// (ReplicationControlManager.validateManualPartitionAssignment).

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
)

// checkAssignmentCommand is CheckCommand for the assignments of
// CreateTopic and CreatePartitions.
func checkAssignmentCommand(c core.Command) core.Result {
	switch c := c.(type) {
	case CreateTopic:
		if len(c.Assignments) == 0 {
			return core.Result{}
		}
		if int(c.Partitions) != len(c.Assignments) {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("%d partitions with %d manual partition assignments", c.Partitions, len(c.Assignments)))
		}
		if r := CheckAssignments(c.Assignments, -1); r.Code != 0 {
			return r
		}
		if int(c.ReplicationFactor) != len(c.Assignments[0]) {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("replication factor %d with manual partition assignments of %d replicas", c.ReplicationFactor, len(c.Assignments[0])))
		}
	case CreatePartitions:
		return CheckAssignments(c.Assignments, -1)
	}
	return core.Result{}
}

// CheckAssignments checks partitions' replica lists as Kafka's controller
// does, without the broker directory: none empty, no broker twice in one,
// all of one length, that of replicas unless it is -1.
func CheckAssignments(as [][]int32, replicas int) core.Result {
	for _, a := range as {
		if len(a) == 0 {
			return core.Fail(kerr.InvalidReplicaAssignment.Code, "The manual partition assignment includes an empty replica list.")
		}
		seen := make(map[int32]bool, len(a))
		for _, b := range a {
			if seen[b] {
				return core.Fail(kerr.InvalidReplicaAssignment.Code, fmt.Sprintf("The manual partition assignment includes the broker %d more than once.", b))
			}
			seen[b] = true
		}
		if replicas >= 0 && len(a) != replicas {
			return core.Fail(kerr.InvalidReplicaAssignment.Code, fmt.Sprintf("The manual partition assignment includes a partition with %d replica(s), but this is not consistent with previous partitions, which have %d replica(s).", len(a), replicas))
		}
		replicas = len(a)
	}
	return core.Result{}
}

// assignedReplicas is the replica count of t's assigned partitions, or -1
// if none is assigned.
func assignedReplicas(t *Topic) int {
	for _, a := range t.Replicas {
		if len(a) > 0 {
			return len(a)
		}
	}
	return -1
}

// assign records the replicas of t's partitions from index from on.
func assign(t *Topic, from int, as [][]int32) {
	if len(as) == 0 {
		if t.Replicas != nil {
			for len(t.Replicas) < len(t.Partitions) {
				t.Replicas = append(t.Replicas, nil)
			}
		}
		return
	}
	next := make([][]int32, 0, from+len(as))
	next = append(next, t.Replicas...)
	for len(next) < from {
		next = append(next, nil)
	}
	for _, a := range as {
		next = append(next, append([]int32(nil), a...))
	}
	t.Replicas = next
}

func encodeAssignments(w *core.Writer, as [][]int32) {
	w.Count(len(as))
	for _, a := range as {
		w.Count(len(a))
		for _, b := range a {
			w.I32(b)
		}
	}
}

func decodeAssignments(r *core.Reader) [][]int32 {
	n := r.Count(1)
	if n == 0 {
		return nil
	}
	as := make([][]int32, 0, n)
	for i := 0; i < n; i++ {
		m := r.Count(4)
		a := make([]int32, 0, m)
		for j := 0; j < m; j++ {
			a = append(a, r.I32())
		}
		as = append(as, a)
	}
	return as
}
