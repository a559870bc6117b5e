package kafka

// CreateTopics: v2-7
// Behavior:
//  * Every topic of the request becomes one CreateTopic command; they are
//    submitted together and commit in one block. The answer waits for the
//    commit up to timeout_ms (<= 0 waits up to 30 s); a topic still pending
//    then gets REQUEST_TIMED_OUT and may yet be created.
//  * num_partitions -1 means num.partitions (Options.DefaultPartitions).
//    replication_factor -1 means the default, reported as the number of
//    brokers. Every broker holds every partition, so a replication factor
//    is recorded but places nothing, and one larger than the cluster is
//    accepted.
//  * A manual replica assignment is taken as Kafka's controller takes it
//    (num_partitions and replication_factor must be -1: INVALID_REQUEST;
//    partitions listed once each, contiguous from 0, replica lists of one
//    length naming registered brokers once each, at least one alive:
//    INVALID_REPLICA_ASSIGNMENT with Kafka's message). Every broker still
//    holds every partition; the assignment is recorded, Metadata reports it
//    and the first live replica leads the partition (assignments.go).
//  * Authorization (acls.go): CREATE on the cluster or on the topic
//    (TOPIC_AUTHORIZATION_FAILED); the created topic's configs are
//    answered only with DESCRIBE_CONFIGS on it (else config error
//    TOPIC_AUTHORIZATION_FAILED), as Kafka.
//  * A name given more than once gets one INVALID_REQUEST answer
//    ("Duplicate topic name.") and is not created; the other topics are,
//    as Kafka's controller does.
//  * An invalid name gets INVALID_TOPIC_EXCEPTION; an existing topic
//    TOPIC_ALREADY_EXISTS; a name differing from another topic's only by
//    '.' versus '_' INVALID_TOPIC_EXCEPTION; bad counts INVALID_PARTITIONS
//    or INVALID_REPLICATION_FACTOR; a config with a null value
//    INVALID_REQUEST; an unknown config name or invalid value
//    INVALID_CONFIG with Kafka's message. Each topic is answered on its own.
//  * validate_only runs the same checks against the committed state and
//    creates nothing.
//  * A view (configs stele.view.*, docs/subjects.md) needs READ on each of
//    its sources too (TOPIC_AUTHORIZATION_FAILED naming the source); its
//    partitions are its sources' (num_partitions is not used), and the
//    state machine checks the rest (sources that exist and are not
//    views, the pattern, the order).
//  * v5+ answers with the topic's configs (explicit ones as
//    DYNAMIC_TOPIC_CONFIG, the others as DEFAULT_CONFIG), its partition
//    count and replication factor; v7 with its topic ID (zero when
//    validate_only).
// Not done: create.topic.policy.class.name; the tagged
// topic_config_error_code is always 0 (configs are always returned).

import (
	"time"

	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleCreateTopics(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.CreateTopicsRequest)
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	view := c.s.b.View()

	names := make([]string, len(r.Topics))
	for i, rt := range r.Topics {
		names[i] = rt.Topic
	}
	seen := counts(names)
	answered := map[string]bool{}
	accepted := map[string]bool{} // names this request creates, for collisions
	var throttle time.Duration    // controller_mutation_rate (throttle.go)
	defer func() { resp.ThrottleMillis = c.mutationThrottle(throttle, r.Version >= 6) }()
	var (
		cmds  []fsm.Command
		slots []int // response index of each command
	)
	for _, rt := range r.Topics {
		if answered[rt.Topic] {
			continue
		}
		answered[rt.Topic] = true
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		var (
			cmd fsm.CreateTopic
			p   problem
		)
		switch {
		case seen[rt.Topic] > 1:
			p = newProblem(kerr.InvalidRequest, "Duplicate topic name.")
		case !c.mayCreateTopic(rt.Topic):
			p = newProblem(kerr.TopicAuthorizationFailed, "")
		default:
			cmd, p = c.s.checkCreateTopic(c, view, &rt, accepted)
			if !p.failed() && !r.ValidateOnly {
				d, refused := c.mutationQuota(int(cmd.Partitions), r.Version >= 6)
				throttle = max(throttle, d)
				if refused {
					p = newProblem(kerr.ThrottlingQuotaExceeded, "")
				}
			}
		}
		if p.failed() {
			st.ErrorCode, st.ErrorMessage = p.code, p.message()
			resp.Topics = append(resp.Topics, st)
			continue
		}
		accepted[cmd.Name] = true
		st.NumPartitions = cmd.Partitions
		st.ReplicationFactor = cmd.ReplicationFactor
		if st.ReplicationFactor == -1 {
			st.ReplicationFactor = c.s.brokerCount()
		}
		explicit := make(map[string]string, len(cmd.Configs))
		for _, e := range cmd.Configs {
			explicit[e.Name] = e.Value
		}
		if !c.authorize(kmsg.ACLOperationDescribeConfigs, kmsg.ACLResourceTypeTopic, cmd.Name) {
			st.ConfigErrorCode = kerr.TopicAuthorizationFailed.Code // Kafka's answer without DESCRIBE_CONFIGS
			explicit = nil
		}
		for _, e := range topicConfigEntries(explicit, view.LogDefaults(), c.s.b.Upgrade().Version) {
			if st.ConfigErrorCode != 0 {
				break
			}
			rc := kmsg.NewCreateTopicsResponseTopicConfig()
			rc.Name, rc.Value = e.name, kmsg.StringPtr(e.value)
			rc.ReadOnly, rc.Source, rc.IsSensitive = e.readOnly, int8(e.source), e.sensitive
			st.Configs = append(st.Configs, rc)
		}
		resp.Topics = append(resp.Topics, st)
		if !r.ValidateOnly {
			cmds = append(cmds, cmd)
			slots = append(slots, len(resp.Topics)-1)
		}
	}
	if len(cmds) == 0 {
		return done(resp), nil
	}
	for i, o := range c.submit(r.TimeoutMillis, cmds...) {
		st := &resp.Topics[slots[i]]
		if p := fromOutcome(o); p.failed() {
			failed := kmsg.NewCreateTopicsResponseTopic()
			failed.Topic = st.Topic
			failed.ErrorCode, failed.ErrorMessage = p.code, p.message()
			*st = failed
			continue
		}
		st.TopicID = o.TopicID
	}
	return done(resp), nil
}

// checkCreateTopic turns one requested topic into a command, or says why it
// cannot be created, checking it against view and the names accepted
// earlier in the same request. The order of the checks is Kafka's.
func (s *Server) checkCreateTopic(c *conn, view *fsm.View, rt *kmsg.CreateTopicsRequestTopic, accepted map[string]bool) (fsm.CreateTopic, problem) {
	if err := c.validTopicName(rt.Topic); err != nil {
		return fsm.CreateTopic{}, newProblem(kerr.InvalidTopicException, err.Error())
	}
	if view.Topic(rt.Topic) != nil {
		return fsm.CreateTopic{}, newProblem(kerr.TopicAlreadyExists, fmt.Sprintf("topic '%s' already exists", rt.Topic))
	}
	if other := collidingTopic(view, rt.Topic, accepted); other != "" {
		return fsm.CreateTopic{}, newProblem(kerr.InvalidTopicException,
			fmt.Sprintf("topic '%s' collides with existing topic: %s (names may not differ only by '.' and '_')", rt.Topic, other))
	}
	var nulls []string
	cmd := fsm.CreateTopic{Name: rt.Topic, Partitions: rt.NumPartitions, ReplicationFactor: rt.ReplicationFactor}
	if len(rt.ReplicaAssignment) > 0 {
		given := make(map[int32][]int32, len(rt.ReplicaAssignment))
		order := make([]int32, len(rt.ReplicaAssignment))
		for i, a := range rt.ReplicaAssignment {
			order[i] = a.Partition
			if _, twice := given[a.Partition]; !twice {
				given[a.Partition] = a.Replicas
			}
		}
		as, p := s.topicAssignments(rt.NumPartitions, rt.ReplicationFactor, given, order)
		if p.failed() {
			return fsm.CreateTopic{}, p
		}
		cmd.Assignments, cmd.Partitions, cmd.ReplicationFactor = as, int32(len(as)), int16(len(as[0]))
	} else if cmd.Partitions == -1 {
		cmd.Partitions = s.opts.DefaultPartitions
	}
	for _, rc := range rt.Configs {
		if rc.Value == nil {
			nulls = append(nulls, rc.Name)
			continue
		}
		cmd.Configs = append(cmd.Configs, fsm.ConfigEntry{Name: rc.Name, Value: *rc.Value})
	}
	if len(nulls) > 0 {
		return fsm.CreateTopic{}, newProblem(kerr.InvalidRequest, "Null value not supported for topic configs: "+strings.Join(nulls, ","))
	}
	if p := checked(cmd); p.failed() {
		return fsm.CreateTopic{}, p
	}
	if p := c.checkViewSources(view, &cmd); p.failed() {
		return fsm.CreateTopic{}, p
	}
	return cmd, problem{}
}

// checkViewSources checks the sources of a view (a topic created with
// stele.view.from, docs/subjects.md): the principal must be allowed to
// READ each, or a view would read for it what it may not; and it sets the
// partitions and the configs the state machine gives the view, for the
// answer and the mutation quota. A source that does not exist is left to the state
// machine's answer, which names it.
func (c *conn) checkViewSources(view *fsm.View, cmd *fsm.CreateTopic) problem {
	var from string
	global := false
	for _, e := range cmd.Configs {
		switch e.Name {
		case "stele.view.from":
			from = e.Value
		case "stele.view.order":
			global = e.Value == "global"
		}
	}
	if strings.TrimSpace(from) == "" {
		return problem{}
	}
	tenant, _ := fsm.SplitTenant(cmd.Name)
	var parts []int32
	for _, local := range strings.Split(from, ",") {
		local = strings.TrimSpace(local)
		if local == "" {
			continue
		}
		name := fsm.Qualify(tenant, local)
		if !c.authorize(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, name) {
			return newProblem(kerr.TopicAuthorizationFailed, fmt.Sprintf("view '%s': not authorized to read its source topic '%s'", cmd.Name, local))
		}
		if tv := view.Topic(name); tv != nil {
			parts = append(parts, int32(len(tv.Partitions)))
		}
	}
	if n := fsm.ViewPartitions(global, parts); n > 0 {
		cmd.Partitions = n
	}
	// The configs the state machine fixes on a view unless given, so that
	// the answer describes what it makes.
	cmd.Configs = fsm.WithViewConfigs(cmd.Configs)
	return problem{}
}

// collidingTopic returns a topic, committed or accepted earlier in this
// request, whose name differs from name only by '.' versus '_' (Kafka
// forbids these: their metric names collide). The state machine checks the
// same when it applies the command.
func collidingTopic(view *fsm.View, name string, accepted map[string]bool) string {
	if !strings.ContainsAny(name, "._") {
		return ""
	}
	norm := strings.ReplaceAll(name, ".", "_")
	collides := func(other string) bool { return other != name && strings.ReplaceAll(other, ".", "_") == norm }
	for _, t := range view.Topics() {
		if collides(t.Name) {
			return t.Name
		}
	}
	for other := range accepted {
		if collides(other) {
			return other
		}
	}
	return ""
}
