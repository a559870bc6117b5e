package fsm

import "github.com/stele-io/stele/internal/fsm/topics"

// The topics module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	AlterConfigs     = topics.AlterConfigs
	AlterLogDefaults = topics.AlterLogDefaults
	BatchProof       = topics.BatchProof
	ConfigChange     = topics.ConfigChange
	ConfigDef        = topics.ConfigDef
	ConfigEntry      = topics.ConfigEntry
	ConfigOp         = topics.ConfigOp
	CreatePartitions = topics.CreatePartitions
	CreateTopic      = topics.CreateTopic
	DeleteRecords    = topics.DeleteRecords
	DeleteTopic      = topics.DeleteTopic
	Partition        = topics.Partition
	Produce          = topics.Produce
	ReadOptions      = topics.ReadOptions
	Topic            = topics.Topic
	TopicView        = topics.TopicView
	View             = topics.View
	ViewDef          = topics.ViewDef
)

const (
	ExpectedVersionHeader = topics.ExpectedVersionHeader
	MaxPartitions         = topics.MaxPartitions
	OpAppend              = topics.OpAppend
	OpDelete              = topics.OpDelete
	OpSet                 = topics.OpSet
	OpSubtract            = topics.OpSubtract
	SnapshotHeader        = topics.SnapshotHeader
)

// WithViewConfigs is a view's configs with those the state machine fixes
// on a view unless given.
func WithViewConfigs(configs []ConfigEntry) []ConfigEntry { return topics.WithViewConfigs(configs) }

// ViewPartitions is how many partitions a view over sources of these
// partition counts has (topics/views.go).
func ViewPartitions(global bool, sources []int32) int32 {
	return topics.ViewPartitions(global, sources)
}

// The topics module's errors (the same values).
var (
	ErrCorruptLog       = topics.ErrCorruptLog
	ErrOffsetOutOfRange = topics.ErrOffsetOutOfRange
	ErrPartitionGone    = topics.ErrPartitionGone
	ErrUnknownTopic     = topics.ErrUnknownTopic
)

// ApplyConfigChanges is topics.ApplyConfigChanges.
func ApplyConfigChanges(current map[string]string, c topics.AlterConfigs) (map[string]string, error) {
	return topics.ApplyConfigChanges(current, c)
}

// ApplyLogDefaultChanges is topics.ApplyLogDefaultChanges.
func ApplyLogDefaultChanges(current map[string]string, c topics.AlterLogDefaults) (map[string]string, error) {
	return topics.ApplyLogDefaultChanges(current, c)
}

// BrokerSynonym is topics.BrokerSynonym.
func BrokerSynonym(topicConfig string) string { return topics.BrokerSynonym(topicConfig) }

// LookupLogDefault is topics.LookupLogDefault.
func LookupLogDefault(broker string) (topics.ConfigDef, bool) { return topics.LookupLogDefault(broker) }

// ProducerKey is topics.ProducerKey.
func ProducerKey(topic string, partition int32, pid int64) []byte {
	return topics.ProducerKey(topic, partition, pid)
}

// TopicConfigDefs is topics.TopicConfigDefs.
func TopicConfigDefs() []topics.ConfigDef { return topics.TopicConfigDefs() }

// ValidStateTopicName is topics.ValidStateTopicName.
func ValidStateTopicName(name string) error { return topics.ValidStateTopicName(name) }

// ValidTopicName is topics.ValidTopicName.
func ValidTopicName(name string) error { return topics.ValidTopicName(name) }
