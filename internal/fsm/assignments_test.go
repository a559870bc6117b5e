package fsm

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/pkg/proof"
)

// TestReplicaAssignments: a topic created with manual replica assignments
// keeps them, in order, through CreatePartitions, a restart and a state
// proof; what Kafka's controller refuses is refused with its error.
// Reference: KIP-464 / ReplicationControlManager.createTopic.
func TestReplicaAssignments(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	outs := applyOutcomes(t, f, []block{
		{time: t0, txs: [][]byte{
			tx(1, topics.CreateTopic{Name: "placed", Partitions: 2, ReplicationFactor: 2, Assignments: [][]int32{{2, 0}, {1, 3}}}),
			tx(2, topics.CreateTopic{Name: "plain", Partitions: 1, ReplicationFactor: -1}),
			tx(3, topics.CreateTopic{Name: "dup", Partitions: 1, ReplicationFactor: 2, Assignments: [][]int32{{1, 1}}}),
			tx(4, topics.CreateTopic{Name: "ragged", Partitions: 2, ReplicationFactor: 2, Assignments: [][]int32{{1, 2}, {3}}}),
			tx(5, topics.CreateTopic{Name: "empty", Partitions: 1, ReplicationFactor: 0, Assignments: [][]int32{{}}}),
		}},
		{time: t0 + 100, txs: [][]byte{
			tx(6, topics.CreatePartitions{Name: "placed", Count: 3, Assignments: [][]int32{{3, 2}}}),
			tx(7, topics.CreatePartitions{Name: "plain", Count: 2, Assignments: [][]int32{{0}}}),
			tx(8, topics.CreatePartitions{Name: "placed", Count: 5, Assignments: [][]int32{{0, 1}}}),
			tx(9, topics.CreatePartitions{Name: "placed", Count: 4, Assignments: [][]int32{{0, 1, 2}}}),
		}},
		{time: t0 + 200, txs: [][]byte{tx(10, topics.CreatePartitions{Name: "placed", Count: 4})}},
	})
	codes := func(o core.BlockOutcome) []int16 {
		var cs []int16
		for _, tr := range o.Txs {
			for _, r := range tr.Results {
				cs = append(cs, r.Code)
			}
		}
		return cs
	}
	ra := kerr.InvalidReplicaAssignment.Code
	if got, want := codes(outs[0]), []int16{0, 0, ra, ra, ra}; !reflect.DeepEqual(got, want) {
		t.Fatalf("CreateTopic results %v, want %v", got, want)
	}
	if got, want := codes(outs[1]), []int16{0, 0, ra, ra}; !reflect.DeepEqual(got, want) {
		t.Fatalf("CreatePartitions results %v, want %v", got, want)
	}
	want := map[string][][]int32{
		"placed": {{2, 0}, {1, 3}, {3, 2}, nil},
		"plain":  {nil, {0}},
	}
	check := func(f *FSM, when string) {
		t.Helper()
		for name, w := range want {
			got := f.View().Topic(name).Replicas
			for i := range got {
				if len(got[i]) == 0 {
					got[i] = nil
				}
			}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("%s: %s replicas %v, want %v", when, name, got, w)
			}
		}
	}
	check(f, "applied")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	defer f.Close()
	check(f, "reopened")

	p, err := f.ProveState(proof.TopicKey("placed"))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := proof.DecodeTopic(p.Entries[0].Value)
	if err != nil || topic.Partitions != 4 || len(topic.Replicas) != 4 || !reflect.DeepEqual(topic.Replicas[2], []int32{3, 2}) {
		t.Fatalf("proven topic %+v, %v", topic, err)
	}
}
