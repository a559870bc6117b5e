package fsm

import (
	"fmt"
)

// Kind identifies a command in the encoding. Values are part of the on-chain
// format: never renumber one.
type Kind uint8

// The command kinds.
const (
	KindCreateTopic      Kind = 1
	KindDeleteTopic      Kind = 2
	KindCreatePartitions Kind = 3
	KindAlterConfigs     Kind = 4
	KindProduce          Kind = 5
	KindDeleteRecords    Kind = 6
)

func (k Kind) String() string {
	switch k {
	case KindCreateTopic:
		return "CreateTopic"
	case KindDeleteTopic:
		return "DeleteTopic"
	case KindCreatePartitions:
		return "CreatePartitions"
	case KindAlterConfigs:
		return "AlterConfigs"
	case KindProduce:
		return "Produce"
	case KindDeleteRecords:
		return "DeleteRecords"
	case KindJoinGroup:
		return "JoinGroup"
	case KindSyncGroup:
		return "SyncGroup"
	case KindHeartbeat:
		return "Heartbeat"
	case KindLeaveGroup:
		return "LeaveGroup"
	case KindOffsetCommit:
		return "OffsetCommit"
	case KindDeleteGroup:
		return "DeleteGroup"
	case KindOffsetDelete:
		return "OffsetDelete"
	case KindConsumerGroupHeartbeat:
		return "ConsumerGroupHeartbeat"
	case KindTick:
		return "Tick"
	case KindInitProducerID:
		return "InitProducerID"
	case KindAddPartitionsToTxn:
		return "AddPartitionsToTxn"
	case KindAddOffsetsToTxn:
		return "AddOffsetsToTxn"
	case KindTxnOffsetCommit:
		return "TxnOffsetCommit"
	case KindEndTxn:
		return "EndTxn"
	case KindRegisterProducerKey:
		return "RegisterProducerKey"
	case KindScheduleUpgrade:
		return "ScheduleUpgrade"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Command is one state change. A transaction carries one or more.
type Command interface {
	Kind() Kind
	encode(w *writer)
}

// ConfigEntry is a topic configuration name and value.
type ConfigEntry struct {
	Name  string
	Value string
}

// CreateTopic creates a topic with the given partitions and explicit configs.
type CreateTopic struct {
	Name       string
	Partitions int32
	// ReplicationFactor is what the client asked for; every broker holds
	// every partition, so it is recorded but does not place replicas.
	ReplicationFactor int16
	Configs           []ConfigEntry
	// Assignments, when given, are each partition's replicas as the client
	// assigned them (assignments.go); Partitions is then their number.
	Assignments [][]int32
}

// DeleteTopic deletes a topic by name, or by ID when ID is not zero.
type DeleteTopic struct {
	Name string
	ID   TopicID
}

// CreatePartitions raises a topic's partition count to Count.
type CreatePartitions struct {
	Name  string
	Count int32
	// Assignments, when given, are the new partitions' replicas, one list
	// per new partition in order (assignments.go).
	Assignments [][]int32
}

// ConfigOp is an IncrementalAlterConfigs operation; the values are Kafka's.
type ConfigOp int8

// The operations of IncrementalAlterConfigs (KIP-339).
const (
	OpSet      ConfigOp = 0
	OpDelete   ConfigOp = 1
	OpAppend   ConfigOp = 2
	OpSubtract ConfigOp = 3
)

// ConfigChange is one change in an AlterConfigs command.
type ConfigChange struct {
	Op    ConfigOp
	Name  string
	Value string
}

// AlterConfigs changes a topic's configs. With Incremental false every
// explicit config not named is removed (the legacy AlterConfigs API).
type AlterConfigs struct {
	Topic       string
	Incremental bool
	Changes     []ConfigChange
}

// Produce appends Records (one or more RecordBatch v2) to a partition.
type Produce struct {
	Topic     string
	Partition int32
	Records   []byte
}

// DeleteRecords advances a partition's log start offset to Offset
// (-1: the high watermark).
type DeleteRecords struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (CreateTopic) Kind() Kind      { return KindCreateTopic }
func (DeleteTopic) Kind() Kind      { return KindDeleteTopic }
func (CreatePartitions) Kind() Kind { return KindCreatePartitions }
func (AlterConfigs) Kind() Kind     { return KindAlterConfigs }
func (Produce) Kind() Kind          { return KindProduce }
func (DeleteRecords) Kind() Kind    { return KindDeleteRecords }

func (c CreateTopic) encode(w *writer) {
	w.str(c.Name)
	w.i32(c.Partitions)
	w.i16(c.ReplicationFactor)
	w.count(len(c.Configs))
	for _, e := range c.Configs {
		w.str(e.Name)
		w.str(e.Value)
	}
	encodeAssignments(w, c.Assignments)
}

func (c DeleteTopic) encode(w *writer) {
	w.str(c.Name)
	w.raw(c.ID[:])
}

func (c CreatePartitions) encode(w *writer) {
	w.str(c.Name)
	w.i32(c.Count)
	encodeAssignments(w, c.Assignments)
}

func (c AlterConfigs) encode(w *writer) {
	w.str(c.Topic)
	w.bool(c.Incremental)
	w.count(len(c.Changes))
	for _, ch := range c.Changes {
		w.u8(uint8(ch.Op))
		w.str(ch.Name)
		w.str(ch.Value)
	}
}

func (c Produce) encode(w *writer) {
	w.str(c.Topic)
	w.i32(c.Partition)
	w.bytes(c.Records)
}

func (c DeleteRecords) encode(w *writer) {
	w.str(c.Topic)
	w.i32(c.Partition)
	w.i64(c.Offset)
}

func decodeCommand(k Kind, r *reader) Command {
	switch k {
	case KindCreateTopic:
		c := CreateTopic{Name: r.str(), Partitions: r.i32(), ReplicationFactor: r.i16()}
		n := r.count(2)
		for i := 0; i < n; i++ {
			c.Configs = append(c.Configs, ConfigEntry{Name: r.str(), Value: r.str()})
		}
		c.Assignments = decodeAssignments(r)
		return c
	case KindDeleteTopic:
		c := DeleteTopic{Name: r.str()}
		copy(c.ID[:], r.take(len(c.ID)))
		return c
	case KindCreatePartitions:
		return CreatePartitions{Name: r.str(), Count: r.i32(), Assignments: decodeAssignments(r)}
	case KindAlterConfigs:
		c := AlterConfigs{Topic: r.str(), Incremental: r.bool()}
		n := r.count(3)
		for i := 0; i < n; i++ {
			c.Changes = append(c.Changes, ConfigChange{Op: ConfigOp(r.u8()), Name: r.str(), Value: r.str()})
		}
		return c
	case KindProduce:
		return Produce{Topic: r.str(), Partition: r.i32(), Records: r.bytes()}
	case KindDeleteRecords:
		return DeleteRecords{Topic: r.str(), Partition: r.i32(), Offset: r.i64()}
	}
	if c, ok := decodeGroupCommand(k, r); ok {
		return c
	}
	if c, ok := decodeTxnCommand(k, r); ok {
		return c
	}
	if c, ok := decodeSignedCommand(k, r); ok {
		return c
	}
	if c, ok := decodeUpgradeCommand(k, r); ok {
		return c
	}
	r.fail("unknown command kind %d", k)
	return nil
}
