package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

// appended is a batch as its block appended it, read back from the log
// before Commit (so before any compaction could rewrite it).
type appended struct {
	height     int64
	base, last int64
	batch      []byte
}

// proofRecorder applies blocks to f and remembers, independently of the
// proof entries the state keeps, the app hash of every height and every
// batch each block appended: what ProveBatch must prove.
type proofRecorder struct {
	t       *testing.T
	f       *FSM
	now     int64
	nonce   int
	hashes  map[int64][]byte
	batches map[string][]appended     // by partKey, in offset order
	ends    map[string]int64          // log end offsets recorded so far, by partKey
	ids     map[string][]core.TopicID // the ids a topic name had, in order
}

func newProofRecorder(t *testing.T, f *FSM) *proofRecorder {
	return &proofRecorder{t: t, f: f, now: t0, hashes: map[int64][]byte{}, batches: map[string][]appended{}, ends: map[string]int64{}, ids: map[string][]core.TopicID{}}
}

func partKey(id core.TopicID, partition int32) string { return fmt.Sprintf("%x/%d", id[:], partition) }

// apply applies one block of raw transactions at block time timeMs and
// commits it.
func (r *proofRecorder) apply(timeMs int64, txs ...[]byte) core.BlockOutcome {
	r.t.Helper()
	height, _ := r.f.Info()
	height++
	out, err := r.f.ApplyBlock(core.Block{Height: height, TimeMs: timeMs, Txs: txs})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, t := range r.f.ByName {
		if !slices.Contains(r.ids[t.Name], t.ID) {
			r.ids[t.Name] = append(r.ids[t.Name], t.ID)
		}
		for _, p := range t.Partitions {
			k := partKey(t.ID, p.Index)
			from := r.ends[k]
			if p.Next == from {
				continue
			}
			data, err := p.Log.Read(from, math.MaxInt32, p.Next)
			if err != nil {
				r.t.Fatalf("reading %s-%d from %d: %v", t.Name, p.Index, from, err)
			}
			batches, err := record.Split(data)
			if err != nil {
				r.t.Fatal(err)
			}
			for _, b := range batches {
				h, err := record.ParseHeader(b)
				if err != nil {
					r.t.Fatal(err)
				}
				r.batches[k] = append(r.batches[k], appended{height: height, base: h.BaseOffset, last: h.LastOffset(), batch: bytes.Clone(b)})
			}
			r.ends[k] = p.Next
		}
	}
	if _, err := r.f.Commit(); err != nil {
		r.t.Fatal(err)
	}
	r.hashes[height] = out.AppHash
	r.now = max(r.now, timeMs)
	return out
}

// block applies a block dt after the last one, each command in its own
// transaction, and returns the commands' results.
func (r *proofRecorder) block(dt int64, cmds ...core.Command) []core.Result {
	r.t.Helper()
	var txs [][]byte
	for _, c := range cmds {
		r.nonce++
		txs = append(txs, tx(r.nonce, c))
	}
	out := r.apply(r.now+dt, txs...)
	var rs []core.Result
	for _, o := range out.Txs {
		rs = append(rs, o.Results...)
	}
	return rs
}

// proofCounts are, per topic, the offsets proved and those refused with
// ErrNoProof because compaction rewrote their batch.
type proofCounts struct{ proved, rewritten map[string]int }

// checkAll asks f for the proof of every offset of every partition and
// checks it against what was appended: an offset whose batch is stored as
// appended gets a proof whose batch is that batch, whose leaf is under the
// root by the path, and whose digest and root give the app hash reported
// at the batch's height; an offset whose batch compaction rewrote or
// removed gets ErrNoProof. It returns the proofs by topic/partition/offset.
func (r *proofRecorder) checkAll(f *FSM, when string) (map[string]*topics.BatchProof, proofCounts) {
	r.t.Helper()
	t := r.t
	proofs := map[string]*topics.BatchProof{}
	counts := proofCounts{map[string]int{}, map[string]int{}}
	for _, tv := range f.View().Topics() {
		for _, p := range tv.Partitions {
			k := partKey(tv.ID, p.Index)
			tampered := map[int64]bool{}
			for off := p.LogStartOffset(); off < p.HighWatermark(); off++ {
				what := fmt.Sprintf("%s: %s-%d offset %d", when, tv.Name, p.Index, off)
				i := slices.IndexFunc(r.batches[k], func(a appended) bool { return a.base <= off && off <= a.last })
				if i < 0 {
					t.Fatalf("%s: no appended batch holds it (test recorder)", what)
				}
				orig := r.batches[k][i]
				data, err := p.Read(off, 1)
				if err != nil {
					t.Fatalf("%s: read: %v", what, err)
				}
				cur, err := record.Split(data)
				if err != nil || len(cur) == 0 {
					t.Fatalf("%s: read %d bytes: %v", what, len(data), err)
				}
				bp, err := f.ProveBatch(tv.Name, p.Index, off)
				if !bytes.Equal(cur[0], orig.batch) {
					// Compaction rewrote the batch holding off, or removed
					// it whole (the read then starts at a later batch).
					if !errors.Is(err, core.ErrNoProof) || bp != nil {
						h, _ := record.ParseHeader(cur[0])
						got := fmt.Sprint(err)
						if bp != nil {
							got = fmt.Sprintf("a proof of the batch at %d-%d", bp.BaseOffset, bp.LastOffset)
						}
						t.Fatalf("%s: the batch appended at %d is no longer stored as appended (the read starts at %d): ProveBatch gave %s; want ErrNoProof",
							what, orig.base, h.BaseOffset, got)
					}
					counts.rewritten[tv.Name]++
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if bp.Topic != tv.Name || bp.TopicID != tv.ID || bp.Partition != p.Index || bp.BaseOffset != orig.base ||
					bp.LastOffset != orig.last || bp.Height != orig.height || !bytes.Equal(bp.Batch, orig.batch) {
					t.Fatalf("%s: proof of %s(%x)-%d batch %d-%d at height %d (%d bytes); want the batch %d-%d appended at height %d",
						what, bp.Topic, bp.TopicID[:], bp.Partition, bp.BaseOffset, bp.LastOffset, bp.Height, len(bp.Batch), orig.base, orig.last, orig.height)
				}
				if got, want := proof.AppHash(bp.Digest, bp.StateRoot, bp.Root), r.hashes[bp.Height]; !bytes.Equal(got, want) {
					t.Fatalf("%s: AppHash(digest, state root, root) = %X, height %d reported %X", what, got, bp.Height, want)
				}
				if err := bp.Path.Verify(bp.Root, proof.BatchLeaf(bp.Topic, bp.TopicID, bp.Partition, bp.BaseOffset, bp.Batch)); err != nil {
					t.Fatalf("%s: the path does not lead from the batch's leaf to the root: %v", what, err)
				}
				if !tampered[bp.BaseOffset] { // once a batch: no altered byte, topic or place verifies
					tampered[bp.BaseOffset] = true
					for _, j := range []int{0, 7, 12, 17, 21, 40, len(bp.Batch) - 1} {
						alt := bytes.Clone(bp.Batch)
						alt[j] ^= 0x01
						if bp.Path.Verify(bp.Root, proof.BatchLeaf(bp.Topic, bp.TopicID, bp.Partition, bp.BaseOffset, alt)) == nil {
							t.Fatalf("%s: the batch with byte %d altered verifies", what, j)
						}
					}
					other := bp.TopicID
					other[0] ^= 1
					for _, leaf := range [][]byte{
						proof.BatchLeaf(bp.Topic+"x", bp.TopicID, bp.Partition, bp.BaseOffset, bp.Batch),
						proof.BatchLeaf(bp.Topic, other, bp.Partition, bp.BaseOffset, bp.Batch),
						proof.BatchLeaf(bp.Topic, bp.TopicID, bp.Partition+1, bp.BaseOffset, bp.Batch),
						proof.BatchLeaf(bp.Topic, bp.TopicID, bp.Partition, bp.BaseOffset+1, bp.Batch),
					} {
						if bp.Path.Verify(bp.Root, leaf) == nil {
							t.Fatalf("%s: the batch verifies at another topic, id, partition or offset", what)
						}
					}
				}
				proofs[fmt.Sprintf("%s/%d/%d", tv.Name, p.Index, off)] = bp
				counts.proved[tv.Name]++
			}
		}
	}
	return proofs, counts
}

// batchProofKeys returns the b/ entries of f's store for the topic id.
func batchProofKeys(t *testing.T, f *FSM, id core.TopicID) int {
	t.Helper()
	n := 0
	for k := range storeContents(t, f) {
		if strings.HasPrefix(k, string(topics.BatchProofPrefix(id))) {
			n++
		}
	}
	return n
}

func wantProveErr(t *testing.T, f *FSM, topic string, partition int32, offset int64, want error) {
	t.Helper()
	bp, err := f.ProveBatch(topic, partition, offset)
	if bp != nil {
		t.Fatalf("ProveBatch(%s, %d, %d) proved the batch at %d-%d of height %d; want %v", topic, partition, offset, bp.BaseOffset, bp.LastOffset, bp.Height, want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("ProveBatch(%s, %d, %d): %v; want %v", topic, partition, offset, err, want)
	}
}

// TestProveBatch (issue 9, DESIGN.md §4): after the scenario's blocks
// (several partitions, several batches and transactions per block, every
// codec, LogAppendTime, retention, DeleteRecords, compaction, a topic
// deleted) every offset of every partition has a proof of the batch that
// holds it, leading to the app hash its block reported, unless compaction
// rewrote that batch; offsets outside the log and unknown topics are
// refused; the proofs are the same after a restart and on a broker
// restored from a snapshot; a deleted topic's batch entries are gone, and a
// topic recreated under its name proves its own batches.
func TestProveBatch(t *testing.T) {
	dir := t.TempDir()
	r := newProofRecorder(t, open(t, dir))
	defer func() { r.f.Close() }()
	for _, b := range scenario(t) {
		r.apply(b.time, b.txs...)
	}
	// One produce of three batches, another tx to another partition,
	// in one block.
	ts := r.now + 700
	three := slices.Concat(batch(t, ts, record.CodecNone, "m", 2), batch(t, ts, record.CodecZstd, "m", 3), batch(t, ts, record.CodecNone, "m", 1))
	r.apply(ts, tx(9000, topics.Produce{Topic: "orders", Partition: 0, Records: three}), tx(9001, topics.Produce{Topic: "orders", Partition: 3, Records: batch(t, ts, record.CodecGzip, "n", 4)}))

	settle(t, r.f) // what the batches are once the decided compactions are written
	before, counts := r.checkAll(r.f, "after the scenario")
	for _, topic := range []string{"orders", "small"} {
		if counts.proved[topic] == 0 || counts.rewritten[topic] != 0 {
			t.Errorf("%s (never compacted): %d offsets proved, %d refused as rewritten; want all proved", topic, counts.proved[topic], counts.rewritten[topic])
		}
	}
	if counts.proved["table"] == 0 || counts.rewritten["table"] == 0 {
		t.Errorf("table (cleanup.policy=compact): %d offsets proved, %d refused as rewritten; want some of each", counts.proved["table"], counts.rewritten["table"])
	}
	t.Logf("proved %v; refused as rewritten by compaction %v", counts.proved, counts.rewritten)
	// The last block's three batches of orders-0 share one block.
	hwm := r.f.View().Partition("orders", 0).HighWatermark()
	last, mid := before[fmt.Sprintf("orders/0/%d", hwm-1)], before[fmt.Sprintf("orders/0/%d", hwm-2)]
	if last == nil || mid == nil || last.Height != mid.Height || last.BaseOffset == mid.BaseOffset || last.Path.Total < 4 {
		t.Fatalf("the last block's batches: %+v and %+v; want two batches of one block of at least 4", last, mid)
	}

	// Offsets outside the log and topics that do not exist.
	wantProveErr(t, r.f, "nope", 0, 0, topics.ErrUnknownTopic)
	wantProveErr(t, r.f, "doomed", 1, 0, topics.ErrUnknownTopic)
	wantProveErr(t, r.f, "orders", 4, 0, topics.ErrUnknownTopic)
	wantProveErr(t, r.f, "orders", -1, 0, topics.ErrUnknownTopic)
	o1 := r.f.View().Partition("orders", 1)
	if o1.LogStartOffset() < 5 {
		t.Fatalf("test setup: DeleteRecords left orders-1's log start at %d", o1.LogStartOffset())
	}
	wantProveErr(t, r.f, "orders", 1, o1.LogStartOffset()-1, topics.ErrOffsetOutOfRange)
	wantProveErr(t, r.f, "orders", 1, 0, topics.ErrOffsetOutOfRange)
	wantProveErr(t, r.f, "orders", 1, -1, topics.ErrOffsetOutOfRange)
	wantProveErr(t, r.f, "orders", 1, o1.HighWatermark(), topics.ErrOffsetOutOfRange)
	wantProveErr(t, r.f, "orders", 1, o1.HighWatermark()+100, topics.ErrOffsetOutOfRange)
	if s := r.f.View().Partition("small", 0); s.LogStartOffset() == 0 {
		t.Fatal("test setup: retention never moved small-0's log start")
	} else {
		wantProveErr(t, r.f, "small", 0, s.LogStartOffset()-1, topics.ErrOffsetOutOfRange)
	}

	// The deleted topic's entries went with it; the live ones have theirs.
	if len(r.ids["doomed"]) != 1 || len(r.batches[partKey(r.ids["doomed"][0], 1)]) == 0 {
		t.Fatal("test setup: no batches recorded for the deleted topic")
	}
	doomed := r.ids["doomed"][0]
	if n := batchProofKeys(t, r.f, doomed); n != 0 {
		t.Fatalf("the deleted topic still has %d batch proof entries", n)
	}
	if n := batchProofKeys(t, r.f, r.f.View().Topic("orders").ID); n == 0 {
		t.Fatal("orders has no batch proof entries")
	}

	// The proofs survive a restart and a snapshot restore.
	s := takeSnapshot(t, r.f, filepath.Join(t.TempDir(), "snap"), nil)
	if err := r.f.Close(); err != nil {
		t.Fatal(err)
	}
	r.f = open(t, dir)
	if after, _ := r.checkAll(r.f, "after a restart"); !reflect.DeepEqual(after, before) {
		t.Fatal("the proofs differ after a restart")
	}
	restored := open(t, t.TempDir())
	defer restored.Close()
	restoreInto(t, restored, s)
	if after, _ := r.checkAll(restored, "restored from a snapshot"); !reflect.DeepEqual(after, before) {
		t.Fatal("the proofs differ on a broker restored from a snapshot")
	}

	// A topic recreated under the deleted one's name proves its own
	// batches, at its own id and heights.
	wantCode(t, "recreate doomed", r.block(700, topics.CreateTopic{Name: "doomed", Partitions: 2, ReplicationFactor: -1})[0], 0)
	wantCode(t, "produce to the new doomed", r.block(700, topics.Produce{Topic: "doomed", Partition: 1, Records: batch(t, r.now, record.CodecNone, "e", 3)})[0], 0)
	height, _ := r.f.Info()
	_, counts = r.checkAll(r.f, "after recreating doomed")
	if counts.proved["doomed"] != 3 {
		t.Fatalf("the recreated topic: %d offsets proved, want 3", counts.proved["doomed"])
	}
	bp, err := r.f.ProveBatch("doomed", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if bp.TopicID == doomed || bp.Height != height || bp.LastOffset != 2 {
		t.Fatalf("the recreated topic's proof: id %x (the deleted one had %x), height %d (want %d), last offset %d", bp.TopicID[:], doomed[:], bp.Height, height, bp.LastOffset)
	}
}

// TestProveTransactionMarkers: the markers a commit, an abort and a
// timeout write are batches of their block like any other, and their
// proofs lead to the app hash of the block that wrote them, including a
// block without transactions (the timeout).
func TestProveTransactionMarkers(t *testing.T) {
	r := newProofRecorder(t, open(t, t.TempDir()))
	defer r.f.Close()
	r.block(0, topics.CreateTopic{Name: "out", Partitions: 2, ReplicationFactor: -1})
	pid := r.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0].ProducerID
	add := func(parts ...int32) {
		var cmds []core.Command
		for _, p := range parts {
			cmds = append(cmds, producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Topic: "out", Partition: p})
		}
		for _, res := range r.block(10, cmds...) {
			wantCode(t, "AddPartitionsToTxn", res, 0)
		}
	}
	// marker checks the proof of offset in out-p: a control batch of the
	// kind wanted, appended at height.
	marker := func(p int32, offset int64, commit bool, height int64) {
		t.Helper()
		bp, err := r.f.ProveBatch("out", p, offset)
		if err != nil {
			t.Fatal(err)
		}
		h, err := record.ParseHeader(bp.Batch)
		if err != nil || !h.Control() || bp.BaseOffset != offset || bp.Height != height {
			t.Fatalf("out-%d offset %d: proof of batch %d (control %v) at height %d; want a marker at height %d", p, offset, bp.BaseOffset, h.Control(), bp.Height, height)
		}
		if c, ok := record.MarkerCommits(bp.Batch); !ok || c != commit {
			t.Fatalf("out-%d offset %d: marker commits %v (%v), want %v", p, offset, c, ok, commit)
		}
	}

	add(0, 1)
	rs := r.block(10, topics.Produce{Topic: "out", Partition: 0, Records: txnBatch(t, pid, 0, 0, 2)}, topics.Produce{Topic: "out", Partition: 1, Records: txnBatch(t, pid, 0, 0, 1)})
	wantCode(t, "write to out-0", rs[0], 0)
	wantCode(t, "write to out-1", rs[1], 0)
	wantCode(t, "commit", r.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Commit: true})[0], 0)
	committed, _ := r.f.Info()
	add(0)
	wantCode(t, "second write", r.block(10, topics.Produce{Topic: "out", Partition: 0, Records: txnBatch(t, pid, 0, 2, 2)})[0], 0)
	wantCode(t, "abort", r.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid})[0], 0)
	aborted, _ := r.f.Info()
	add(1)
	wantCode(t, "third write", r.block(10, topics.Produce{Topic: "out", Partition: 1, Records: txnBatch(t, pid, 0, 1, 1)})[0], 0)
	r.block(61_000) // the transaction times out in a block without transactions
	timedOut, _ := r.f.Info()

	marker(0, 2, true, committed)
	marker(1, 1, true, committed)
	marker(0, 5, false, aborted)
	marker(1, 3, false, timedOut)
	if c, _ := r.f.ProveBatch("out", 0, 2); c.Path.Total != 2 {
		t.Fatalf("the commit's block has %d leaves, want its 2 markers", c.Path.Total)
	}
	_, counts := r.checkAll(r.f, "after the transactions")
	if counts.proved["out"] != 10 || counts.rewritten["out"] != 0 {
		t.Fatalf("proved %v, refused %v; want the 10 offsets of out proved", counts.proved, counts.rewritten)
	}
}

// kvBatch is a batch of one record of key with a value.
func kvBatch(t *testing.T, ts int64, key string, i int) []byte {
	t.Helper()
	b, err := record.Build(record.Header{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{{Key: []byte(key), Value: []byte(fmt.Sprintf("value %d of %s %s", i, key, strings.Repeat("x", 80)))}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProveBatchAfterCompaction (cleanup.policy=compact): a batch
// compaction kept as it was is still proved; one it rewrote is refused
// with ErrNoProof; and so is an offset whose batch it removed whole, even
// though a read from that offset starts at the next, intact batch (the
// proof must be of the batch holding the offset, not of a later one).
func TestProveBatchAfterCompaction(t *testing.T) {
	r := newProofRecorder(t, open(t, t.TempDir()))
	defer r.f.Close()
	r.block(0, topics.CreateTopic{Name: "kv", Partitions: 1, ReplicationFactor: -1, Configs: []topics.ConfigEntry{
		{Name: "cleanup.policy", Value: "compact"}, {Name: "segment.bytes", Value: "1000"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}, {Name: "delete.retention.ms", Value: "0"}}})
	// Offset 0 is a's first record, superseded; 1 is b's only record,
	// kept; then a again and again.
	for i := range 30 {
		key := "a"
		if i == 1 {
			key = "b"
		}
		wantCode(t, "produce", r.block(1000, topics.Produce{Topic: "kv", Records: kvBatch(t, r.now, key, i)})[0], 0)
	}
	p := r.f.View().Partition("kv", 0)
	data, err := p.Read(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := record.ParseHeader(data); err != nil || h.BaseOffset != 1 {
		t.Fatalf("test setup: a read from offset 0 starts at batch %d (%v); want compaction to have removed batch 0", h.BaseOffset, err)
	}
	if bp, err := r.f.ProveBatch("kv", 0, 1); err != nil || bp.BaseOffset != 1 {
		t.Fatalf("b's batch, kept as it was: %+v, %v", bp, err)
	}
	wantProveErr(t, r.f, "kv", 0, 0, core.ErrNoProof)
	_, counts := r.checkAll(r.f, "after compaction")
	if counts.proved["kv"] < 2 || counts.rewritten["kv"] == 0 {
		t.Fatalf("proved %d offsets, refused %d; want some of each", counts.proved["kv"], counts.rewritten["kv"])
	}
	t.Logf("kv: %d offsets proved, %d refused", counts.proved["kv"], counts.rewritten["kv"])
}
