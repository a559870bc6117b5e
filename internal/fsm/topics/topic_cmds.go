package topics

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/record"
)

// The topics module's commands: topics, their partitions and configs, and
// the partition logs (Produce, DeleteRecords).

// The topics module's command kinds.
const (
	KindCreateTopic      core.Kind = 1
	KindDeleteTopic      core.Kind = 2
	KindCreatePartitions core.Kind = 3
	KindAlterConfigs     core.Kind = 4
	KindProduce          core.Kind = 5
	KindDeleteRecords    core.Kind = 6
)

// registerTopicCommands registers the topics' commands (RegisterTopics
// calls it).
func registerTopicCommands(r *core.Registry) {
	core.RegisterModuleCommand(r, topicsOf, KindCreateTopic, "CreateTopic", ModTopics, decodeCreateTopic, checkTopicCommand,
		func(f *Topics, c CreateTopic, at core.CmdAt) core.Result { return f.createTopic(c, at.Tx, at.Cmd) })
	core.RegisterModuleCommand(r, topicsOf, KindDeleteTopic, "DeleteTopic", ModTopics, decodeDeleteTopic, checkTopicCommand,
		func(f *Topics, c DeleteTopic, _ core.CmdAt) core.Result { return f.deleteTopicCommand(c) })
	core.RegisterModuleCommand(r, topicsOf, KindCreatePartitions, "CreatePartitions", ModTopics, decodeCreatePartitions, checkTopicCommand,
		func(f *Topics, c CreatePartitions, _ core.CmdAt) core.Result { return f.createPartitions(c) })
	core.RegisterModuleCommand(r, topicsOf, KindAlterConfigs, "AlterConfigs", ModTopics, decodeAlterConfigs, checkTopicCommand,
		func(f *Topics, c AlterConfigs, _ core.CmdAt) core.Result { return f.alterConfigs(c) })
	// A produce validates each batch itself, as it appends it; the
	// mempool admits it on its batches' framing and CRCs (admitProduce).
	produce := core.RegisterModuleCommand(r, topicsOf, KindProduce, "Produce", ModTopics, decodeProduce, checkTopicCommand,
		func(f *Topics, c Produce, _ core.CmdAt) core.Result { return f.produce(c) })
	produce.CheckedByApply = true
	produce.Admit = admitProduce
	produce.Size = func(c core.Command) int { p := c.(Produce); return len(p.Records) + len(p.Topic) + 16 }
	core.RegisterModuleCommand(r, topicsOf, KindDeleteRecords, "DeleteRecords", ModTopics, decodeDeleteRecords, checkTopicCommand,
		func(f *Topics, c DeleteRecords, _ core.CmdAt) core.Result { return f.deleteRecords(c) })
}

// admitProduce is a produce's admission check for the mempool (Precheck):
// its records split into whole batches, at least one, each with a good
// CRC. Records are not decoded: Validate and apply check them.
func admitProduce(c core.Command) error {
	p := c.(Produce)
	batches, err := record.Split(p.Records)
	if err == nil && len(batches) == 0 {
		err = record.ErrTruncated
	}
	for _, b := range batches {
		if err != nil {
			break
		}
		_, err = record.CheckCRC(b)
	}
	return err
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
	ID   core.TopicID
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

func (CreateTopic) Kind() core.Kind      { return KindCreateTopic }
func (DeleteTopic) Kind() core.Kind      { return KindDeleteTopic }
func (CreatePartitions) Kind() core.Kind { return KindCreatePartitions }
func (AlterConfigs) Kind() core.Kind     { return KindAlterConfigs }
func (Produce) Kind() core.Kind          { return KindProduce }
func (DeleteRecords) Kind() core.Kind    { return KindDeleteRecords }

func (c CreateTopic) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.I32(c.Partitions)
	w.I16(c.ReplicationFactor)
	w.Count(len(c.Configs))
	for _, e := range c.Configs {
		w.Str(e.Name)
		w.Str(e.Value)
	}
	encodeAssignments(w, c.Assignments)
}

func (c DeleteTopic) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.Raw(c.ID[:])
}

func (c CreatePartitions) Encode(w *core.Writer) {
	w.Str(c.Name)
	w.I32(c.Count)
	encodeAssignments(w, c.Assignments)
}

func (c AlterConfigs) Encode(w *core.Writer) {
	w.Str(c.Topic)
	EncodeChanges(w, c.Incremental, c.Changes)
}

// EncodeChanges writes the changes of a config-altering command:
//
//	bool incremental | count × (u8 op | str name | str value)
func EncodeChanges(w *core.Writer, incremental bool, changes []ConfigChange) {
	w.Bool(incremental)
	w.Count(len(changes))
	for _, ch := range changes {
		w.U8(uint8(ch.Op))
		w.Str(ch.Name)
		w.Str(ch.Value)
	}
}

// DecodeChanges reads what encodeChanges wrote.
func DecodeChanges(r *core.Reader) (incremental bool, changes []ConfigChange) {
	incremental = r.Bool()
	n := r.Count(3)
	for i := 0; i < n; i++ {
		changes = append(changes, ConfigChange{Op: ConfigOp(r.U8()), Name: r.Str(), Value: r.Str()})
	}
	return incremental, changes
}

func (c Produce) Encode(w *core.Writer) {
	w.Str(c.Topic)
	w.I32(c.Partition)
	w.Bytes(c.Records)
}

func (c DeleteRecords) Encode(w *core.Writer) {
	w.Str(c.Topic)
	w.I32(c.Partition)
	w.I64(c.Offset)
}

func decodeCreateTopic(r *core.Reader) CreateTopic {
	c := CreateTopic{Name: r.Str(), Partitions: r.I32(), ReplicationFactor: r.I16()}
	n := r.Count(2)
	for i := 0; i < n; i++ {
		c.Configs = append(c.Configs, ConfigEntry{Name: r.Str(), Value: r.Str()})
	}
	c.Assignments = decodeAssignments(r)
	return c
}

func decodeDeleteTopic(r *core.Reader) DeleteTopic {
	c := DeleteTopic{Name: r.Str()}
	copy(c.ID[:], r.Take(len(c.ID)))
	return c
}

func decodeCreatePartitions(r *core.Reader) CreatePartitions {
	return CreatePartitions{Name: r.Str(), Count: r.I32(), Assignments: decodeAssignments(r)}
}

func decodeAlterConfigs(r *core.Reader) AlterConfigs {
	c := AlterConfigs{Topic: r.Str()}
	c.Incremental, c.Changes = DecodeChanges(r)
	return c
}

func decodeProduce(r *core.Reader) Produce {
	return Produce{Topic: r.Str(), Partition: r.I32(), Records: r.Bytes()}
}

func decodeDeleteRecords(r *core.Reader) DeleteRecords {
	return DeleteRecords{Topic: r.Str(), Partition: r.I32(), Offset: r.I64()}
}

// checkTopicCommand is the stateless check of the topics module's commands.
// It takes topic names as the state has them: a tenant's included
// (ValidStateTopicName).
func checkTopicCommand(c core.Command) core.Result {
	return checkTopicCommandWith(c, ValidStateTopicName)
}

// CheckTopicCommandStrict is the check as it was before tenants (app
// versions below 4): a tenant's topic name is not valid. The tenants
// module runs it before the check under those versions, so a binary that
// knows tenants refuses what one that does not refused, with the same
// result (tenants.go).
func CheckTopicCommandStrict(c core.Command) core.Result {
	return checkTopicCommandWith(c, ValidTopicName)
}

func checkTopicCommandWith(c core.Command, validName func(string) error) core.Result {
	return checkTopicCommandAt(c, validName, ^uint32(0))
}

// checkTopicCommandAt is the check with the topic configs of app version
// v (config_versions.go): one added later is unknown.
func checkTopicCommandAt(c core.Command, validName func(string) error, v uint32) core.Result {
	if r := checkAssignmentCommand(c); r.Code != 0 {
		return r
	}
	switch c := c.(type) {
	case CreateTopic:
		if err := validName(c.Name); err != nil {
			return core.Fail(kerr.InvalidTopicException.Code, err.Error())
		}
		if c.Partitions <= 0 || c.Partitions > MaxPartitions {
			return core.Fail(kerr.InvalidPartitions.Code, fmt.Sprintf("number of partitions must be between 1 and %d, got %d", MaxPartitions, c.Partitions))
		}
		if c.ReplicationFactor == 0 || c.ReplicationFactor < -1 {
			return core.Fail(kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor must be larger than 0, or -1 to use the default, got %d", c.ReplicationFactor))
		}
		seen := map[string]bool{}
		for _, e := range c.Configs {
			if seen[e.Name] {
				return core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("config %s given more than once", e.Name))
			}
			seen[e.Name] = true
			if !configKnownAt(e.Name, v) {
				return core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("unknown topic config name: %s", e.Name))
			}
			if err := validateConfigAt(e.Name, e.Value, v); err != nil {
				return core.Fail(kerr.InvalidConfig.Code, err.Error())
			}
		}
	case DeleteTopic:
		if c.ID.IsZero() {
			if err := validName(c.Name); err != nil {
				return core.Fail(kerr.InvalidTopicException.Code, err.Error())
			}
		}
	case CreatePartitions:
		if err := validName(c.Name); err != nil {
			return core.Fail(kerr.InvalidTopicException.Code, err.Error())
		}
		if c.Count <= 0 || c.Count > MaxPartitions {
			return core.Fail(kerr.InvalidPartitions.Code, fmt.Sprintf("number of partitions must be between 1 and %d, got %d", MaxPartitions, c.Count))
		}
	case AlterConfigs:
		if err := validName(c.Topic); err != nil {
			return core.Fail(kerr.InvalidTopicException.Code, err.Error())
		}
		for _, ch := range c.Changes {
			if !configKnownAt(ch.Name, v) {
				return core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("unknown topic config name: %s", ch.Name))
			}
			switch ch.Op {
			case OpSet:
				if err := validateConfigAt(ch.Name, ch.Value, v); err != nil {
					return core.Fail(kerr.InvalidConfig.Code, err.Error())
				}
			case OpDelete:
			case OpAppend, OpSubtract:
				if d, _ := LookupConfig(ch.Name); d.Type != TypeList {
					return core.Fail(kerr.InvalidConfig.Code, fmt.Sprintf("config %s is not a list: APPEND and SUBTRACT apply only to lists", ch.Name))
				}
			default:
				return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("unknown config operation %d", ch.Op))
			}
		}
	case Produce:
		if err := validName(c.Topic); err != nil {
			return core.Fail(kerr.InvalidTopicException.Code, err.Error())
		}
		batches, err := record.Split(c.Records)
		if err != nil || len(batches) == 0 {
			return core.Fail(kerr.CorruptMessage.Code, fmt.Sprintf("record set is not a sequence of whole record batches: %v", err))
		}
		for _, b := range batches {
			if _, err := record.Validate(b); err != nil {
				return core.Fail(record.ErrorCode(err), err.Error())
			}
		}
	case DeleteRecords:
		if err := validName(c.Topic); err != nil {
			return core.Fail(kerr.InvalidTopicException.Code, err.Error())
		}
		if c.Offset < -1 {
			return core.Fail(kerr.OffsetOutOfRange.Code, fmt.Sprintf("cannot delete records before offset %d", c.Offset))
		}
	}
	return core.Result{}
}
