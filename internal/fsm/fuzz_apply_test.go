package fsm

import (
	"bytes"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// cmdProgram turns fuzz bytes into blocks of hostile but well-formed
// commands: every command encodes, but its names, partitions, offsets,
// generations, producer ids and epochs come from the input, over a small
// vocabulary so that commands meet each other's state (the same topics,
// groups, members and transactional ids).
type cmdProgram struct {
	b []byte
}

func (p *cmdProgram) next() byte {
	if len(p.b) == 0 {
		return 0
	}
	v := p.b[0]
	p.b = p.b[1:]
	return v
}

func (p *cmdProgram) pick(words ...string) string { return words[int(p.next())%len(words)] }
func (p *cmdProgram) small() int32                { return int32(p.next()%6) - 1 } // -1..4
func (p *cmdProgram) offset() int64               { return int64(p.next()%40) - 2 }

var (
	fuzzTopics  = []string{"a", "b", "c-compact", "d"}
	fuzzGroups  = []string{"g", "h"}
	fuzzMembers = []string{"", "m-1", "m-2", "bogus"}
	fuzzTxnIDs  = []string{"", "t1", "t2"}
	fuzzConfigs = []ConfigEntry{
		{"cleanup.policy", "compact"}, {"cleanup.policy", "delete"}, {"cleanup.policy", "snapshot"},
		{"retention.ms", "1000"}, {"retention.ms", "soon"}, {"retention.bytes", "2000"},
		{"segment.bytes", "1400"}, {"max.message.bytes", "200"}, {"message.timestamp.type", "LogAppendTime"},
		{"min.cleanable.dirty.ratio", "0.01"}, {"no.such.config", "1"}, {"stele.signed.by", "alice"},
	}
)

// blocks returns the program's blocks: a command byte of 0xff ends a block
// (advancing block time by the next byte, in seconds).
func (p *cmdProgram) blocks(t *testing.T) []block {
	now := t0
	var out []block
	cur := block{time: now}
	nonce := 0
	for len(p.b) > 0 && len(out) < 40 {
		op := p.next()
		if op == 0xff {
			out = append(out, cur)
			now += int64(p.next()) * 1000
			cur = block{time: now}
			continue
		}
		c := p.command(t, op)
		if c == nil {
			continue
		}
		nonce++
		cur.txs = append(cur.txs, tx(nonce, c))
	}
	return append(out, cur)
}

func (p *cmdProgram) command(t *testing.T, op byte) Command {
	topic := p.pick(fuzzTopics...)
	switch op % 21 {
	case 0:
		c := CreateTopic{Name: topic, Partitions: p.small() + 1, ReplicationFactor: -1}
		for range p.next() % 3 {
			c.Configs = append(c.Configs, fuzzConfigs[int(p.next())%len(fuzzConfigs)])
		}
		return c
	case 1:
		return DeleteTopic{Name: topic}
	case 2:
		return CreatePartitions{Name: topic, Count: p.small() + 2}
	case 3:
		e := fuzzConfigs[int(p.next())%len(fuzzConfigs)]
		return AlterConfigs{Topic: topic, Incremental: p.next()%2 == 0, Changes: []ConfigChange{{ConfigOp(p.next() % 4), e.Name, e.Value}}}
	case 4, 5, 6:
		codecs := []record.Codec{record.CodecNone, record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd}
		var records []byte
		switch p.next() % 4 {
		case 0:
			records = idBatch(t, int64(p.next()%4), int16(p.next()%2), int32(p.next()%6), 1+int(p.next()%3))
		case 1:
			records = txnBatch(t, int64(p.next()%4), int16(p.next()%2), int32(p.next()%6), 1+int(p.next()%3))
		default:
			records = batch(t, t0, codecs[int(p.next())%len(codecs)], "k", 1+int(p.next()%5))
		}
		return Produce{Topic: topic, Partition: p.small(), Records: records}
	case 7:
		return DeleteRecords{Topic: topic, Partition: p.small(), Offset: p.offset()}
	case 8:
		return JoinGroup{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...), InstanceID: p.pick("", "static"), ClientID: "c",
			ProtocolType: p.pick("consumer", "connect"), Protocols: []GroupProtocol{{Name: p.pick("range", "sticky")}},
			SessionTimeoutMs: 6000, RebalanceTimeoutMs: 6000, RequireKnownMember: p.next()%2 == 0}
	case 9:
		m := p.pick(fuzzMembers...)
		return SyncGroup{Group: p.pick(fuzzGroups...), MemberID: m, Generation: p.small(),
			Assignments: []MemberAssignment{{MemberID: m, Assignment: []byte{p.next()}}}}
	case 10:
		return Heartbeat{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...), Generation: p.small()}
	case 11:
		return LeaveGroup{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...)}
	case 12:
		return OffsetCommit{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...), Generation: p.small(),
			Topic: topic, Partition: p.small(), Offset: p.offset(), LeaderEpoch: -1, Metadata: "m"}
	case 13:
		return DeleteGroup{Group: p.pick(fuzzGroups...)}
	case 14:
		return OffsetDelete{Group: p.pick(fuzzGroups...), Topic: topic, Partition: p.small()}
	case 15:
		c := ConsumerGroupHeartbeat{Group: p.pick("cg", "g"), MemberID: p.pick("m-1", "m-2", "m-3"), Epoch: p.small(), ClientID: "c",
			RebalanceTimeoutMs: 5000, OwnedSet: p.next()%2 == 0}
		switch p.next() % 3 {
		case 0:
			c.TopicsSet, c.Topics = true, []string{topic, p.pick(fuzzTopics...)}
		case 1:
			c.RegexSet, c.Regex = true, p.pick("a|b", "c-.*", "(", ".*")
		}
		return c
	case 16:
		return Tick{}
	case 17:
		return InitProducerID{TransactionalID: p.pick(fuzzTxnIDs...), TimeoutMs: int32(p.next()) * 100}
	case 18:
		return AddPartitionsToTxn{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2), Topic: topic, Partition: p.small()}
	case 19:
		return AddOffsetsToTxn{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2), Group: p.pick(fuzzGroups...)}
	case 20:
		if p.next()%2 == 0 {
			return TxnOffsetCommit{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2),
				Group: p.pick(fuzzGroups...), Generation: -1, Topic: topic, Partition: p.small(), Offset: p.offset(), LeaderEpoch: -1}
		}
		return EndTxn{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2), Commit: p.next()%2 == 0}
	}
	return nil
}

// FuzzApplyTwice applies hostile but well-formed command sequences to two
// state machines, the second restarted before every other block: neither
// may panic or fail, and after every block both must hold the same app
// hash and the same results, and at the end byte-identical logs
// (DESIGN.md §1: same blocks, same state, restarts included).
func FuzzApplyTwice(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0xff, 1, 4, 0, 0, 2, 1, 2, 0xff, 5})
	f.Add([]byte{0, 2, 0, 1, 5, 2, 0, 3, 1, 0xff, 0, 8, 0, 1, 0, 0, 0, 0xff, 4, 16, 0xff, 9, 10, 1, 1, 1})
	f.Add([]byte{0, 0, 1, 17, 0, 1, 30, 18, 0, 1, 0, 1, 4, 0, 1, 1, 0, 0, 2, 20, 1, 1, 1, 0, 1, 0xff, 200, 16})
	f.Add([]byte{0, 1, 2, 0, 4, 15, 0, 0, 0, 0, 0, 1, 0, 0xff, 10, 15, 0, 0, 1, 1, 1, 1, 1, 0xff, 60, 16, 0xff, 60, 16})
	f.Add([]byte{0, 3, 2, 1, 6, 3, 2, 1, 4, 1, 2, 3, 0xff, 1, 7, 1, 2, 9, 1, 0xff, 250, 16, 0xff, 250, 16})
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks := (&cmdProgram{b: data}).blocks(t)
		bdir := t.TempDir()
		a, b := open(t, t.TempDir()), open(t, bdir)
		defer a.Close()
		defer func() { b.Close() }()
		for i, blk := range blocks {
			// b restarts before every other block: everything hashed must
			// come back from the store as it was.
			if i%2 == 1 {
				b.Close()
				b = open(t, bdir)
			}
			var outs [2]BlockOutcome
			for j, m := range []*FSM{a, b} {
				out, err := m.ApplyBlock(Block{Height: int64(i + 1), TimeMs: blk.time, Txs: blk.txs})
				if err != nil {
					t.Fatalf("height %d: %v", i+1, err)
				}
				if _, err := m.Commit(); err != nil {
					t.Fatalf("height %d: commit: %v", i+1, err)
				}
				outs[j] = out
			}
			if !bytes.Equal(outs[0].AppHash, outs[1].AppHash) {
				t.Fatalf("height %d: app hashes differ", i+1)
			}
			for k := range outs[0].Txs {
				if !bytes.Equal(outs[0].Txs[k].Data, outs[1].Txs[k].Data) {
					t.Fatalf("height %d tx %d: results differ", i+1, k)
				}
			}
		}
		settle(t, a)
		settle(t, b)
		fa, fb := logFiles(t, a.opts.Dir), logFiles(t, b.opts.Dir)
		if len(fa) != len(fb) {
			t.Fatalf("%d log files vs %d", len(fa), len(fb))
		}
		for name, data := range fa {
			if !bytes.Equal(data, fb[name]) {
				t.Fatalf("%s differs", name)
			}
		}
	})
}
