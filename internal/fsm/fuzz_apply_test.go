package fsm

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"testing"

	"github.com/stele-io/stele/internal/fsm/cluster"
	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/groups"
	"github.com/stele-io/stele/internal/fsm/producers"
	"github.com/stele-io/stele/internal/fsm/topics"
	"github.com/stele-io/stele/internal/fsm/trust"
	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/schema"
)

// cmdProgram turns fuzz bytes into blocks of hostile but well-formed
// commands: every command encodes, but its names, partitions, offsets,
// generations, producer ids and epochs come from the input, over a small
// vocabulary so that commands meet each other's state (the same topics,
// groups, members and transactional ids). Upgrade votes are signed by
// keys, the validators' (testValidators), or by strangers when it is nil.
type cmdProgram struct {
	b      []byte
	keys   []ed25519.PrivateKey
	height int64 // of the block being built
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
	fuzzConfigs = []topics.ConfigEntry{
		{Name: "cleanup.policy", Value: "compact"}, {Name: "cleanup.policy", Value: "delete"}, {Name: "cleanup.policy", Value: "snapshot"},
		{Name: "retention.ms", Value: "1000"}, {Name: "retention.ms", Value: "soon"}, {Name: "retention.bytes", Value: "2000"},
		{Name: "segment.bytes", Value: "1400"}, {Name: "max.message.bytes", Value: "200"}, {Name: "message.timestamp.type", Value: "LogAppendTime"},
		{Name: "min.cleanable.dirty.ratio", Value: "0.01"}, {Name: "no.such.config", Value: "1"}, {Name: "stele.signed.by", Value: "alice"},
		{Name: "delete.retention.ms", Value: "0"}, {Name: "cleanup.policy", Value: "compact,delete"},
		{Name: "stele.value.schema.validation", Value: "full"}, {Name: "stele.key.schema.validation", Value: "id"},
		{Name: "stele.value.subject.name.strategy", Value: "RecordNameStrategy"},
		{Name: "stele.subject.from", Value: "field:a"}, {Name: "stele.subject.from", Value: "field:r.a"},
	}
	// fuzzSchemas are Avro schemas of the registry's commands: compatible
	// and incompatible with each other, referencing one another, and none.
	fuzzSchemas = []string{`"string"`, `{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string","default":""}]}`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"c","type":"int"}]}`,
		`{"type":"record","name":"S","fields":[{"name":"r","type":"R"}]}`, `{"type":"recrod"}`}
	fuzzSubjects    = []string{"a-value", "a-key", "b-value", "R"}
	fuzzJSONSchemas = []string{`{"title":"R","type":"object","properties":{"a":{"type":"integer"}}}`,
		`{"title":"R","type":"object","properties":{"a":{"type":"number"}},"additionalProperties":false}`, `true`, `{"type":"strin"}`}
	// fuzzProtoSchemas import "R" (a reference's name) in one of them.
	fuzzProtoSchemas = []string{`syntax = "proto3"; message R { int32 a = 1; }`, `syntax = "proto3"; message R { sint32 a = 1; string b = 2; }`,
		`syntax = "proto3"; import "R"; message S { R r = 1; }`, `syntax = "proto3"; message {`}
	// fuzzTable makes a topic a table (tables.go) that compacts at once.
	fuzzTable = []topics.ConfigEntry{{Name: "segment.bytes", Value: "300"}, {Name: "min.cleanable.dirty.ratio", Value: "0.01"}, {Name: "delete.retention.ms", Value: "0"}}
	fuzzKeys  = []string{"a", "b", "c"}
	// fuzzStranger signs upgrade votes but is no validator.
	fuzzStranger = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
)

// blocks returns the program's blocks: a command byte of 0xff ends a block
// (advancing block time by the next byte, in seconds).
func (p *cmdProgram) blocks(t *testing.T) []block {
	now := t0
	var out []block
	cur := block{time: now}
	nonce := 0
	for len(p.b) > 0 && len(out) < 40 {
		p.height = int64(len(out) + 1)
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

func (p *cmdProgram) command(t *testing.T, op byte) core.Command {
	topic := p.pick(fuzzTopics...)
	switch op % 28 {
	case 0:
		c := topics.CreateTopic{Name: topic, Partitions: p.small() + 1, ReplicationFactor: -1}
		for range p.next() % 3 {
			c.Configs = append(c.Configs, fuzzConfigs[int(p.next())%len(fuzzConfigs)])
		}
		return c
	case 1:
		return topics.DeleteTopic{Name: topic}
	case 2:
		return topics.CreatePartitions{Name: topic, Count: p.small() + 2}
	case 3:
		e := fuzzConfigs[int(p.next())%len(fuzzConfigs)]
		return topics.AlterConfigs{Topic: topic, Incremental: p.next()%2 == 0, Changes: []topics.ConfigChange{{Op: topics.ConfigOp(p.next() % 4), Name: e.Name, Value: e.Value}}}
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
		return topics.Produce{Topic: topic, Partition: p.small(), Records: records}
	case 7:
		return topics.DeleteRecords{Topic: topic, Partition: p.small(), Offset: p.offset()}
	case 8:
		return groups.JoinGroup{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...), InstanceID: p.pick("", "static"), ClientID: "c",
			ProtocolType: p.pick("consumer", "connect"), Protocols: []groups.GroupProtocol{{Name: p.pick("range", "sticky")}},
			SessionTimeoutMs: 6000, RebalanceTimeoutMs: 6000, RequireKnownMember: p.next()%2 == 0}
	case 9:
		m := p.pick(fuzzMembers...)
		return groups.SyncGroup{Group: p.pick(fuzzGroups...), MemberID: m, Generation: p.small(),
			Assignments: []groups.MemberAssignment{{MemberID: m, Assignment: []byte{p.next()}}}}
	case 10:
		return groups.Heartbeat{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...), Generation: p.small()}
	case 11:
		return groups.LeaveGroup{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...)}
	case 12:
		return groups.OffsetCommit{Group: p.pick(fuzzGroups...), MemberID: p.pick(fuzzMembers...), Generation: p.small(),
			Topic: topic, Partition: p.small(), Offset: p.offset(), LeaderEpoch: -1, Metadata: "m"}
	case 13:
		return groups.DeleteGroup{Group: p.pick(fuzzGroups...)}
	case 14:
		return groups.OffsetDelete{Group: p.pick(fuzzGroups...), Topic: topic, Partition: p.small()}
	case 15:
		c := groups.ConsumerGroupHeartbeat{Group: p.pick("cg", "g"), MemberID: p.pick("m-1", "m-2", "m-3"), Epoch: p.small(), ClientID: "c",
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
		return producers.InitProducerID{TransactionalID: p.pick(fuzzTxnIDs...), TimeoutMs: int32(p.next()) * 100}
	case 18:
		return producers.AddPartitionsToTxn{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2), Topic: topic, Partition: p.small()}
	case 19:
		return producers.AddOffsetsToTxn{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2), Group: p.pick(fuzzGroups...)}
	case 20:
		if p.next()%2 == 0 {
			return producers.TxnOffsetCommit{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2),
				Group: p.pick(fuzzGroups...), Generation: -1, Topic: topic, Partition: p.small(), Offset: p.offset(), LeaderEpoch: -1}
		}
		return producers.EndTxn{TransactionalID: p.pick(fuzzTxnIDs...), ProducerID: int64(p.next() % 4), Epoch: int16(p.next() % 2), Commit: p.next()%2 == 0}
	case 21:
		return topics.Produce{Topic: topic, Partition: p.small(), Records: p.keyedRecords(t)}
	case 22:
		c := topics.CreateTopic{Name: topic, Partitions: int32(p.next()%3) + 1, ReplicationFactor: -1,
			Configs: append([]topics.ConfigEntry{{Name: "cleanup.policy", Value: p.pick("compact", "snapshot", "compact,delete")}}, fuzzTable...)}
		if p.next()%2 == 0 {
			c.Configs = append(c.Configs, fuzzConfigs[int(p.next())%len(fuzzConfigs)])
		}
		return c
	case 23:
		return p.upgrade()
	case 24:
		c := RegisterSchema{Tenant: p.pick("", "", "", "acme"), Subject: p.pick(fuzzSubjects...), Text: p.pick(fuzzSchemas...), Normalize: p.next()%4 == 0}
		switch p.next() % 6 {
		case 0, 1:
			c.Type, c.Text = "JSON", p.pick(fuzzJSONSchemas...)
		case 2:
			c.Type, c.Text = "PROTOBUF", p.pick(fuzzProtoSchemas...)
		}
		if p.next()%3 == 0 {
			c.Refs = []schema.Ref{{Name: "R", Subject: p.pick(fuzzSubjects...), Version: p.small()}}
		}
		return c
	case 25:
		subject := p.pick(fuzzSubjects...)
		switch p.next() % 4 {
		case 0:
			return DeleteSchemaVersion{Subject: subject, Version: p.small(), Permanent: p.next()%2 == 0}
		case 1:
			return DeleteSchemaSubject{Subject: subject, Permanent: p.next()%2 == 0}
		case 2:
			return SetSchemaConfig{Subject: p.pick(subject, ""), Level: p.pick("NONE", "FULL_TRANSITIVE", "BACKWARD", "FORWARD"), Remove: p.next()%4 == 0}
		}
		return SetSchemaMode{Mode: p.pick("READONLY", "READWRITE", "READWRITE")}
	case 26:
		group, member := p.pick("sg", "sg", "g", "cg"), p.pick("s-1", "s-2", "s-3")
		switch p.next() % 4 {
		case 0:
			return ShareGroupHeartbeat{Group: group, MemberID: member, Epoch: p.small() - 1, TopicsSet: p.next()%2 == 0, Topics: []string{topic}}
		case 1:
			return SetShareGroupConfigs{Group: group, Configs: []ShareConfigEntry{{Name: p.pick("share.auto.offset.reset", "stele.share.key.ordering", "share.isolation.level", "share.delivery.count.limit"),
				Value: p.pick("earliest", "true", "read_committed", "2", "x"), Delete: p.next()%5 == 0}}}
		case 2:
			return AlterShareOffsets{Group: group, Offsets: []ShareOffset{{Topic: topic, Partition: p.small(), Start: p.offset()}}}
		}
		if p.next()%2 == 0 {
			return DeleteShareGroup{Group: group}
		}
		return DeleteShareOffsets{Group: group, Topics: []string{topic}}
	case 27:
		c := ShareAcquire{Group: p.pick("sg", "sg", "g"), MemberID: p.pick("s-1", "s-2", "s-3"), MaxRecords: int32(p.next() % 8),
			Renew: p.next()%3 == 0, Close: p.next()%6 == 0}
		for range 1 + p.next()%2 {
			part := SharePart{Topic: topic, Partition: p.small(), Acquire: p.next()%3 != 0}
			if p.next()%2 == 0 {
				first := p.offset()
				part.Acks = []ShareAckBatch{{First: first, Last: first + int64(p.next()%3), Types: []int8{int8(p.next() % 5)}}}
			}
			c.Parts = append(c.Parts, part)
		}
		if p.next()%4 == 0 { // a filter, by key prefix or subject (records here have none)
			return FilteredShareAcquire{ShareAcquire: c, Filter: ShareFilter{KeyPrefix: []byte(p.pick("", "k", "k1", "x")), Subject: p.pick("", "", "a.>", "*")}}
		}
		return c
	}
	return nil
}

// keyedRecords is a batch of 1-3 records of keys fuzzKeys, tombstones
// among them, outside any producer or of an idempotent or transactional
// one.
func (p *cmdProgram) keyedRecords(t *testing.T) []byte {
	var kv []string
	for range 1 + p.next()%3 {
		kv = append(kv, p.pick(fuzzKeys...), p.pick("1", "22", "", "333"))
	}
	switch p.next() % 3 {
	case 0:
		return keyedBatch(t, t0, -1, -1, -1, false, kv...)
	case 1:
		return keyedBatch(t, t0, int64(p.next()%4), int16(p.next()%2), int32(p.next()%6), false, kv...)
	default:
		return keyedBatch(t, t0, int64(p.next()%4), int16(p.next()%2), int32(p.next()%6), true, kv...)
	}
}

// upgrade is an upgrade vote at a height around the soonest allowed, of
// versions 1 (cancel) to 4 (one neither machine runs), signed by any of the
// validators and a stranger; sometimes forged, signed twice by one
// validator, or signed for another plan or another chain.
func (p *cmdProgram) upgrade() cluster.ScheduleUpgrade {
	plan := cluster.UpgradePlan{Height: p.height + cluster.MinUpgradeDelay + int64(p.next()%12) - 3, Version: 1 + uint32(p.next()%4), Name: p.pick("", "v2", "v3", "a b")}
	signed := plan
	if p.next()%8 == 0 {
		signed.Height++
	}
	c := cluster.ScheduleUpgrade{ChainID: testChainID, Plan: plan}
	chain := testChainID
	switch p.next() % 16 {
	case 0: // signed for another chain, and says so
		c.ChainID, chain = "stele-staging", "stele-staging"
	case 1: // signed for another chain, and claims this one
		chain = "stele-staging"
	}
	who := p.next()
	for i, k := range p.keys {
		if who&(1<<i) != 0 {
			c.Sigs = append(c.Sigs, cluster.SignUpgrade(chain, signed, fuzzAddr(k), k))
		}
	}
	if who&0x80 != 0 || p.keys == nil {
		c.Sigs = append(c.Sigs, cluster.SignUpgrade(chain, signed, fuzzAddr(fuzzStranger), fuzzStranger))
	}
	switch p.next() % 8 {
	case 0:
		if len(c.Sigs) > 0 {
			c.Sigs[0].Signature[p.next()%64] ^= 1
		}
	case 1:
		if len(c.Sigs) > 0 {
			c.Sigs = append(c.Sigs, c.Sigs[0])
		}
	}
	return c
}

// fuzzAddr is the validator address of k, as testValidators makes it.
func fuzzAddr(k ed25519.PrivateKey) [20]byte {
	var a [20]byte
	h := sha256.Sum256(k.Public().(ed25519.PublicKey))
	copy(a[:], h[:20])
	return a
}

// fuzzMaxVersion is the highest app version the fuzzed machines run: an
// upgrade to fuzzMaxVersion+1 stops both at its height.
const fuzzMaxVersion = 3

// openVoting opens a state machine of the test validator set's chain.
func openVoting(t testing.TB, dir string, vs *trust.ValidatorSet) *FSM {
	t.Helper()
	f, err := Open(Options{Dir: dir, HousekeepingIntervalMs: 1000, Validators: vs, ChainID: testChainID, maxAppVersionForTest: fuzzMaxVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Compactor.Wg.Wait)
	return f
}

// sameMachines fails unless a and b, their compactions written, hold the
// same metadata store (the trie's nodes aside: storeContents), the same
// log files byte for byte and table leaves the logs justify.
func sameMachines(t *testing.T, a, b *FSM, who string) {
	t.Helper()
	settle(t, a)
	settle(t, b)
	sa, sb := storeContents(t, a), storeContents(t, b)
	if !maps.Equal(sa, sb) {
		for k, v := range sa {
			if w, ok := sb[k]; !ok || w != v {
				t.Fatalf("%s: store key %q is %x on the first machine, %x (present %v) on the second", who, k, v, w, ok)
			}
		}
		for k := range sb {
			if _, ok := sa[k]; !ok {
				t.Fatalf("%s: store key %q is only on the second machine", who, k)
			}
		}
	}
	fa, fb := logFiles(t, a.opts.Dir), logFiles(t, b.opts.Dir)
	if len(fa) != len(fb) {
		t.Fatalf("%s: %d log files vs %d", who, len(fa), len(fb))
	}
	for name, data := range fa {
		if !bytes.Equal(data, fb[name]) {
			t.Fatalf("%s: %s differs", who, name)
		}
	}
	checkTableLeaves(t, a, who)
}

// FuzzApplyTwice applies hostile but well-formed command sequences
// (upgrade votes of a 4-validator set and tables with keyed records and
// tombstones among them) to two state machines, the second restarted
// before every other block: neither may panic or fail, except that both
// refuse alike the height of an upgrade to a version they do not run.
// After every block both must hold the same app hash, results, state root
// and upgrade state; after most blocks, and at the end, their compactions
// written, the same store, byte-identical logs and the table leaves the
// logs justify (checkTableLeaves). Every fourth block is left unsettled so
// that the next applies while compactions run. At the end each state
// root is the one the store's contents hash to (DESIGN.md §1: same
// blocks, same state, restarts included).
func FuzzApplyTwice(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0xff, 1, 4, 0, 0, 2, 1, 2, 0xff, 5})
	f.Add([]byte{0, 2, 0, 1, 5, 2, 0, 3, 1, 0xff, 0, 8, 0, 1, 0, 0, 0, 0xff, 4, 16, 0xff, 9, 10, 1, 1, 1})
	f.Add([]byte{0, 0, 1, 17, 0, 1, 30, 18, 0, 1, 0, 1, 4, 0, 1, 1, 0, 0, 2, 20, 1, 1, 1, 0, 1, 0xff, 200, 16})
	f.Add([]byte{0, 1, 2, 0, 4, 15, 0, 0, 0, 0, 0, 1, 0, 0xff, 10, 15, 0, 0, 1, 1, 1, 1, 1, 0xff, 60, 16, 0xff, 60, 16})
	f.Add([]byte{0, 3, 2, 1, 6, 3, 2, 1, 4, 1, 2, 3, 0xff, 1, 7, 1, 2, 9, 1, 0xff, 250, 16, 0xff, 250, 16})
	// A table of 2 partitions; keyed records and tombstones, idempotent
	// and transactional ones (committed); churn that compacts.
	table := []byte{22, 3, 1, 0, 1, 0xff, 1,
		21, 3, 1, 2, 0, 0, 1, 2, 2, 1, 0, 21, 3, 2, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0xff, 1,
		17, 0, 1, 30, 18, 3, 1, 0, 0, 1, 18, 3, 1, 1, 0, 1, 21, 3, 1, 0, 0, 0, 2, 0, 0, 0, 21, 3, 1, 0, 1, 0, 2, 1, 0, 0, 0xff, 1,
		20, 0, 1, 1, 0, 0, 0, 20, 0, 1, 1, 1, 0, 0, 0xff, 1}
	for i := range byte(10) {
		table = append(table, 21, 3, 1+i%2, 2, i, i, i+1, 2, i+2, 3, 0, 0xff, 1)
	}
	f.Add(table)
	// Validators 0 and 1 vote for version 2 at height 12; a vote with a
	// forged signature is refused; validator 2's vote schedules it, and
	// blocks of keyed records pass its height.
	up := []byte{22, 0, 0, 1, 1, 23, 0, 4, 1, 1, 1, 0x03, 2, 0xff, 1,
		23, 0, 3, 1, 1, 1, 0x84, 0, 5, 23, 0, 3, 1, 1, 1, 0x04, 2, 0xff, 1}
	for i := range byte(14) {
		up = append(up, 21, 0, 1, 1, i, i, i+1, 2, 0, 0xff, 1)
	}
	f.Add(up)
	// All four vote for version 4, which neither machine runs: both stop
	// at its height.
	stop := []byte{23, 0, 3, 3, 1, 1, 0x0f, 2, 0xff, 1}
	for range 14 {
		stop = append(stop, 16, 0, 0xff, 1)
	}
	f.Add(stop)
	vs, keys := testValidators(f, 4)
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks := (&cmdProgram{b: data, keys: keys}).blocks(t)
		bdir := t.TempDir()
		a, b := openVoting(t, t.TempDir(), vs), openVoting(t, bdir, vs)
		defer a.Close()
		defer func() { b.Close() }()
		for i, blk := range blocks {
			h := int64(i + 1)
			// b restarts before every other block: everything hashed must
			// come back from the store as it was.
			if i%2 == 1 {
				b.Close()
				b = openVoting(t, bdir, vs)
			}
			var outs [2]core.BlockOutcome
			var errs [2]error
			for j, m := range []*FSM{a, b} {
				out, err := m.ApplyBlock(core.Block{Height: h, TimeMs: blk.time, Txs: blk.txs})
				if err != nil {
					errs[j] = err
					continue
				}
				if _, err := m.Commit(); err != nil {
					t.Fatalf("height %d: commit: %v", h, err)
				}
				outs[j] = out
			}
			if errs[0] != nil || errs[1] != nil {
				// Only an upgrade past fuzzMaxVersion stops a machine, and
				// it stops both at the same height with nothing applied.
				var ua, ub *cluster.UpgradeRequiredError
				if !errors.As(errs[0], &ua) || !errors.As(errs[1], &ub) || ua.Plan != ub.Plan || ua.Plan.Version <= fuzzMaxVersion {
					t.Fatalf("height %d: %v / %v", h, errs[0], errs[1])
				}
				if ha, _ := a.Info(); ha != h-1 {
					t.Fatalf("height %d refused, but the state is at %d", h, ha)
				}
				break
			}
			if !bytes.Equal(outs[0].AppHash, outs[1].AppHash) {
				t.Fatalf("height %d: app hashes differ", h)
			}
			for k := range outs[0].Txs {
				if !bytes.Equal(outs[0].Txs[k].Data, outs[1].Txs[k].Data) {
					t.Fatalf("height %d tx %d: results differ", h, k)
				}
			}
			if !bytes.Equal(a.StateRoot, b.StateRoot) {
				t.Fatalf("height %d: state roots differ: %x %x", h, a.StateRoot, b.StateRoot)
			}
			if ua, ub := a.Upgrade(), b.Upgrade(); !reflect.DeepEqual(ua, ub) {
				t.Fatalf("height %d: upgrade states differ: %+v %+v", h, ua, ub)
			}
			if i%4 != 3 {
				sameMachines(t, a, b, fmt.Sprintf("height %d", h))
			}
		}
		sameMachines(t, a, b, "at the end")
		checkTableLeaves(t, b, "at the end, the restarted machine")
		for _, m := range []*FSM{a, b} {
			root, err := core.RebuildStateRoot(m.Store)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(root, m.StateRoot) {
				t.Fatalf("the store's contents hash to state root %x, the machine holds %x", root, m.StateRoot)
			}
		}
	})
}
