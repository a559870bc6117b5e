package fsm

import "github.com/stele-io/stele/internal/fsm/groups"

// The groups module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	CommittedOffset        = groups.CommittedOffset
	ConsumerGroupHeartbeat = groups.ConsumerGroupHeartbeat
	ConsumerMemberView     = groups.ConsumerMemberView
	DeleteGroup            = groups.DeleteGroup
	GroupProtocol          = groups.GroupProtocol
	GroupView              = groups.GroupView
	GroupsView             = groups.GroupsView
	Heartbeat              = groups.Heartbeat
	JoinGroup              = groups.JoinGroup
	LeaveGroup             = groups.LeaveGroup
	MemberAssignment       = groups.MemberAssignment
	MemberView             = groups.MemberView
	OffsetCommit           = groups.OffsetCommit
	OffsetDelete           = groups.OffsetDelete
	OwnedTopic             = groups.OwnedTopic
	SyncGroup              = groups.SyncGroup
)

const (
	ConsumerHeartbeatIntervalMs = groups.ConsumerHeartbeatIntervalMs
	GroupCompletingRebalance    = groups.GroupCompletingRebalance
	GroupConsumer               = groups.GroupConsumer
	GroupPreparingRebalance     = groups.GroupPreparingRebalance
	GroupStable                 = groups.GroupStable
)
