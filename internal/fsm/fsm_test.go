package fsm

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/pkg/proof"
)

const t0 = int64(1_700_000_000_000) // block time of the first test block, ms

// batch builds a v2 batch of n records with keys key-0..key-(n-1).
func batch(t testing.TB, ts int64, codec record.Codec, keyPrefix string, n int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i),
			Key: []byte(fmt.Sprintf("%s-%d", keyPrefix, i%3)), Value: bytes.Repeat([]byte{byte('a' + i%26)}, 100)}
	}
	b, err := record.Build(record.Header{FirstTimestamp: ts, Attributes: int16(codec), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ledgerBatch is block h's batch for the ledger topic: events of keys
// acct-0..acct-2, acct-0 with a snapshot record every fifth block, acct-1
// with one only at block 12, acct-2 never.
func ledgerBatch(t testing.TB, ts int64, h int) []byte {
	t.Helper()
	var recs []record.Record
	for k := range 3 {
		r := record.Record{OffsetDelta: int32(k), Key: []byte(fmt.Sprintf("acct-%d", k)), Value: []byte(fmt.Sprintf("event %d of acct-%d %s", h, k, bytes.Repeat([]byte("x"), 60)))}
		if (k == 0 && h%5 == 0) || (k == 1 && h == 12) {
			r.Value = []byte(fmt.Sprintf("balance of acct-%d after block %d", k, h))
			r.Headers = []record.RecordHeader{{Key: topics.SnapshotHeader, Value: []byte("1")}}
		}
		recs = append(recs, r)
	}
	b, err := record.Build(record.Header{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tx(i int, cmds ...core.Command) []byte {
	var n core.Nonce
	n[0], n[1] = byte(i>>8), byte(i)
	return EncodeTx(core.Tx{Nonce: n, Commands: cmds})
}

func open(t testing.TB, dir string) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// Before t.TempDir's removal: a test that does not close f must not
	// leave a compaction writing into its directory.
	t.Cleanup(f.Compactor.Wg.Wait)
	return f
}

type block struct {
	time int64
	txs  [][]byte
	// evidence is the misbehavior the block commits (the golden scenario's
	// removal of a validator, cluster/membership.go).
	evidence []core.Misbehavior
}

// at is b as the state machine's block of height h.
func (b block) at(h int64) core.Block {
	return core.Block{Height: h, TimeMs: b.time, Txs: b.txs, Misbehavior: b.evidence}
}

// scenario is a run of blocks exercising every command, retention and
// compaction.
func scenario(t testing.TB) []block {
	codecs := []record.Codec{record.CodecNone, record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd}
	var blocks []block
	blocks = append(blocks, block{time: t0, txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "orders", Partitions: 3, ReplicationFactor: -1}),
		tx(2, topics.CreateTopic{Name: "small", Partitions: 1, ReplicationFactor: 1, Configs: []topics.ConfigEntry{
			{Name: "segment.bytes", Value: "2000"}, {Name: "retention.bytes", Value: "4000"}}}),
		tx(3, topics.CreateTopic{Name: "table", Partitions: 1, ReplicationFactor: 1, Configs: []topics.ConfigEntry{
			{Name: "cleanup.policy", Value: "compact"}, {Name: "segment.bytes", Value: "1500"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}, {Name: "delete.retention.ms", Value: "0"}}}),
		tx(4, topics.CreateTopic{Name: "ledger", Partitions: 1, ReplicationFactor: 1, Configs: []topics.ConfigEntry{
			{Name: "cleanup.policy", Value: "snapshot"}, {Name: "segment.bytes", Value: "1500"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}}}),
	}})
	for h := 1; h <= 30; h++ {
		ts := t0 + int64(h)*700
		var txs [][]byte
		for p := int32(0); p < 3; p++ {
			txs = append(txs, tx(100*h+int(p), topics.Produce{Topic: "orders", Partition: p, Records: batch(t, ts, codecs[(h+int(p))%len(codecs)], "k", 1+h%5)}))
		}
		txs = append(txs, tx(100*h+10,
			topics.Produce{Topic: "ledger", Partition: 0, Records: ledgerBatch(t, ts, h)},
			topics.Produce{Topic: "small", Partition: 0, Records: batch(t, ts, record.CodecNone, "s", 4)},
			topics.Produce{Topic: "table", Partition: 0, Records: batch(t, ts, record.CodecNone, "t", 6)},
			topics.Produce{Topic: "nope", Partition: 0, Records: batch(t, ts, record.CodecNone, "x", 1)},
		))
		switch h {
		case 5:
			txs = append(txs, tx(5000, topics.AlterConfigs{Topic: "orders", Incremental: true, Changes: []topics.ConfigChange{{Op: topics.OpSet, Name: "message.timestamp.type", Value: "LogAppendTime"}}}))
		case 8:
			txs = append(txs, tx(5001, topics.CreatePartitions{Name: "orders", Count: 4}))
		case 10:
			// Groups: an offset committed from outside any generation,
			// and a member whose group forms a generation at 15.
			txs = append(txs, tx(5010, groups.OffsetCommit{Group: "audit", Generation: -1, Topic: "orders", Partition: 0, Offset: 3, Metadata: "m"},
				groups.JoinGroup{Group: "live", ClientID: "c", ProtocolType: "consumer", Protocols: []groups.GroupProtocol{{Name: "range"}},
					SessionTimeoutMs: 60_000, RebalanceTimeoutMs: 60_000}))
		case 12:
			txs = append(txs, tx(5002, topics.DeleteRecords{Topic: "orders", Partition: 1, Offset: 5}))
		case 13:
			// Signed producers: a key registered, a signed record written.
			alice := ed25519.NewKeyFromSeed(append(make([]byte, 31), 7))
			pub := alice.Public().(ed25519.PublicKey)
			rec := record.Record{Key: []byte("sig"), Value: []byte("signed")}
			sig := proof.SignRecord(alice, "alice", 1, "small", rec.Key, rec.Value, nil)
			rec.Headers = []record.RecordHeader{{Key: proof.SignatureHeader, Value: []byte(sig)}}
			b, err := record.Build(record.Header{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{rec})
			if err != nil {
				t.Fatal(err)
			}
			txs = append(txs, tx(5006, trust.RegisterProducerKey{Principal: "alice", PublicKey: pub, Proof: ed25519.Sign(alice, proof.RegistrationMessage("alice", pub))}),
				tx(5007, topics.Produce{Topic: "small", Partition: 0, Records: b}))
		case 20:
			txs = append(txs, tx(5003, topics.CreateTopic{Name: "doomed", Partitions: 2, ReplicationFactor: -1}),
				[]byte("not a transaction"))
		case 21:
			txs = append(txs, tx(5004, topics.Produce{Topic: "doomed", Partition: 1, Records: batch(t, ts, record.CodecNone, "d", 2)}))
		case 22:
			txs = append(txs, tx(5005, topics.DeleteTopic{Name: "doomed"}))
		}
		blocks = append(blocks, block{time: ts, txs: txs})
	}
	return blocks
}

func applyAll(t testing.TB, f *FSM, blocks []block) [][]byte {
	t.Helper()
	var hashes [][]byte
	for _, out := range applyOutcomes(t, f, blocks) {
		hashes = append(hashes, out.AppHash)
	}
	return hashes
}

// applyOutcomes applies and commits blocks from height 1 and returns each
// height's outcome.
func applyOutcomes(t testing.TB, f *FSM, blocks []block) []core.BlockOutcome {
	t.Helper()
	var outs []core.BlockOutcome
	for i, b := range blocks {
		out, err := f.ApplyBlock(b.at(int64(i + 1)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	settle(t, f)
	return outs
}

// settle waits for the compactions the committed blocks decided, which run
// in the background (compactor.go), so that the caller sees their files.
func settle(t testing.TB, f *FSM) {
	t.Helper()
	if err := f.WaitCompactions(); err != nil {
		t.Fatal(err)
	}
}

// logFiles returns every file under dir/logs with its bytes.
func logFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	root := filepath.Join(dir, "logs")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(root, path)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDeterminism feeds the same blocks to two state machines and requires
// the same app hash after every block and byte-identical logs (DESIGN.md §1).
func TestDeterminism(t *testing.T) {
	blocks := scenario(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := open(t, dirA), open(t, dirB)
	defer a.Close()
	defer b.Close()
	ha, hb := applyAll(t, a, blocks), applyAll(t, b, blocks)
	for i := range ha {
		if !bytes.Equal(ha[i], hb[i]) {
			t.Fatalf("app hash differs at height %d", i+1)
		}
	}
	fa, fb := logFiles(t, dirA), logFiles(t, dirB)
	if len(fa) == 0 || len(fa) != len(fb) {
		t.Fatalf("log file sets differ: %d vs %d files", len(fa), len(fb))
	}
	names := make([]string, 0, len(fa))
	for n := range fa {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !bytes.Equal(fa[n], fb[n]) {
			t.Fatalf("%s differs between the two state machines", n)
		}
	}
	// The scenario did what it meant to: retention moved "small" on,
	// compaction shrank "table", the deleted topic is gone.
	v := a.View()
	if p := v.Partition("small", 0); p.LogStartOffset() == 0 {
		t.Errorf("retention.bytes never advanced the log start offset of small-0")
	}
	if p := v.Partition("orders", 1); p.LogStartOffset() < 5 {
		t.Errorf("DeleteRecords: log start offset %d, want >= 5", p.LogStartOffset())
	}
	if v.Topic("doomed") != nil {
		t.Errorf("deleted topic still visible")
	}
	if _, err := os.Stat(filepath.Join(dirA, "logs", "doomed-0")); !os.IsNotExist(err) {
		t.Errorf("deleted topic's directory still there: %v", err)
	}
	if len(v.Topic("orders").Partitions) != 4 {
		t.Errorf("CreatePartitions did not add a partition")
	}
}

// TestRecoveryReplaysUncommittedBlock crashes between ApplyBlock and
// Commit: the reopened state machine is at the previous height, its logs hold
// nothing of the lost block, and replaying the block gives the same hash.
func TestRecoveryReplaysUncommittedBlock(t *testing.T) {
	blocks := scenario(t)
	dir := t.TempDir()
	f := open(t, dir)
	want := applyAll(t, open(t, t.TempDir()), blocks)
	applyAll(t, f, blocks[:10])
	if _, err := f.ApplyBlock(core.Block{Height: 11, TimeMs: blocks[10].time, Txs: blocks[10].txs}); err != nil {
		t.Fatal(err)
	}
	f.Close() // no Commit: as if killed
	f = open(t, dir)
	defer f.Close()
	if h, hash := f.Info(); h != 10 || !bytes.Equal(hash, want[9]) {
		t.Fatalf("after crash: height %d hash %x, want 10 %x", h, hash, want[9])
	}
	for i := 10; i < len(blocks); i++ {
		out, err := f.ApplyBlock(core.Block{Height: int64(i + 1), TimeMs: blocks[i].time, Txs: blocks[i].txs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.AppHash, want[i]) {
			t.Fatalf("replayed height %d: hash differs", i+1)
		}
	}
}

func TestProduceResults(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	good := batch(t, t0, record.CodecNone, "k", 3)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 0xff
	big := batch(t, t0, record.CodecNone, "k", 20)
	out, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "t", Partitions: 2, ReplicationFactor: -1, Configs: []topics.ConfigEntry{{Name: "max.message.bytes", Value: "1000"}}}),
		tx(2,
			topics.Produce{Topic: "t", Partition: 0, Records: good},
			topics.Produce{Topic: "t", Partition: 0, Records: good},
			topics.Produce{Topic: "t", Partition: 1, Records: corrupt},
			topics.Produce{Topic: "t", Partition: 2, Records: good},
			topics.Produce{Topic: "t", Partition: 1, Records: big},
			topics.Produce{Topic: "u", Partition: 0, Records: good},
		),
	}})
	if err != nil {
		t.Fatal(err)
	}
	rs := out.Txs[1].Results
	want := []struct {
		code int16
		base int64
	}{{0, 0}, {0, 3}, {kerr.CorruptMessage.Code, 0}, {kerr.UnknownTopicOrPartition.Code, 0}, {kerr.MessageTooLarge.Code, 0}, {kerr.UnknownTopicOrPartition.Code, 0}}
	for i, w := range want {
		if rs[i].Code != w.code || (w.code == 0 && rs[i].BaseOffset != w.base) {
			t.Errorf("result %d: code %d base %d (%s), want code %d base %d", i, rs[i].Code, rs[i].BaseOffset, rs[i].Message, w.code, w.base)
		}
	}
	p := f.View().Partition("t", 0)
	if p != nil {
		t.Fatalf("uncommitted topic visible before Commit")
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	p = f.View().Partition("t", 0)
	if p.HighWatermark() != 6 {
		t.Fatalf("high watermark %d, want 6", p.HighWatermark())
	}
	data, err := p.Read(4, 1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := record.ParseHeader(data)
	if err != nil || h.BaseOffset != 3 {
		t.Fatalf("read at 4 returned batch at %d (%v), want the batch at 3", h.BaseOffset, err)
	}
	if _, err := p.Read(7, 100); err == nil {
		t.Fatalf("read past the high watermark succeeded")
	}
}

// TestBlockOrder refuses a block that does not follow the last one.
func TestBlockOrder(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.Close()
	if _, err := f.ApplyBlock(core.Block{Height: 2, TimeMs: t0, Txs: nil}); err == nil {
		t.Fatal("applied height 2 first")
	}
	if _, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: nil}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ApplyBlock(core.Block{Height: 2, TimeMs: t0, Txs: nil}); err == nil {
		t.Fatal("applied height 2 before committing 1")
	}
}

// TestLiveness: the signers of each block are recorded with the height they
// signed and survive a restart.
func TestLiveness(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	a, b := []byte{0xa}, []byte{0xb}
	for h, signers := range [][][]byte{nil, {a, b}, {a}} {
		if _, err := f.ApplyBlock(core.Block{Height: int64(h + 1), TimeMs: t0 + int64(h)*1000, Signers: signers}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(f *FSM) {
		t.Helper()
		ss, now := f.Liveness()
		if now != t0+2000 || len(ss) != 2 {
			t.Fatalf("liveness: %+v at %d", ss, now)
		}
		if ss[0].LastHeight != 2 || ss[0].LastTimeMs != t0+2000 || ss[1].LastHeight != 1 || ss[1].LastTimeMs != t0+1000 {
			t.Fatalf("liveness: %+v", ss)
		}
	}
	check(f)
	f.Close()
	f = open(t, dir)
	defer f.Close()
	check(f)
}

// TestReadRefusesDamagedBatch: a committed batch whose bytes changed on
// disk fails its CRC when read, and is never returned.
func TestReadRefusesDamagedBatch(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	defer f.Close()
	b := batch(t, t0, record.CodecNone, "k", 3)
	if _, err := f.ApplyBlock(core.Block{Height: 1, TimeMs: t0, Txs: [][]byte{
		tx(1, topics.CreateTopic{Name: "t", Partitions: 1, ReplicationFactor: -1}),
		tx(2, topics.Produce{Topic: "t", Records: b}, topics.Produce{Topic: "t", Records: b}),
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "logs", "t-0", "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[len(b)+len(b)/2] ^= 0x01 // inside the second batch's records
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p := f.View().Partition("t", 0)
	if got, err := p.Read(0, 1); err != nil || len(got) != len(b) {
		t.Fatalf("the undamaged first batch: %d bytes, %v", len(got), err)
	}
	if got, err := p.Read(3, 1<<20); !errors.Is(err, topics.ErrCorruptLog) || got != nil {
		t.Fatalf("damaged batch: %d bytes returned, err %v; want ErrCorruptLog", len(got), err)
	}
}
