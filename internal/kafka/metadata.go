package kafka

// Metadata: v0-12
// Behavior:
//  * Every broker holds every partition: Metadata lists every broker of the
//    cluster's directory, every broker as a replica of every partition, the
//    live ones (whose validator signed a block in the last 10 s of block
//    time) as in-sync replicas, and a leader chosen among the live brokers
//    from the topic and partition, so clients spread their load and move
//    off a dead broker at their next metadata refresh. Any broker accepts
//    produce and fetch for any partition. The leader epoch is always 0.
//  * A partition created with a manual replica assignment reports its
//    replicas as assigned, the live ones as in-sync, and the first live one
//    as leader (the preferred leader); when none is alive, a live broker
//    chosen as above leads it and is listed with them (assignments.go).
//  * A null topic list (v1+; an empty one in v0) asks for every topic.
//  * Unknown topics are created when auto.create.topics.enable is on and the
//    request allows it (always before v4), with num.partitions partitions;
//    the answer waits for the creation to commit, so the client gets the
//    new topic's partitions at once instead of LEADER_NOT_AVAILABLE.
//  * Topics may be asked for by ID (v10+); an unknown ID gets UNKNOWN_TOPIC_ID.
//  * Authorized operations (authorized_ops.go) are answered when asked for:
//    the topic's for every topic asked for by name (known or not) or
//    listed, and the cluster's in v8-10 (v11+ moved them to
//    DescribeCluster); -2147483648 otherwise and for unknown topic IDs,
//    as Kafka answers.
//  * Authorization (acls.go): DESCRIBE on a topic to see it: all-topic
//    requests list only those, a topic asked for without it gets
//    TOPIC_AUTHORIZATION_FAILED whether it exists or not; creating an
//    unknown topic also needs CREATE on the cluster or the topic (without
//    it, UNKNOWN_TOPIC_OR_PARTITION).
// Not done: racks.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

func handleMetadata(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.MetadataRequest)
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	s := c.s
	all, live := s.members()
	for _, m := range all {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID = m.NodeID
		b.Host, b.Port = c.advertised(m)
		if m.Rack != "" {
			b.Rack = kmsg.StringPtr(m.Rack)
		}
		resp.Brokers = append(resp.Brokers, b)
	}
	mem := membership{replicas: nodeIDs(all), isr: nodeIDs(live), live: live}
	clusterID := s.opts.ClusterID
	resp.ClusterID = &clusterID
	resp.ControllerID = s.opts.NodeID
	resp.AuthorizedOperations = authorizedOpsUnknown
	if r.IncludeClusterAuthorizedOperations { // decoded in v8-10 only
		resp.AuthorizedOperations = c.authorizedOps(kmsg.ACLResourceTypeCluster, clusterResourceName)
	}
	// topicOps is what a topic's metadata says the principal may do.
	topicOps := func(name string) int32 {
		if !r.IncludeTopicAuthorizedOperations {
			return authorizedOpsUnknown
		}
		return c.authorizedOps(kmsg.ACLResourceTypeTopic, name)
	}

	view := s.b.View()
	allTopics := r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0)
	describable := func(name string) bool {
		return c.authorize(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, name)
	}
	if allTopics {
		for _, t := range view.Topics() {
			if describable(t.Name) {
				resp.Topics = append(resp.Topics, topicMetadata(t, mem, topicOps(t.Name)))
			}
		}
		return done(resp), nil
	}

	autoCreate := s.opts.AutoCreateTopics && (r.Version < 4 || r.AllowAutoTopicCreation)
	var create []fsm.Command
	for _, rt := range r.Topics {
		if rt.Topic == nil {
			continue
		}
		if view.Topic(*rt.Topic) == nil && autoCreate && c.validTopicName(*rt.Topic) == nil && describable(*rt.Topic) && c.mayCreateTopic(*rt.Topic) {
			create = append(create, fsm.CreateTopic{Name: *rt.Topic, Partitions: s.opts.DefaultPartitions, ReplicationFactor: -1})
		}
	}
	if len(create) > 0 {
		c.submit(0, create...) // failures show below as unknown topics
		view = s.b.View()
	}

	for _, rt := range r.Topics {
		var t *fsm.TopicView
		mt := kmsg.NewMetadataResponseTopic()
		mt.AuthorizedOperations = authorizedOpsUnknown
		switch {
		case rt.Topic != nil:
			mt.Topic = rt.Topic
			mt.AuthorizedOperations = topicOps(*rt.Topic)
			if !describable(*rt.Topic) {
				// Whether it exists or not: a denied topic is not revealed.
				mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
				resp.Topics = append(resp.Topics, mt)
				continue
			}
			if err := c.validTopicName(*rt.Topic); err != nil {
				mt.ErrorCode = kerr.InvalidTopicException.Code
				resp.Topics = append(resp.Topics, mt)
				continue
			}
			t = view.Topic(*rt.Topic)
			if t == nil {
				mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		default:
			mt.TopicID = rt.TopicID
			t = view.TopicByID(fsm.TopicID(rt.TopicID))
			if t == nil {
				mt.ErrorCode = kerr.UnknownTopicID.Code
			} else if !describable(t.Name) {
				mt.ErrorCode, t = kerr.TopicAuthorizationFailed.Code, nil
			}
		}
		if t == nil {
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, topicMetadata(t, mem, topicOps(t.Name)))
	}
	return done(resp), nil
}

// membership is what every partition's metadata says about the brokers.
type membership struct {
	replicas, isr []int32
	live          []BrokerInfo
}

// topicMetadata is t's metadata; ops is its authorized operations field.
func topicMetadata(t *fsm.TopicView, m membership, ops int32) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	mt.AuthorizedOperations = ops
	for _, p := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Index
		mp.Replicas, mp.ISR, mp.Leader = partitionReplicas(t, p.Index, m)
		mp.LeaderEpoch = 0
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
