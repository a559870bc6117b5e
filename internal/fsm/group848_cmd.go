package fsm

import (
	"fmt"
	"regexp"

	"github.com/twmb/franz-go/pkg/kerr"
)

// KindConsumerGroupHeartbeat is the KIP-848 consumer group heartbeat.
const KindConsumerGroupHeartbeat Kind = 14

// KindTick is the command that changes nothing.
const KindTick Kind = 15

// Tick changes nothing. A broker submits one when a timer that runs on
// block time (a group session or rebalance deadline) has fallen due by
// the wall clock while the chain is idle, so that a block comes and the
// timer acts without waiting for the next empty block.
type Tick struct{}

func (Tick) Kind() Kind     { return KindTick }
func (Tick) encode(*writer) {}

// registerGroup848Commands registers ConsumerGroupHeartbeat, and the
// core's Tick, which a broker submits for the groups' timers
// (registerGroups calls it).
func registerGroup848Commands(r *registry) {
	register(r, KindTick, "Tick", modCore, func(*reader) Tick { return Tick{} }, nil,
		func(*FSM, Tick, cmdAt) Result { return Result{} })
	register(r, KindConsumerGroupHeartbeat, "ConsumerGroupHeartbeat", modGroups, decodeConsumerHeartbeat, checkGroupCommand,
		func(f *FSM, c ConsumerGroupHeartbeat, at cmdAt) Result {
			return f.consumerGroupHeartbeat(c, at.tx, at.cmd)
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
	ID         TopicID
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

func (ConsumerGroupHeartbeat) Kind() Kind { return KindConsumerGroupHeartbeat }

func (c ConsumerGroupHeartbeat) encode(w *writer) {
	w.str(c.Group)
	w.str(c.MemberID)
	w.i32(c.Epoch)
	w.str(c.InstanceID)
	w.str(c.RackID)
	w.str(c.ClientID)
	w.str(c.ClientHost)
	w.i32(c.RebalanceTimeoutMs)
	w.bool(c.TopicsSet)
	w.count(len(c.Topics))
	for _, t := range c.Topics {
		w.str(t)
	}
	w.bool(c.RegexSet)
	w.str(c.Regex)
	w.bool(c.AssignorSet)
	w.str(c.Assignor)
	w.bool(c.OwnedSet)
	w.count(len(c.Owned))
	for _, o := range c.Owned {
		w.raw(o.ID[:])
		w.count(len(o.Partitions))
		for _, p := range o.Partitions {
			w.i32(p)
		}
	}
	w.bool(c.GenerateID)
}

func decodeConsumerHeartbeat(r *reader) ConsumerGroupHeartbeat {
	c := ConsumerGroupHeartbeat{Group: r.str(), MemberID: r.str(), Epoch: r.i32(), InstanceID: r.str(), RackID: r.str(),
		ClientID: r.str(), ClientHost: r.str(), RebalanceTimeoutMs: r.i32(), TopicsSet: r.bool()}
	for i, n := 0, r.count(1); i < n; i++ {
		c.Topics = append(c.Topics, r.str())
	}
	c.RegexSet, c.Regex, c.AssignorSet, c.Assignor, c.OwnedSet = r.bool(), r.str(), r.bool(), r.str(), r.bool()
	for i, n := 0, r.count(17); i < n; i++ {
		var o OwnedTopic
		copy(o.ID[:], r.take(16))
		for j, np := 0, r.count(4); j < np; j++ {
			o.Partitions = append(o.Partitions, r.i32())
		}
		c.Owned = append(c.Owned, o)
	}
	c.GenerateID = r.bool()
	return c
}

func checkConsumerHeartbeat(c ConsumerGroupHeartbeat) Result {
	if r := checkGroupIDs(c.Group, c.MemberID, c.InstanceID); r.Code != 0 {
		return r
	}
	switch {
	case c.Epoch < -2:
		return fail(kerr.InvalidRequest.Code, fmt.Sprintf("member epoch %d is invalid", c.Epoch))
	case c.Epoch != 0 && c.MemberID == "":
		return fail(kerr.InvalidRequest.Code, "MemberId can't be empty.")
	case c.Epoch == 0 && !c.GenerateID && c.MemberID == "":
		return fail(kerr.InvalidRequest.Code, "MemberId can't be empty.")
	case c.Epoch == 0 && (c.RebalanceTimeoutMs <= 0 || c.RebalanceTimeoutMs > MaxRebalanceTimeoutMs):
		return fail(kerr.InvalidRequest.Code, "RebalanceTimeoutMs must be provided in first request.")
	case c.Epoch == 0 && !c.TopicsSet && !c.RegexSet:
		return fail(kerr.InvalidRequest.Code, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
	case c.Epoch == 0 && (!c.OwnedSet || len(c.Owned) > 0):
		return fail(kerr.InvalidRequest.Code, "TopicPartitions must be empty when (re-)joining.")
	case c.Epoch == -2 && c.InstanceID == "":
		return fail(kerr.InvalidRequest.Code, "InstanceId can't be null when leaving as a static member (epoch -2).")
	case len(c.Topics) > MaxSubscribedTopics:
		return fail(kerr.InvalidRequest.Code, fmt.Sprintf("more than %d subscribed topics", MaxSubscribedTopics))
	case c.AssignorSet && !validAssignor(c.Assignor):
		return fail(kerr.UnsupportedAssignor.Code, fmt.Sprintf("assignor %q is not one of %v", c.Assignor, ConsumerAssignors))
	}
	if c.RegexSet && c.Regex != "" {
		if _, err := regexp.Compile(c.Regex); err != nil {
			return fail(kerr.InvalidRegularExpression.Code, fmt.Sprintf("SubscribedTopicRegex %q: %v", c.Regex, err))
		}
	}
	return Result{}
}

func validAssignor(name string) bool {
	for _, a := range ConsumerAssignors {
		if a == name {
			return true
		}
	}
	return false
}
