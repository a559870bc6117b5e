package kafka

// Metadata: v0-12
// Behavior:
//  * Every broker holds every partition: each partition lists this broker as
//    leader (leader epoch 0), replica and in-sync replica.
//  * A null topic list (v1+; an empty one in v0) asks for every topic.
//  * Unknown topics are created when auto.create.topics.enable is on and the
//    request allows it (always before v4), with num.partitions partitions;
//    the answer waits for the creation to commit, so the client gets the
//    new topic's partitions at once instead of LEADER_NOT_AVAILABLE.
//  * Topics may be asked for by ID (v10+); an unknown ID gets UNKNOWN_TOPIC_ID.
// Not done: racks; authorized operations are reported as not requested.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/internal/fsm"
)

const authorizedOpsUnknown = -2147483648

func handleMetadata(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.MetadataRequest)
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	s := c.s
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = s.opts.NodeID, s.opts.AdvertisedHost, s.opts.AdvertisedPort
	resp.Brokers = []kmsg.MetadataResponseBroker{b}
	clusterID := s.opts.ClusterID
	resp.ClusterID = &clusterID
	resp.ControllerID = s.opts.NodeID
	resp.AuthorizedOperations = authorizedOpsUnknown

	view := s.b.View()
	all := r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0)
	if all {
		for _, t := range view.Topics() {
			resp.Topics = append(resp.Topics, s.topicMetadata(t))
		}
		return done(resp), nil
	}

	autoCreate := s.opts.AutoCreateTopics && (r.Version < 4 || r.AllowAutoTopicCreation)
	var create []fsm.Command
	for _, rt := range r.Topics {
		if rt.Topic == nil {
			continue
		}
		if view.Topic(*rt.Topic) == nil && autoCreate && fsm.ValidTopicName(*rt.Topic) == nil {
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
			if err := fsm.ValidTopicName(*rt.Topic); err != nil {
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
			}
		}
		if t == nil {
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, s.topicMetadata(t))
	}
	return done(resp), nil
}

func (s *Server) topicMetadata(t *fsm.TopicView) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	mt.AuthorizedOperations = authorizedOpsUnknown
	for _, p := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Index
		mp.Leader = s.opts.NodeID
		mp.LeaderEpoch = 0
		mp.Replicas = []int32{s.opts.NodeID}
		mp.ISR = []int32{s.opts.NodeID}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
