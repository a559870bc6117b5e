package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pokt-network/smt"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/keys"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// tableOracle is what the table leaves must be, found without them: every
// record of each table topic read from its partitions' logs (as compaction
// and retention left them), the latest per key and partition that is not a
// control record nor of an aborted or still open transaction.
func tableOracle(t testing.TB, f *FSM) map[string]string {
	t.Helper()
	want := map[string]string{}
	for _, name := range topics.SortedNames(f.ByName) {
		tp := f.ByName[name]
		if !keys.IsTable(tp) {
			continue
		}
		for _, p := range tp.Partitions {
			for off := p.Start; off < p.Next; {
				data, err := p.Log.Read(off, 1<<20, p.Next)
				if err != nil {
					t.Fatal(err)
				}
				batches, err := record.Split(data)
				if err != nil || len(batches) == 0 {
					t.Fatalf("%s-%d@%d: %v", name, p.Index, off, err)
				}
				for _, b := range batches {
					h, recs, err := record.Records(b)
					if err != nil {
						t.Fatal(err)
					}
					open := false
					if st := p.ProducerStates[h.ProducerID]; h.Transactional() && st != nil && st.TxnFirst >= 0 && h.BaseOffset >= st.TxnFirst {
						open = true
					}
					for _, r := range recs {
						if h.Control() || open || r.Key == nil || r.Offset < off || p.InAbortedTxn(h.ProducerID, r.Offset) {
							continue
						}
						want[string(proof.TableKey(tp.ID, p.Index, r.Key))] = string(proof.EncodeTableVersion(keys.VersionOf(p.Index, &r)))
					}
					off = h.LastOffset() + 1
				}
			}
		}
	}
	return want
}

// storedLeaves are the table leaves the store holds.
func storedLeaves(t testing.TB, f *FSM) map[string]string {
	t.Helper()
	got := map[string]string{}
	if err := f.Store.Scan([]byte("l/"), func(k, v []byte) error {
		got[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkTableLeaves: the store's table leaves are exactly the oracle's,
// once the decided compactions are written.
func checkTableLeaves(t testing.TB, f *FSM, who string) {
	t.Helper()
	// The oracle reads the logs, which decided compactions rewrite in the
	// background: it reads them once written.
	if err := f.WaitCompactions(); err != nil {
		t.Fatal(err)
	}
	want, got := tableOracle(t, f), storedLeaves(t, f)
	if maps.Equal(want, got) {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s: leaf %q is %x, want %x", who, k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: stray leaf %q = %x", who, k, got[k])
		}
	}
	t.FailNow()
}

// TestTableLeavesFollowTheLog: through the scenario (a compact topic with
// tombstone-free churn and compaction, a snapshot topic, retention,
// DeleteRecords, a deleted topic), after every block the leaves are the
// latest readable version of every key in every table partition and
// nothing else; the same after a restart and on a broker restored from a
// snapshot; TableLatest agrees with KeyLatest on every key.
func TestTableLeavesFollowTheLog(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	blocks := scenario(t)
	for i, b := range blocks {
		if _, err := f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: b.time, Txs: b.txs}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		checkTableLeaves(t, f, fmt.Sprintf("height %d", i+1))
	}
	if len(storedLeaves(t, f)) == 0 {
		t.Fatal("the scenario left no table leaves")
	}
	for _, topic := range []string{"table", "ledger"} {
		keys, err := f.Keys(topic, nil, nil, 100)
		if err != nil || len(keys) == 0 {
			t.Fatalf("Keys(%s): %q %v", topic, keys, err)
		}
		for _, k := range keys {
			a, aok, aerr := f.KeyLatest(topic, k)
			b, bok, berr := f.TableLatest(topic, k)
			if aerr != nil || berr != nil || aok != bok || a.Partition != b.Partition || a.Offset != b.Offset || !bytes.Equal(a.Value, b.Value) {
				t.Fatalf("%s %q: KeyLatest %d/%d %v %v, TableLatest %d/%d %v %v", topic, k, a.Partition, a.Offset, aok, aerr, b.Partition, b.Offset, bok, berr)
			}
		}
	}
	if _, _, err := f.TableLatest("orders", []byte("k-0")); !errors.Is(err, keys.ErrNotTable) {
		t.Fatalf("TableLatest of a plain topic: %v, want ErrNotTable", err)
	}
	f.Close()
	g := open(t, dir)
	checkTableLeaves(t, g, "after a restart")
	s := takeSnapshot(t, g, filepath.Join(t.TempDir(), "snap"), nil)
	h := open(t, t.TempDir())
	defer h.Close()
	restoreInto(t, h, s)
	checkTableLeaves(t, h, "restored from a snapshot")
	if !maps.Equal(storedLeaves(t, g), storedLeaves(t, h)) {
		t.Fatal("the restored broker's leaves differ")
	}
	g.Close()
}

// keyedBatch is a batch of records with the given keys and values ("" is a
// tombstone), producer pid (-1: none), transactional or not.
func keyedBatch(t testing.TB, ts, pid int64, epoch int16, seq int32, txn bool, kv ...string) []byte {
	t.Helper()
	var recs []record.Record
	for i := 0; i < len(kv); i += 2 {
		r := record.Record{OffsetDelta: int32(i / 2), Key: []byte(kv[i])}
		if kv[i+1] != "" {
			r.Value = []byte(kv[i+1])
		}
		recs = append(recs, r)
	}
	h := record.Header{FirstTimestamp: ts, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}
	if pid < 0 {
		h.ProducerEpoch, h.BaseSequence = -1, -1
	}
	if txn {
		h.Attributes |= 1 << 4
	}
	b, err := record.Build(h, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tableFixture applies blocks one at a time, checking the leaves after each.
type tableFixture struct {
	t      *testing.T
	f      *FSM
	height int64
	now    int64
}

func (x *tableFixture) apply(cmds ...core.Command) []core.Result {
	x.t.Helper()
	x.height++
	x.now += 1000
	var txs [][]byte
	for i, c := range cmds {
		txs = append(txs, tx(int(x.height)*100+i, c))
	}
	out, err := x.f.ApplyBlock(core.Block{Height: x.height, TimeMs: x.now, Txs: txs})
	if err != nil {
		x.t.Fatal(err)
	}
	if _, err := x.f.Commit(); err != nil {
		x.t.Fatal(err)
	}
	checkTableLeaves(x.t, x.f, fmt.Sprintf("height %d", x.height))
	var rs []core.Result
	for _, o := range out.Txs {
		rs = append(rs, o.Results...)
	}
	return rs
}

// latest is TableLatest as "partition/offset=value", "deleted" or "none".
func (x *tableFixture) latest(topic, key string) string {
	x.t.Helper()
	ev, ok, err := x.f.TableLatest(topic, []byte(key))
	switch {
	case err != nil:
		x.t.Fatal(err)
	case !ok:
		return "none"
	case ev.Value == nil:
		return "deleted"
	}
	return fmt.Sprintf("%d/%d=%s", ev.Partition, ev.Offset, ev.Value)
}

// proveTable proves key and checks the proof against the committed state
// root and app hash, and returns what it proves.
func (x *tableFixture) proveTable(topic, key string) string {
	x.t.Helper()
	sp, tv, value, err := x.f.ProveTable(topic, []byte(key))
	if err != nil {
		x.t.Fatal(err)
	}
	if _, appHash := x.f.Info(); !bytes.Equal(proof.AppHash(sp.Digest, sp.StateRoot, sp.LeavesRoot), appHash) {
		x.t.Fatal("the table proof's parts do not hash to the committed app hash")
	}
	spec := smt.NewTrieSpec(sha256.New(), false)
	for _, e := range sp.Entries {
		if ok, err := smt.VerifyProof(&smt.SparseMerkleProof{SideNodes: e.SideNodes, NonMembershipLeafData: e.NonMembershipLeafData}, sp.StateRoot, e.Key, trieLeaf(e.Value), &spec); !ok || err != nil {
			x.t.Fatalf("entry %q does not verify: %v", e.Key, err)
		}
	}
	switch {
	case !tv.Found:
		return "none"
	case tv.Latest.Deleted:
		return "deleted"
	case !tv.Has(value):
		x.t.Fatalf("the value served with the proof is not the proven one")
	}
	return fmt.Sprintf("%d/%d=%s", tv.Latest.Partition, tv.Latest.Offset, value)
}

func (x *tableFixture) expect(topic, key, want string) {
	x.t.Helper()
	if got := x.latest(topic, key); got != want {
		x.t.Fatalf("TableLatest(%s, %s) = %s, want %s", topic, key, got, want)
	}
	if got := x.proveTable(topic, key); got != want {
		x.t.Fatalf("ProveTable(%s, %s) proves %s, want %s", topic, key, got, want)
	}
}

// TestTableVersions: a key's version is proven present, deleted (a
// tombstone) and absent; the leaf follows transactions (visible at the
// commit, never after an abort), DeleteRecords, a tombstone compaction
// removes, a cleanup.policy that stops and starts serving the topic as a
// table, and the topic's deletion; and it survives a restart.
func TestTableVersions(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	x := &tableFixture{t: t, f: f, now: t0}
	x.apply(topics.CreateTopic{Name: "kv", Partitions: 2, ReplicationFactor: 1, Configs: []topics.ConfigEntry{
		{Name: "cleanup.policy", Value: "compact"}, {Name: "segment.bytes", Value: "300"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}, {Name: "delete.retention.ms", Value: "0"}}})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "a", "1", "b", "1")})
	x.expect("kv", "a", "0/0=1")
	x.expect("kv", "nobody", "none")
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "a", "2", "b", "")})
	x.expect("kv", "a", "0/2=2")
	x.expect("kv", "b", "deleted")

	// A transaction: invisible while open, the latest at its commit; an
	// aborted one leaves the key as it was.
	pr := x.apply(producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0]
	pid, ep := pr.ProducerID, pr.ProducerEpoch
	x.apply(producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Topic: "kv", Partition: 0})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, pid, ep, 0, true, "a", "txn")})
	x.expect("kv", "a", "0/2=2")
	x.apply(producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Commit: true})
	x.expect("kv", "a", "0/4=txn")
	x.apply(producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Topic: "kv", Partition: 0})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, pid, ep, 1, true, "a", "aborted", "c", "aborted")})
	x.apply(producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Commit: false})
	x.expect("kv", "a", "0/4=txn")
	x.expect("kv", "c", "none")

	// Another partition: the later timestamp wins.
	x.apply(topics.Produce{Topic: "kv", Partition: 1, Records: keyedBatch(t, x.now, -1, -1, -1, false, "a", "p1")})
	x.expect("kv", "a", "1/0=p1")

	// Churn seals segments; compaction removes the tombstone of b, and its
	// leaf goes with it.
	for i := range 8 {
		x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "d", fmt.Sprint(i), "e", fmt.Sprint(i))})
	}
	x.expect("kv", "b", "none")

	// DeleteRecords below the latest of d: every version of a and d goes.
	end := f.View().Partition("kv", 0).HighWatermark()
	x.apply(topics.DeleteRecords{Topic: "kv", Partition: 0, Offset: end})
	x.expect("kv", "d", "none")
	x.expect("kv", "a", "1/0=p1")

	// No longer a table, then a table again: the leaves go, then are built
	// from the key index.
	x.apply(topics.AlterConfigs{Topic: "kv", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "cleanup.policy", Value: "delete"}}})
	if n := len(storedLeaves(t, f)); n != 0 {
		t.Fatalf("%d leaves left on a topic that is no table", n)
	}
	x.apply(topics.Produce{Topic: "kv", Partition: 1, Records: keyedBatch(t, x.now, -1, -1, -1, false, "f", "plain")},
		topics.AlterConfigs{Topic: "kv", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "cleanup.policy", Value: "compact"}}},
		topics.Produce{Topic: "kv", Partition: 1, Records: keyedBatch(t, x.now, -1, -1, -1, false, "g", "table")})
	x.expect("kv", "f", "1/1=plain")
	x.expect("kv", "g", "1/2=table")
	x.expect("kv", "a", "1/0=p1")

	f.Close()
	f = open(t, dir)
	x.f = f
	checkTableLeaves(t, f, "after a restart")
	x.expect("kv", "g", "1/2=table")

	x.apply(topics.DeleteTopic{Name: "kv"})
	if n := len(storedLeaves(t, f)); n != 0 {
		t.Fatalf("%d leaves left of a deleted topic", n)
	}
	if _, _, err := f.TableLatest("kv", []byte("a")); !errors.Is(err, topics.ErrUnknownTopic) {
		t.Fatalf("TableLatest of a deleted topic: %v", err)
	}
	f.Close()
}

// TestTableShowsRecordsBehindAnOpenTransaction: a record written outside
// any transaction is a table's latest version as soon as it is committed,
// even behind another producer's open transaction in the same partition
// (docs/read-your-writes.md); the transaction's record shows at its commit.
func TestTableShowsRecordsBehindAnOpenTransaction(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	x := &tableFixture{t: t, f: f, now: t0}
	x.apply(topics.CreateTopic{Name: "kv", Partitions: 1, ReplicationFactor: 1, Configs: []topics.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}})
	pr := x.apply(producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0]
	pid, ep := pr.ProducerID, pr.ProducerEpoch
	x.apply(producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Topic: "kv", Partition: 0})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, pid, ep, 0, true, "a", "txn")})
	x.apply(topics.Produce{Topic: "kv", Partition: 0, Records: keyedBatch(t, x.now, -1, -1, -1, false, "b", "plain")})
	x.expect("kv", "b", "0/1=plain")
	x.expect("kv", "a", "none")
	x.apply(producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Epoch: ep, Commit: true})
	x.expect("kv", "a", "0/0=txn")
}
