package fsm

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/pkg/proof"
)

// deletedLeaves are the tombstone versions among leaves (key -> encoded
// version), as "key@offset".
func deletedLeaves(t testing.TB, leaves map[string]string) []string {
	t.Helper()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(leaves)) {
		p := int32(0) // every leaf here is of partition 0
		v, err := proof.DecodeTableVersion(p, []byte(leaves[k]))
		if err != nil {
			t.Fatal(err)
		}
		if v.Deleted {
			out = append(out, fmt.Sprintf("%q@%d", k, v.Offset))
		}
	}
	return out
}

// TestTableTombstonesFollowCompaction: tombstones past the delete horizon
// go from the table leaves exactly when the compaction pass removes them
// from the log (storage.TombstoneRule): the ones before an open
// transaction go, the ones behind it stay in both until it ends. After
// every pass the tombstone leaves are the tombstones read back from the
// log.
func TestTableTombstonesFollowCompaction(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	x := &tableFixture{t: t, f: f, now: t0}
	x.apply(topics.CreateTopic{Name: "kv", Partitions: 1, ReplicationFactor: 1, Configs: []topics.ConfigEntry{
		{Name: "cleanup.policy", Value: "compact"}, {Name: "segment.bytes", Value: "300"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}, {Name: "delete.retention.ms", Value: "3000"}}})
	same := func(who string) {
		t.Helper()
		if err := f.WaitCompactions(); err != nil {
			t.Fatal(err)
		}
		log, leaves := deletedLeaves(t, tableOracle(t, f)), deletedLeaves(t, storedLeaves(t, f))
		if !slices.Equal(log, leaves) {
			t.Fatalf("%s: the log's tombstones are %q, the leaves' %q", who, log, leaves)
		}
	}
	churn := func(n int) {
		for i := range n {
			x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "d", fmt.Sprint(i), "e", fmt.Sprint(i))})
			same(fmt.Sprintf("height %d", x.height))
		}
	}
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "old0", "", "old1", "")})
	churn(2) // seals their segment before the transaction
	pr := x.apply(producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 600_000})[0]
	pid, ep := pr.ProducerID, pr.ProducerEpoch
	x.apply(producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Topic: "kv", Partition: 0})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, pid, ep, 0, true, "txkey", "open")})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "behind0", "", "behind1", "")})
	churn(10)
	x.expect("kv", "old0", "none")
	x.expect("kv", "old1", "none")
	x.expect("kv", "behind0", "deleted") // past the horizon, behind the open transaction
	x.expect("kv", "behind1", "deleted")

	x.apply(producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Commit: true})
	churn(10)
	x.expect("kv", "behind0", "none")
	x.expect("kv", "behind1", "none")
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "fresh", "")})
	churn(2) // within the horizon: it stays
	x.expect("kv", "fresh", "deleted")
	if got := deletedLeaves(t, storedLeaves(t, f)); len(got) != 1 {
		t.Fatalf("tombstone leaves %q, want fresh's only", got)
	}
}
