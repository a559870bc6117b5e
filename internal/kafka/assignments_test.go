package kafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createAssigned sends CreateTopics for one topic with replicas given per
// partition index, as kafka-topics.sh --replica-assignment does.
func createAssigned(t *testing.T, cl *kgo.Client, topic string, partitions int32, rf int16, as map[int32][]int32, order ...int32) kmsg.CreateTopicsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, rf
	for _, i := range order {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition, a.Replicas = i, as[i]
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0]
}

func addAssigned(t *testing.T, cl *kgo.Client, topic string, count int32, as ...[]int32) kmsg.CreatePartitionsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	for _, r := range as {
		a := kmsg.NewCreatePartitionsRequestTopicAssignment()
		a.Replicas = r
		rt.Assignment = append(rt.Assignment, a)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0]
}

// TestManualReplicaAssignment: CreateTopics and CreatePartitions with
// explicit replicas (KIP-464's tools, kafka-topics.sh --replica-assignment)
// are taken as Kafka's controller takes them; Metadata, as kadm reads it,
// reports the replicas as assigned and the first live one as leader (the
// preferred leader). Brokers 0 and 1 sign blocks; broker 2 is down.
func TestManualReplicaAssignment(t *testing.T) {
	a, b, c := []byte("validator-a"), []byte("validator-b"), []byte("validator-c")
	tb := startTestBrokerSigned(t, [][]byte{a, b}, func(o *Options) {
		o.Brokers = []BrokerInfo{
			{NodeID: 0, Host: o.AdvertisedHost, Port: o.AdvertisedPort, Validator: a},
			{NodeID: 1, Host: "127.0.0.1", Port: 2, Validator: b},
			{NodeID: 2, Host: "127.0.0.1", Port: 3, Validator: c},
		}
	})
	cl := client(t, tb.addr)
	adm := kadm.NewClient(cl)
	mustCreate(t, adm, 1, nil, "warm-up") // the next block carries the signatures

	r := createAssigned(t, cl, "placed", -1, -1, map[int32][]int32{0: {1, 0}, 1: {0, 1}, 2: {2, 1}}, 2, 0, 1)
	if r.ErrorCode != 0 || r.NumPartitions != 3 || r.ReplicationFactor != 2 {
		t.Fatalf("create: %+v", r)
	}
	if p := addAssigned(t, cl, "placed", 4, []int32{0, 2}); p.ErrorCode != 0 {
		t.Fatalf("create partitions: %d %v", p.ErrorCode, p.ErrorMessage)
	}

	tds, err := adm.ListTopics(ctx(t), "placed")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		replicas, isr []int32
		leader        int32
	}{
		{[]int32{1, 0}, []int32{1, 0}, 1},
		{[]int32{0, 1}, []int32{0, 1}, 0},
		{[]int32{2, 1}, []int32{1}, 1}, // the preferred leader is down
		{[]int32{0, 2}, []int32{0}, 0},
	}
	td := tds["placed"]
	if len(td.Partitions) != len(want) {
		t.Fatalf("%d partitions", len(td.Partitions))
	}
	for i, w := range want {
		p := td.Partitions[int32(i)]
		if !slices.Equal(p.Replicas, w.replicas) || !slices.Equal(p.ISR, w.isr) || p.Leader != w.leader {
			t.Errorf("partition %d: replicas %v isr %v leader %d, want %v %v %d", i, p.Replicas, p.ISR, p.Leader, w.replicas, w.isr, w.leader)
		}
	}
	if rf := td.Partitions.NumReplicas(); rf != 2 {
		t.Errorf("kadm replication factor %d, want 2", rf)
	}

	refused := []struct {
		name   string
		parts  int32
		rf     int16
		as     map[int32][]int32
		order  []int32
		code   int16
		substr string
	}{
		{"replication factor given", -1, 2, map[int32][]int32{0: {0}}, []int32{0}, kerr.InvalidRequest.Code, "replication factor was not set to -1"},
		{"partitions given", 1, -1, map[int32][]int32{0: {0}}, []int32{0}, kerr.InvalidRequest.Code, "numPartitions was not set to -1"},
		{"unknown broker", -1, -1, map[int32][]int32{0: {0, 7}}, []int32{0}, kerr.InvalidReplicaAssignment.Code, "includes broker 7, but no such broker is registered"},
		{"broker twice", -1, -1, map[int32][]int32{0: {1, 1}}, []int32{0}, kerr.InvalidReplicaAssignment.Code, "includes the broker 1 more than once"},
		{"ragged", -1, -1, map[int32][]int32{0: {0, 1}, 1: {0}}, []int32{0, 1}, kerr.InvalidReplicaAssignment.Code, "not consistent with previous partitions, which have 2 replica(s)"},
		{"partition twice", -1, -1, map[int32][]int32{0: {0}}, []int32{0, 0}, kerr.InvalidReplicaAssignment.Code, "multiple manual partition assignments for partition 0"},
		{"gap", -1, -1, map[int32][]int32{0: {0}, 2: {1}}, []int32{0, 2}, kerr.InvalidReplicaAssignment.Code, "consecutive 0-based"},
		{"empty", -1, -1, map[int32][]int32{0: {}}, []int32{0}, kerr.InvalidReplicaAssignment.Code, "empty replica list"},
		{"only dead brokers", -1, -1, map[int32][]int32{0: {2}}, []int32{0}, kerr.InvalidReplicaAssignment.Code, "are fenced or in controlled shutdown"},
	}
	for _, tc := range refused {
		r := createAssigned(t, cl, "refused", tc.parts, tc.rf, tc.as, tc.order...)
		if r.ErrorCode != tc.code || r.ErrorMessage == nil || !strings.Contains(*r.ErrorMessage, tc.substr) {
			t.Errorf("%s: %d %v, want %d with %q", tc.name, r.ErrorCode, r.ErrorMessage, tc.code, tc.substr)
		}
	}
	if partitionCount(t, cl, "refused") != -1 {
		t.Fatal("a refused topic was created")
	}

	for _, tc := range []struct {
		name   string
		count  int32
		as     [][]int32
		substr string
	}{
		{"too few assignments", 6, [][]int32{{0, 1}}, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."},
		{"inconsistent length", 5, [][]int32{{0}}, "which have 2 replica(s)"},
		{"unknown broker", 5, [][]int32{{0, 9}}, "includes broker 9"},
	} {
		if p := addAssigned(t, cl, "placed", tc.count, tc.as...); p.ErrorCode != kerr.InvalidReplicaAssignment.Code || !strings.Contains(*p.ErrorMessage, tc.substr) {
			t.Errorf("create partitions, %s: %d %v", tc.name, p.ErrorCode, p.ErrorMessage)
		}
	}
	// A topic created without an assignment reports every broker as a
	// replica: new partitions' lists must be as long.
	if p := addAssigned(t, cl, "warm-up", 2, []int32{1, 0}); p.ErrorCode != kerr.InvalidReplicaAssignment.Code {
		t.Errorf("short assignment for an unassigned topic: %d %v", p.ErrorCode, p.ErrorMessage)
	}
	if p := addAssigned(t, cl, "warm-up", 2, []int32{1, 0, 2}); p.ErrorCode != 0 {
		t.Errorf("full assignment for an unassigned topic: %d %v", p.ErrorCode, p.ErrorMessage)
	}
	if tds, err := adm.ListTopics(ctx(t), "warm-up"); err != nil || tds["warm-up"].Partitions[1].Leader != 1 {
		t.Errorf("warm-up partition 1: %v %+v", err, tds["warm-up"].Partitions[1])
	}
}
