package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/keys"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/record"
)

// scanKey is what a reader finds without the index: every committed data
// record of topic, read through each partition from its log start, whose
// key is key and whose offset is at least from, as "partition/offset=value".
func scanKey(t *testing.T, f *FSM, topic string, key []byte, from int64) []string {
	t.Helper()
	tv := f.View().Topic(topic)
	var out []string
	for _, p := range tv.Partitions {
		for off := p.LogStartOffset(); off < p.LastStableOffset(); {
			data, err := p.Read(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			batches, err := record.Split(data)
			if err != nil || len(batches) == 0 {
				t.Fatalf("%s-%d@%d: %v", topic, p.Index, off, err)
			}
			for _, b := range batches {
				h, recs, err := record.Records(b)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if !h.Control() && r.Offset >= off && r.Offset >= from && bytes.Equal(r.Key, key) && !p.InAbortedTxn(h.ProducerID, r.Offset) {
						out = append(out, fmt.Sprintf("%d/%d=%s", p.Index, r.Offset, r.Value))
					}
				}
				off = h.LastOffset() + 1
			}
		}
	}
	return out
}

// checkLatest: KeyLatest is the last of the key's events (all, as
// keyEvents formats them) when they are in one partition, and one of each
// partition's last otherwise.
func checkLatest(t *testing.T, f *FSM, topic string, key []byte, all []string) {
	t.Helper()
	ev, ok, err := f.KeyLatest(topic, key)
	if err != nil || ok != (len(all) > 0) {
		t.Fatalf("KeyLatest(%s, %q): %v %v; the key has %d events", topic, key, ok, err, len(all))
	}
	if !ok {
		return
	}
	got := fmt.Sprintf("%d/%d=%s", ev.Partition, ev.Offset, ev.Value)
	last := map[string]string{} // partition -> its last event
	for _, e := range all {
		last[strings.SplitN(e, "/", 2)[0]] = e
	}
	if len(last) == 1 && got != all[len(all)-1] || last[fmt.Sprint(ev.Partition)] != got {
		t.Fatalf("KeyLatest(%s, %q) = %s; events %v", topic, key, got, all)
	}
}

func keyEvents(t *testing.T, f *FSM, topic string, key []byte, from int64, limit int) []string {
	t.Helper()
	evs, err := f.KeyEvents(topic, key, from, limit)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if !bytes.Equal(e.Key, key) {
			t.Fatalf("KeyEvents(%q) returned key %q", key, e.Key)
		}
		out = append(out, fmt.Sprintf("%d/%d=%s", e.Partition, e.Offset, e.Value))
	}
	return out
}

// TestKeyEvents: after the scenario's blocks (every codec, retention,
// DeleteRecords, compaction, partitions added, a topic deleted), a key's
// events read through the index equal a full scan of the topic filtered by
// key, from any offset and with any limit; the same after a restart and on
// a broker restored from a snapshot; keys that differ by a zero byte or
// share a prefix stay apart; a deleted topic's entries go with it.
func TestKeyEvents(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	applyAll(t, f, scenario(t))
	check := func(f *FSM, when string) {
		t.Helper()
		for _, topic := range []string{"orders", "small", "table", "ledger"} {
			for _, prefix := range []string{"k", "s", "t", "acct", "missing"} {
				for i := range 3 {
					key := []byte(fmt.Sprintf("%s-%d", prefix, i))
					all := scanKey(t, f, topic, key, 0)
					if got := keyEvents(t, f, topic, key, 0, 1<<20); !slices.Equal(got, all) {
						t.Fatalf("%s: %s %q: index gives %v\nscan gives %v", when, topic, key, got, all)
					}
					checkLatest(t, f, topic, key, all)
					if len(all) < 2 {
						continue
					}
					// From the second event's offset, and the first two only.
					var p int32
					var off int64
					fmt.Sscanf(all[1], "%d/%d=", &p, &off)
					if got, want := keyEvents(t, f, topic, key, off, 1<<20), scanKey(t, f, topic, key, off); !slices.Equal(got, want) {
						t.Fatalf("%s: %s %q from %d: %v, want %v", when, topic, key, off, got, want)
					}
					if got := keyEvents(t, f, topic, key, 0, 2); !slices.Equal(got, all[:2]) {
						t.Fatalf("%s: %s %q limit 2: %v, want %v", when, topic, key, got, all[:2])
					}
				}
			}
		}
	}
	check(f, "after the scenario")
	if n := len(keyEvents(t, f, "orders", []byte("k-0"), 0, 1<<20)); n == 0 {
		t.Fatal("orders has no events of k-0: the scenario changed and this test checks nothing")
	}

	s := takeSnapshot(t, f, filepath.Join(t.TempDir(), "snap"), nil)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	check(f, "after a restart")
	restored := open(t, t.TempDir())
	restoreInto(t, restored, s)
	check(restored, "restored from a snapshot")

	// The deleted topic left no entry; keys apart by a zero byte or a
	// prefix stay apart.
	for k := range storeContents(t, f) {
		if strings.HasPrefix(k, "k/") && !slices.ContainsFunc(f.View().Topics(), func(tv *topics.TopicView) bool {
			return strings.HasPrefix(k, string(keys.KeyTopicPrefix(tv.ID)))
		}) {
			t.Fatalf("key index entry %q belongs to no topic", k)
		}
	}
	keys := [][]byte{[]byte("a"), []byte("a\x00"), []byte("a\x00b"), []byte("ab"), {}, []byte("\x00")}
	var recs []record.Record
	for i, k := range keys {
		recs = append(recs, record.Record{OffsetDelta: int32(i), Key: k, Value: []byte(fmt.Sprint(i))})
	}
	recs = append(recs, record.Record{OffsetDelta: int32(len(keys)), Value: []byte("no key")})
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := f.Info()
	for i, blk := range []block{
		{time: t0 + 100_000, txs: [][]byte{tx(9000, topics.CreateTopic{Name: "doomed", Partitions: 2, ReplicationFactor: -1}), tx(9001, topics.CreateTopic{Name: "bytes", Partitions: 1, ReplicationFactor: -1})}},
		{time: t0 + 101_000, txs: [][]byte{tx(9002, topics.Produce{Topic: "bytes", Partition: 0, Records: b})}},
	} {
		if _, err := f.ApplyBlock(core.Block{Height: h + int64(i) + 1, TimeMs: blk.time, Txs: blk.txs}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if got := keyEvents(t, f, "doomed", []byte("d-0"), 0, 100); len(got) != 0 {
		t.Fatalf("the recreated topic doomed has the old one's events: %v", got)
	}
	for i, k := range keys {
		if got, want := keyEvents(t, f, "bytes", k, 0, 100), []string{fmt.Sprintf("0/%d=%d", i, i)}; !slices.Equal(got, want) {
			t.Errorf("key %q: %v, want %v", k, got, want)
		}
	}
	// Listing: byte order, by prefix, paged with after.
	list := func(topic, prefix, after string, limit int) []string {
		t.Helper()
		var a []byte
		if after != "" {
			a = []byte(after)
		}
		ks, err := f.Keys(topic, []byte(prefix), a, limit)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, k := range ks {
			out = append(out, string(k))
		}
		return out
	}
	for _, c := range []struct {
		prefix, after string
		limit         int
		want          []string
	}{
		{"", "", 100, []string{"", "\x00", "a", "a\x00", "a\x00b", "ab"}},
		{"a", "", 100, []string{"a", "a\x00", "a\x00b", "ab"}},
		{"a\x00", "", 100, []string{"a\x00", "a\x00b"}},
		{"a", "a\x00", 100, []string{"a\x00b", "ab"}},
		{"", "", 2, []string{"", "\x00"}},
		{"", "\x00", 2, []string{"a", "a\x00"}},
		{"", "ab", 2, []string{}},
		{"b", "", 100, []string{}},
	} {
		if got := list("bytes", c.prefix, c.after, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("Keys(prefix %q, after %q, limit %d) = %q, want %q", c.prefix, c.after, c.limit, got, c.want)
		}
	}
	// Every key with a record in the log, as a scan finds them.
	for _, topic := range []string{"orders", "small", "table", "ledger"} {
		seen := map[string]bool{}
		for _, p := range f.View().Topic(topic).Partitions {
			for off := p.LogStartOffset(); off < p.HighWatermark(); {
				data, err := p.Read(off, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				batches, _ := record.Split(data)
				for _, b := range batches {
					h, recs, err := record.Records(b)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range recs {
						if r.Offset >= off && r.Key != nil {
							seen[string(r.Key)] = true
						}
					}
					off = h.LastOffset() + 1
				}
			}
		}
		want := slices.Sorted(maps.Keys(seen))
		if got := list(topic, "", "", 1000); !slices.Equal(got, want) {
			t.Errorf("%s: Keys = %q, a scan finds %q", topic, got, want)
		}
	}

	if _, err := f.KeyEvents("nope", []byte("a"), 0, 1); err == nil {
		t.Error("KeyEvents on a topic that does not exist: no error")
	}
}

// TestKeyEventsTransactions: a key's events leave out the records of an
// aborted transaction, and those of one not decided yet until its commit.
func TestKeyEventsTransactions(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	d.block(0, topics.CreateTopic{Name: "out", Partitions: 1, ReplicationFactor: -1})
	pid := d.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0].ProducerID
	keyed := func(seq int32, values ...string) []byte {
		var recs []record.Record
		for i, v := range values {
			recs = append(recs, record.Record{OffsetDelta: int32(i), Key: []byte("acct"), Value: []byte(v)})
		}
		b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: pid, BaseSequence: seq, Attributes: 0x10}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	txn := func(seq int32, commit bool, values ...string) {
		wantCode(t, "add", d.block(10, producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Topic: "out", Partition: 0})[0], 0)
		wantCode(t, "produce", d.block(10, topics.Produce{Topic: "out", Partition: 0, Records: keyed(seq, values...)})[0], 0)
		if got := keyEvents(t, d.f, "out", []byte("acct"), 0, 100); slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "="+values[0]) }) {
			t.Fatalf("an undecided transaction's record is among the key's events: %v", got)
		}
		wantCode(t, "end", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid, Commit: commit})[0], 0)
	}
	txn(0, false, "aborted-1", "aborted-2")
	txn(2, true, "committed-1")
	txn(3, false, "aborted-3")
	txn(4, true, "committed-2", "committed-3")
	got := keyEvents(t, d.f, "out", []byte("acct"), 0, 100)
	want := scanKey(t, d.f, "out", []byte("acct"), 0)
	if !slices.Equal(got, want) || len(got) != 3 || !strings.HasSuffix(got[0], "=committed-1") {
		t.Fatalf("key events %v; scan %v; want the three committed records", got, want)
	}
}

// occBatch builds a batch of records (key, value, expected version; an
// expectation of noExpectation adds no header).
func occBatch(t *testing.T, recs ...occRec) []byte {
	t.Helper()
	var rs []record.Record
	for i, r := range recs {
		rec := record.Record{OffsetDelta: int32(i), Value: []byte(r.value)}
		if r.key != "" {
			rec.Key = []byte(r.key)
		}
		if r.expect != "" {
			rec.Headers = []record.RecordHeader{{Key: topics.ExpectedVersionHeader, Value: []byte(r.expect)}}
		}
		rs = append(rs, rec)
	}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type occRec struct{ key, value, expect string }

// TestOptimisticConcurrency: a record stating the version it expects its
// key to be at is written only if the key is there (counting the records
// before it in the same batch and block); otherwise the whole batch, other
// keys included, is refused with INVALID_RECORD and a message naming the
// key and its version; two writers racing for one version in one block
// cannot both win; malformed expectations are refused; an aborted
// transaction's record is not a version.
func TestOptimisticConcurrency(t *testing.T) {
	d := &groupDriver{t: t, f: openGroups(t, t.TempDir()), now: t0}
	d.block(0, topics.CreateTopic{Name: "acct", Partitions: 2, ReplicationFactor: -1})
	produce := func(recs ...occRec) core.Result {
		return d.block(10, topics.Produce{Topic: "acct", Partition: 0, Records: occBatch(t, recs...)})[0]
	}
	wantCode(t, "first event of a, expecting none", produce(occRec{"a", "a0", "-1"}), 0)                              // offset 0
	wantCode(t, "a at 0, then a at the record before it", produce(occRec{"a", "a1", "0"}, occRec{"a", "a2", "1"}), 0) // 1, 2
	r := produce(occRec{"b", "b0", "-1"}, occRec{"a", "stale", "1"})
	wantCode(t, "a stale expectation", r, kerr.InvalidRecord.Code)
	if !strings.Contains(r.Message, `key "a"`) || !strings.Contains(r.Message, "latest is version 2") {
		t.Errorf("conflict message %q does not name the key and its version", r.Message)
	}
	if got := keyEvents(t, d.f, "acct", []byte("b"), 0, 10); len(got) != 0 {
		t.Fatalf("the refused batch's other key was written: %v", got)
	}
	wantCode(t, "expecting none of a key that has events", produce(occRec{"a", "x", "-1"}), kerr.InvalidRecord.Code)
	wantCode(t, "no header: always written", produce(occRec{"a", "a3", ""}), 0)     // 3
	wantCode(t, "after an unconditional write", produce(occRec{"a", "a4", "3"}), 0) // 4

	// Two writers expecting version 4 in one block: the first ordered wins.
	res := d.block(10,
		topics.Produce{Topic: "acct", Partition: 0, Records: occBatch(t, occRec{"a", "writer-1", "4"})},
		topics.Produce{Topic: "acct", Partition: 0, Records: occBatch(t, occRec{"a", "writer-2", "4"})})
	wantCode(t, "the first of two racing writers", res[0], 0)
	wantCode(t, "the second of two racing writers", res[1], kerr.InvalidRecord.Code)

	// Versions are per partition: partition 1 has no event of a.
	wantCode(t, "a in partition 1", d.block(10, topics.Produce{Topic: "acct", Partition: 1, Records: occBatch(t, occRec{"a", "p1", "-1"})})[0], 0)

	for name, rec := range map[string]occRec{
		"a version that is not a number": {"a", "x", "five"},
		"a version below -1":             {"a", "x", "-2"},
		"a version with a leading zero":  {"a", "x", "05"},
		"an expectation without a key":   {"", "x", "5"},
	} {
		wantCode(t, name, produce(rec), kerr.InvalidRecord.Code)
	}
	got := keyEvents(t, d.f, "acct", []byte("a"), 0, 100)
	want := []string{"0/0=a0", "0/1=a1", "0/2=a2", "0/3=a3", "0/4=a4", "0/5=writer-1", "1/0=p1"}
	if !slices.Equal(got, want) {
		t.Fatalf("events of a: %v\nwant %v", got, want)
	}

	// An aborted transaction's record of c is not a version of c.
	pid := d.block(10, producers.InitProducerID{TransactionalID: "tx", TimeoutMs: 60_000})[0].ProducerID
	wantCode(t, "add", d.block(10, producers.AddPartitionsToTxn{TransactionalID: "tx", ProducerID: pid, Topic: "acct", Partition: 0})[0], 0)
	txnRec := record.Record{Key: []byte("c"), Value: []byte("aborted")}
	b, err := record.Build(record.Header{FirstTimestamp: t0, ProducerID: pid, BaseSequence: 0, Attributes: 0x10}, []record.Record{txnRec})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "transactional write of c", d.block(10, topics.Produce{Topic: "acct", Partition: 0, Records: b})[0], 0)
	wantCode(t, "c is held by the open transaction", produce(occRec{"c", "x", "-1"}), kerr.InvalidRecord.Code)
	wantCode(t, "abort", d.block(10, producers.EndTxn{TransactionalID: "tx", ProducerID: pid})[0], 0)
	wantCode(t, "c has no event once the transaction is aborted", produce(occRec{"c", "c0", "-1"}), 0)
}

// TestKeySnapshots: in the scenario's ledger topic (cleanup.policy=
// snapshot), compaction removed every record of a key older than its
// latest snapshot record and nothing else: acct-0 keeps its last snapshot
// and the events after it, acct-1 (one snapshot) the same, acct-2 (none)
// every event; offsets are unchanged; KeySnapshot finds each latest
// snapshot, and a read from it gives the snapshot, then the events after.
func TestKeySnapshots(t *testing.T) {
	f := open(t, t.TempDir())
	applyAll(t, f, scenario(t))
	p := f.View().Partition("ledger", 0)
	// Offsets: block h (1..30) wrote acct-0, acct-1, acct-2 at 3(h-1)+0..2.
	for k, lastSnap := range map[int]int{0: 30, 1: 12, 2: 0} {
		key := []byte(fmt.Sprintf("acct-%d", k))
		all := scanKey(t, f, "ledger", key, 0)
		var want []string
		from := 1
		if lastSnap > 0 {
			from = lastSnap
		}
		for h := from; h <= 30; h++ {
			off := int64(3*(h-1) + k)
			v := fmt.Sprintf("event %d of acct-%d %s", h, k, strings.Repeat("x", 60))
			if h == lastSnap {
				v = fmt.Sprintf("balance of acct-%d after block %d", k, h)
			}
			want = append(want, fmt.Sprintf("0/%d=%s", off, v))
		}
		// Compaction only reaches sealed segments: the active one may keep
		// older records of the key.
		if len(all) < len(want) || !slices.Equal(all[len(all)-len(want):], want) {
			t.Fatalf("%s in the log: %v\nwant it to end with %v", key, all, want)
		}
		if lastSnap > 0 {
			if n := len(all) - len(want); n > 0 {
				t.Logf("%s: %d records older than its snapshot are still in the active segment", key, n)
			}
		}
		part, off, ok, err := f.KeySnapshot("ledger", key)
		switch {
		case err != nil:
			t.Fatal(err)
		case lastSnap == 0 && ok:
			t.Fatalf("%s has no snapshot, KeySnapshot found %d/%d", key, part, off)
		case lastSnap > 0 && (!ok || part != 0 || off != int64(3*(lastSnap-1)+k)):
			t.Fatalf("%s: KeySnapshot %d/%d %v, want 0/%d", key, part, off, ok, 3*(lastSnap-1)+k)
		case lastSnap > 0:
			evs, err := f.KeyEvents("ledger", key, off, 100)
			if err != nil || len(evs) == 0 || !evs[0].Snapshot || evs[0].Offset != off {
				t.Fatalf("%s from its snapshot: %+v %v", key, evs, err)
			}
		}
	}
	if p.LogStartOffset() != 0 {
		t.Fatalf("the log start moved to %d: snapshot compaction must not", p.LogStartOffset())
	}
	// Something was compacted at all: acct-2's first event is still there,
	// acct-0's is not.
	if got := scanKey(t, f, "ledger", []byte("acct-0"), 0); strings.HasPrefix(got[0], "0/0=") {
		t.Fatal("acct-0's first event is still in the log: nothing was compacted")
	}
}

// TestKeyEntryKeyLen: the arena persist sizes for a block's entry keys
// holds them exactly, zero bytes (escaped to two) included.
func TestKeyEntryKeyLen(t *testing.T) {
	tp := &topics.Topic{ID: core.TopicID{1, 2, 3}}
	for _, key := range [][]byte{nil, {}, []byte("k"), {0}, {0, 0, 'a', 0}, []byte("a\x00b\xff")} {
		e := keys.KeyEntry{Topic: tp, Partition: 7, Key: key, Offset: 1 << 40}
		k := keys.AppendKeyEntryKey(nil, e)
		if len(k) != keys.KeyEntryKeyLen(e) {
			t.Errorf("key %q: entry key of %d bytes, keyEntryKeyLen %d", key, len(k), keys.KeyEntryKeyLen(e))
		}
		if !bytes.HasPrefix(k, keys.KeyPrefix(tp.ID, key)) {
			t.Errorf("key %q: entry key %x does not start with its key prefix", key, k)
		}
	}
}
