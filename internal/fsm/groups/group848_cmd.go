package groups

import (
	"fmt"
	"regexp"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
)

// KindConsumerGroupHeartbeat is the KIP-848 consumer group heartbeat.
const KindConsumerGroupHeartbeat core.Kind = 14

// registerGroup848Commands registers ConsumerGroupHeartbeat (RegisterGroups
// calls it).
func registerGroup848Commands(r *core.Registry, h *topics.TopicHooks) {
	core.RegisterModuleCommand(r, groupsOf, KindConsumerGroupHeartbeat, "ConsumerGroupHeartbeat", ModGroups, decodeConsumerHeartbeat, CheckGroupCommand,
		func(f *Coordinator, c ConsumerGroupHeartbeat, at core.CmdAt) core.Result {
			if r, ok := f.shareNamed(c.Group); ok {
				return r
			}
			return f.consumerGroupHeartbeat(c, at.Tx, at.Cmd)
		})
}

// KIP-848 settings: Kafka's defaults for group.consumer.session.timeout.ms
// and group.consumer.heartbeat.interval.ms, and the server-side assignors
// served (group.consumer.assignors; the first is the default).
const (
	ConsumerSessionTimeoutMs    = 45_000
	ConsumerHeartbeatIntervalMs = 5_000
	MaxSubscribedTopics         = 10_000
)

// ConsumerAssignors are the server-side assignors, the default first.
var ConsumerAssignors = []string{"uniform", "range"}

// OwnedTopic is a topic's partitions a member reports it owns.
type OwnedTopic struct {
	ID         core.TopicID
	Partitions []int32
}

// ConsumerGroupHeartbeat is one heartbeat of a KIP-848 consumer group
// member: it joins (epoch 0), leaves (-1; -2 for a static member that will
// return), or reports what it owns and receives its assignment. A nil
// field means "unchanged since the last heartbeat", as on the wire; the Set
// flags carry the difference between null and empty.
type ConsumerGroupHeartbeat struct {
	Group              string
	MemberID           string
	Epoch              int32
	InstanceID         string
	RackID             string
	ClientID           string
	ClientHost         string
	RebalanceTimeoutMs int32 // -1: unchanged
	TopicsSet          bool
	Topics             []string
	RegexSet           bool
	Regex              string
	AssignorSet        bool
	Assignor           string
	OwnedSet           bool
	Owned              []OwnedTopic
	// GenerateID: the member id is the server's to make (v0); from v1 the
	// client makes it.
	GenerateID bool
}

func (ConsumerGroupHeartbeat) Kind() core.Kind { return KindConsumerGroupHeartbeat }

func (c ConsumerGroupHeartbeat) Encode(w *core.Writer) {
	w.Str(c.Group)
	w.Str(c.MemberID)
	w.I32(c.Epoch)
	w.Str(c.InstanceID)
	w.Str(c.RackID)
	w.Str(c.ClientID)
	w.Str(c.ClientHost)
	w.I32(c.RebalanceTimeoutMs)
	w.Bool(c.TopicsSet)
	w.Count(len(c.Topics))
	for _, t := range c.Topics {
		w.Str(t)
	}
	w.Bool(c.RegexSet)
	w.Str(c.Regex)
	w.Bool(c.AssignorSet)
	w.Str(c.Assignor)
	w.Bool(c.OwnedSet)
	w.Count(len(c.Owned))
	for _, o := range c.Owned {
		w.Raw(o.ID[:])
		w.Count(len(o.Partitions))
		for _, p := range o.Partitions {
			w.I32(p)
		}
	}
	w.Bool(c.GenerateID)
}

func decodeConsumerHeartbeat(r *core.Reader) ConsumerGroupHeartbeat {
	c := ConsumerGroupHeartbeat{Group: r.Str(), MemberID: r.Str(), Epoch: r.I32(), InstanceID: r.Str(), RackID: r.Str(),
		ClientID: r.Str(), ClientHost: r.Str(), RebalanceTimeoutMs: r.I32(), TopicsSet: r.Bool()}
	for i, n := 0, r.Count(1); i < n; i++ {
		c.Topics = append(c.Topics, r.Str())
	}
	c.RegexSet, c.Regex, c.AssignorSet, c.Assignor, c.OwnedSet = r.Bool(), r.Str(), r.Bool(), r.Str(), r.Bool()
	for i, n := 0, r.Count(17); i < n; i++ {
		var o OwnedTopic
		copy(o.ID[:], r.Take(16))
		for j, np := 0, r.Count(4); j < np; j++ {
			o.Partitions = append(o.Partitions, r.I32())
		}
		c.Owned = append(c.Owned, o)
	}
	c.GenerateID = r.Bool()
	return c
}

func checkConsumerHeartbeat(c ConsumerGroupHeartbeat) core.Result {
	if r := CheckGroupIDs(c.Group, c.MemberID, c.InstanceID); r.Code != 0 {
		return r
	}
	switch {
	case c.Epoch < -2:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("member epoch %d is invalid", c.Epoch))
	case c.Epoch != 0 && c.MemberID == "":
		return core.Fail(kerr.InvalidRequest.Code, "MemberId can't be empty.")
	case c.Epoch == 0 && !c.GenerateID && c.MemberID == "":
		return core.Fail(kerr.InvalidRequest.Code, "MemberId can't be empty.")
	case c.Epoch == 0 && (c.RebalanceTimeoutMs <= 0 || c.RebalanceTimeoutMs > MaxRebalanceTimeoutMs):
		return core.Fail(kerr.InvalidRequest.Code, "RebalanceTimeoutMs must be provided in first request.")
	case c.Epoch == 0 && !c.TopicsSet && !c.RegexSet:
		return core.Fail(kerr.InvalidRequest.Code, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
	case c.Epoch == 0 && (!c.OwnedSet || len(c.Owned) > 0):
		return core.Fail(kerr.InvalidRequest.Code, "TopicPartitions must be empty when (re-)joining.")
	case c.Epoch == -2 && c.InstanceID == "":
		return core.Fail(kerr.InvalidRequest.Code, "InstanceId can't be null when leaving as a static member (epoch -2).")
	case len(c.Topics) > MaxSubscribedTopics:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("more than %d subscribed topics", MaxSubscribedTopics))
	case c.AssignorSet && !validAssignor(c.Assignor):
		return core.Fail(kerr.UnsupportedAssignor.Code, fmt.Sprintf("assignor %q is not one of %v", c.Assignor, ConsumerAssignors))
	}
	if c.RegexSet && c.Regex != "" {
		if _, err := regexp.Compile(c.Regex); err != nil {
			return core.Fail(kerr.InvalidRegularExpression.Code, fmt.Sprintf("SubscribedTopicRegex %q: %v", c.Regex, err))
		}
	}
	return core.Result{}
}

func validAssignor(name string) bool {
	for _, a := range ConsumerAssignors {
		if a == name {
			return true
		}
	}
	return false
}
