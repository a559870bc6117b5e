package kafka

// CreatePartitions: v0-3
// Behavior:
//  * Authorization (acls.go): ALTER on each topic
//    (TOPIC_AUTHORIZATION_FAILED, whether it exists or not).
//  * Raises each topic's partition count to count. Every topic becomes one
//    CreatePartitions command; they are submitted together and commit in
//    one block. The answer waits up to timeout_ms (<= 0: 30 s).
//  * A count not above the current one gets INVALID_PARTITIONS, an unknown
//    topic UNKNOWN_TOPIC_OR_PARTITION, a topic named twice INVALID_REQUEST
//    ("Duplicate topic name.", one answer, nothing changed for it).
//  * An explicit assignment gives each new partition's replicas, checked
//    as Kafka's controller does (one list per new partition, else
//    INVALID_REPLICA_ASSIGNMENT "Attempted to add N additional
//    partition(s), but only M assignment(s) were specified."; each as long
//    as the topic's replica lists are reported, naming registered brokers
//    once each). Every broker still holds every partition; the assignment
//    is recorded for Metadata (assignments.go).
//  * validate_only runs the same checks against the committed state and
//    changes nothing.
// Not done: partition count policies (there is no alter policy).

import (
	"time"

	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleCreatePartitions(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.CreatePartitionsRequest)
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	view := c.s.b.View()

	names := make([]string, len(r.Topics))
	for i, rt := range r.Topics {
		names[i] = rt.Topic
	}
	seen := counts(names)
	answered := map[string]bool{}
	var (
		cmds     []fsm.Command
		slots    []int
		throttle time.Duration // controller_mutation_rate (throttle.go)
	)
	defer func() { resp.ThrottleMillis = c.mutationThrottle(throttle, r.Version >= 3) }()
	for _, rt := range r.Topics {
		if answered[rt.Topic] {
			continue
		}
		answered[rt.Topic] = true
		cmd := fsm.CreatePartitions{Name: rt.Topic, Count: rt.Count}
		if rt.Assignment != nil {
			cmd.Assignments = make([][]int32, len(rt.Assignment))
			for i, a := range rt.Assignment {
				cmd.Assignments[i] = a.Replicas
			}
		}
		var p problem
		switch {
		case seen[rt.Topic] > 1:
			p = newProblem(kerr.InvalidRequest, "Duplicate topic name.")
		case !c.authorize(kmsg.ACLOperationAlter, kmsg.ACLResourceTypeTopic, rt.Topic):
			p = newProblem(kerr.TopicAuthorizationFailed, "")
		default:
			p = c.s.checkCreatePartitions(view, cmd, rt.Assignment != nil)
			if t := view.Topic(rt.Topic); !p.failed() && !r.ValidateOnly && t != nil {
				d, refused := c.mutationQuota(int(rt.Count)-len(t.Partitions), r.Version >= 3)
				throttle = max(throttle, d)
				if refused {
					p = newProblem(kerr.ThrottlingQuotaExceeded, "")
				}
			}
		}
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		st.ErrorCode, st.ErrorMessage = p.code, p.message()
		resp.Topics = append(resp.Topics, st)
		if !p.failed() && !r.ValidateOnly {
			cmds = append(cmds, cmd)
			slots = append(slots, len(resp.Topics)-1)
		}
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	for i, o := range c.submit(r.TimeoutMillis, cmds...) {
		st := &resp.Topics[slots[i]]
		p := fromOutcome(o)
		st.ErrorCode, st.ErrorMessage = p.code, p.message()
	}
	return done(resp), nil
}

// checkCreatePartitions says why cmd cannot apply to the committed view.
// assigned says the request carried an assignment (possibly empty).
func (s *Server) checkCreatePartitions(view *fsm.View, cmd fsm.CreatePartitions, assigned bool) problem {
	t := view.Topic(cmd.Name)
	if t == nil {
		return newProblem(kerr.UnknownTopicOrPartition, fmt.Sprintf("topic '%s' does not exist", cmd.Name))
	}
	if have := int32(len(t.Partitions)); cmd.Count <= have {
		return newProblem(kerr.InvalidPartitions,
			fmt.Sprintf("topic currently has %d partitions, which is higher than or equal to the requested %d", have, cmd.Count))
	}
	if assigned {
		if p := s.partitionAssignments(t, cmd.Count, cmd.Assignments); p.failed() {
			return p
		}
	}
	if p := checked(cmd); p.failed() {
		return p
	}
	return problem{}
}
