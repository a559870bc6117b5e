package kafka

// DeleteTopics: v1-6
// Behavior:
//  * Topics are named (every version) or, from v6, given by topic ID. Each
//    becomes one DeleteTopic command; they are submitted together and
//    commit in one block. The answer waits up to timeout_ms (<= 0: 30 s).
//  * An unknown name gets UNKNOWN_TOPIC_OR_PARTITION, an unknown ID
//    UNKNOWN_TOPIC_ID. v6 answers carry both the name and the ID.
//  * As Kafka's controller does, a topic given both a name and an ID, a
//    name or ID given twice, or a name that resolves to an ID also given
//    gets INVALID_REQUEST and is not deleted.
//  * A deleted topic's partitions disappear from reads at once; its files
//    are removed after the commit.
//  * Authorization (acls.go): DELETE on each topic
//    (TOPIC_AUTHORIZATION_FAILED, for a name whether it exists or not).
// Not done: delete.topic.enable (deletion is always allowed).

import (
	"time"

	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleDeleteTopics(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DeleteTopicsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	view := c.s.b.View()

	topics := r.Topics
	if r.Version < 6 {
		topics = make([]kmsg.DeleteTopicsRequestTopic, 0, len(r.TopicNames))
		for _, name := range r.TopicNames {
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			topics = append(topics, rt)
		}
	}
	nameCount := map[string]int{}
	idCount := map[fsm.TopicID]int{}
	for _, rt := range topics {
		if rt.Topic != nil {
			nameCount[*rt.Topic]++
		} else {
			idCount[fsm.TopicID(rt.TopicID)]++
		}
	}

	var (
		cmds     []fsm.Command
		slots    []int
		answered = map[string]bool{}
		byID     = map[fsm.TopicID]bool{}
		throttle time.Duration // controller_mutation_rate (throttle.go)
	)
	defer func() { resp.ThrottleMillis = c.mutationThrottle(throttle, r.Version >= 5) }()
	for _, rt := range topics {
		if rt.Topic == nil {
			byID[fsm.TopicID(rt.TopicID)] = idCount[fsm.TopicID(rt.TopicID)] == 1
		}
	}
	for _, rt := range topics {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		key := fmt.Sprintf("id:%x", rt.TopicID)
		if rt.Topic != nil {
			key = "name:" + *rt.Topic
		}
		if answered[key] {
			continue
		}
		answered[key] = true
		var (
			cmd fsm.DeleteTopic
			p   problem
		)
		switch id := fsm.TopicID(rt.TopicID); {
		case rt.Topic != nil && !id.IsZero():
			p = newProblem(kerr.InvalidRequest, "You may not specify both topic name and topic id.")
		case rt.Topic != nil:
			name := *rt.Topic
			t := view.Topic(name)
			switch {
			case nameCount[name] > 1:
				p = newProblem(kerr.InvalidRequest, "Duplicate topic name.")
			case !c.authorize(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, name):
				p = newProblem(kerr.TopicAuthorizationFailed, "")
			case t == nil:
				p = newProblem(kerr.UnknownTopicOrPartition, fmt.Sprintf("topic '%s' does not exist", name))
			case byID[t.ID]:
				st.TopicID = t.ID
				p = newProblem(kerr.InvalidRequest, "The provided topic name maps to an ID that was already supplied.")
			default:
				st.TopicID = t.ID
				cmd = fsm.DeleteTopic{Name: name}
			}
		default:
			t := view.TopicByID(id)
			switch {
			case idCount[id] > 1:
				p = newProblem(kerr.InvalidRequest, "Duplicate topic id.")
			case t == nil:
				p = newProblem(kerr.UnknownTopicID, fmt.Sprintf("topic id %s does not exist", id))
			case !c.authorize(kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, t.Name):
				p = newProblem(kerr.TopicAuthorizationFailed, "")
			default:
				st.Topic = kmsg.StringPtr(t.Name)
				cmd = fsm.DeleteTopic{ID: id}
			}
		}
		if !p.failed() {
			p = checked(cmd)
		}
		t := view.Topic(cmd.Name)
		if cmd.Name == "" {
			t = view.TopicByID(cmd.ID)
		}
		if !p.failed() && t != nil {
			d, refused := c.mutationQuota(len(t.Partitions), r.Version >= 5)
			throttle = max(throttle, d)
			if refused {
				p = newProblem(kerr.ThrottlingQuotaExceeded, "")
			}
		}
		st.ErrorCode, st.ErrorMessage = p.code, p.message()
		resp.Topics = append(resp.Topics, st)
		if !p.failed() {
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
