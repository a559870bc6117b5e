package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/record"
)

func sampleCommands() []core.Command {
	return []core.Command{
		topics.CreateTopic{Name: "a", Partitions: 3, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "retention.ms", Value: "1000"}}},
		topics.DeleteTopic{Name: "a"},
		topics.DeleteTopic{ID: core.TopicID{1, 2, 3}},
		topics.CreatePartitions{Name: "a", Count: 5},
		topics.AlterConfigs{Topic: "a", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "retention.ms", Value: "5"}, {Op: topics.OpDelete, Name: "segment.ms", Value: ""}}},
		topics.Produce{Topic: "a", Partition: 2, Records: []byte{1, 2, 3}},
		topics.DeleteRecords{Topic: "a", Partition: 1, Offset: -1},
		groups.JoinGroup{Group: "g", MemberID: "m", InstanceID: "i", ClientID: "c", ClientHost: "/h", ProtocolType: "consumer",
			Protocols:        []groups.GroupProtocol{{Name: "range", Metadata: []byte{1}}, {Name: "sticky", Metadata: []byte{2, 3}}},
			SessionTimeoutMs: 10000, RebalanceTimeoutMs: 60000, RequireKnownMember: true},
		groups.SyncGroup{Group: "g", MemberID: "m", InstanceID: "i", Generation: 4, ProtocolType: "consumer", Protocol: "range",
			Assignments: []groups.MemberAssignment{{MemberID: "m", Assignment: []byte{9}}}},
		groups.Heartbeat{Group: "g", MemberID: "m", InstanceID: "i", Generation: 4},
		groups.LeaveGroup{Group: "g", InstanceID: "i"},
		groups.OffsetCommit{Group: "g", MemberID: "m", Generation: 4, Topic: "a", Partition: 1, Offset: 17, LeaderEpoch: 2, Metadata: "md"},
		groups.DeleteGroup{Group: "g"},
		groups.OffsetDelete{Group: "g", Topic: "a", Partition: 1},
		groups.ConsumerGroupHeartbeat{Group: "g", MemberID: "m", Epoch: 3, InstanceID: "i", RackID: "r", ClientID: "c", ClientHost: "/h",
			RebalanceTimeoutMs: 1000, TopicsSet: true, Topics: []string{"a", "b"}, RegexSet: true, Regex: "a.*",
			AssignorSet: true, Assignor: "range", OwnedSet: true, Owned: []groups.OwnedTopic{{ID: core.TopicID{7}, Partitions: []int32{0, 2}}}, GenerateID: true},
		Tick{},
		producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60000},
		producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: 4, Epoch: 1, Topic: "a", Partition: 2},
		producers.AddOffsetsToTxn{TransactionalID: "tx", ProducerID: 4, Epoch: 1, Group: "g"},
		producers.TxnOffsetCommit{TransactionalID: "tx", ProducerID: 4, Epoch: 1, Group: "g", MemberID: "m", InstanceID: "i",
			Generation: 3, Topic: "a", Partition: 2, Offset: 9, LeaderEpoch: 1, Metadata: "md"},
		producers.EndTxn{TransactionalID: "tx", ProducerID: 4, Epoch: 1, Commit: true},
		trust.RegisterProducerKey{Principal: "alice", PublicKey: []byte{1, 2}, Proof: []byte{3}, Endorsement: []byte{4, 5}},
		topics.AlterLogDefaults{Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "log.retention.ms", Value: "5"}}},
		cluster.AlterBrokerConfigs{Broker: "2", Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: cluster.MaxConnectionsPerIPConfig, Value: "3"}, {Op: topics.OpDelete, Name: cluster.MaxConnectionsConfig, Value: ""}}},
		cluster.AppendTime{TimeMs: 1_700_000_000_123},
		cluster.ScheduleUpgrade{ChainID: "stele-test", Plan: cluster.UpgradePlan{Height: 100, Version: 2, Name: "v2"}, Sigs: []trust.CertSig{{Validator: [20]byte{1}, Signature: [64]byte{2}}, {Validator: [20]byte{3}}}},
	}
}

func TestTxRoundTrip(t *testing.T) {
	in := core.Tx{Nonce: core.Nonce{9}, Commands: sampleCommands()}
	out, err := DecodeTx(EncodeTx(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", out, in)
	}
}

func TestDecodeTxRejects(t *testing.T) {
	good := EncodeTx(core.Tx{Commands: sampleCommands()})
	for name, b := range map[string][]byte{
		"empty":       nil,
		"magic":       append([]byte("XYZ"), good[3:]...),
		"version":     append(append([]byte("STL"), 9), good[4:]...),
		"truncated":   good[:len(good)-1],
		"trailing":    append(append([]byte(nil), good...), 0),
		"no commands": EncodeTx(core.Tx{}),
	} {
		if _, err := DecodeTx(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecodeTx: any bytes either fail to decode or re-encode to themselves.
func FuzzDecodeTx(f *testing.F) {
	f.Add(EncodeTx(core.Tx{Commands: sampleCommands()}))
	f.Add(EncodeTx(core.Tx{Commands: []core.Command{topics.Produce{Topic: "x"}}}))
	f.Add([]byte("STL\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, err := DecodeTx(b)
		if err != nil {
			return
		}
		if again := EncodeTx(tx); string(again) != string(b) {
			// Varints may have non-minimal encodings; decoding the
			// re-encoding must still give the same transaction.
			tx2, err := DecodeTx(again)
			if err != nil || !reflect.DeepEqual(tx, tx2) {
				t.Fatalf("re-encoding changed the transaction: %v", err)
			}
		}
		Validate(b) // must not panic
	})
}

// TestPrecheck: the mempool's admission check takes each kind's admit
// (registry.go): a produce is admitted on its batches' framing and CRCs
// alone, every other command on CheckCommand.
func TestPrecheck(t *testing.T) {
	good := batch(t, 1000, record.CodecNone, "k", 3)
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 0xff
	for _, tc := range []struct {
		name string
		cmd  core.Command
		want string // "" admitted, else what the error names
	}{
		{"produce", topics.Produce{Topic: "a", Records: good}, ""},
		// Validate's check (checkTopicCommand) is not the produce's admission.
		{"produce, no topic name", topics.Produce{Records: good}, ""},
		{"produce, bad CRC", topics.Produce{Topic: "a", Records: corrupt}, "command 1 (Produce)"},
		{"produce, truncated", topics.Produce{Topic: "a", Records: good[:len(good)-1]}, "command 1 (Produce)"},
		{"produce, no batch", topics.Produce{Topic: "a"}, "command 1 (Produce)"},
		{"create topic", topics.CreateTopic{Name: "a", Partitions: 1, ReplicationFactor: -1}, ""},
		{"create topic, no name", topics.CreateTopic{Partitions: 1, ReplicationFactor: -1}, "command 1 (CreateTopic)"},
	} {
		tx := EncodeTx(core.Tx{Commands: []core.Command{topics.DeleteTopic{Name: "x"}, tc.cmd}})
		err := Precheck(tx)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, core.ErrMalformed) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrMalformed naming %s", tc.name, err, tc.want)
		}
	}
}
