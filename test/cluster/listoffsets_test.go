package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/test/harness"
)

// TestListOffsetsByTimeAcrossBrokers (issue 27): "a write acknowledged by
// a broker must be visible to every later read on that broker, the time
// index included", and, since every broker applies the same blocks and a
// ListOffsets by time first waits for a block ordered after it, on every
// other broker too. Four brokers with certified batches (the data plane,
// the default). Each round produces one batch to one broker itself (each
// in turn, with acks=all, then each with acks=1), to a CreateTime topic
// and to a LogAppendTime one; the batch's records carry timestamps out of
// order (the first later than the second). As soon as the produce is
// answered, every broker is asked ListOffsets for each record's timestamp,
// for one just below each, for one past the batch's largest, for the time
// the produce was sent, and for latest (-1) and max timestamp (-3), and
// must answer what Kafka answers for the partition as written so far: the
// first offset whose record's timestamp is at least the one asked, with
// that timestamp, or -1 when there is none. A record franz-go's own
// producer writes (to the partition's leader, idempotent with acks=all,
// plain with acks=1) is checked the same way on the CreateTime topic.
//
// On the LogAppendTime topic a record's timestamp is the clock of the
// broker that proposed its block, read as it built the block (app version
// 2, docs/kafka-api.md, "Read after an acknowledged write"): never before
// the produce was sent, whichever broker proposed it (the four share this
// machine's clock), so the lookup by the time the produce was sent finds
// the batch. The model holds the stamps the produce answers carry.
func TestListOffsetsByTimeAcrossBrokers(t *testing.T) {
	const rounds = 8
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	all := c.KafkaAddrs(c.All()...)
	lat := "LogAppendTime"
	topics := []lotTopic{{name: "lot-create"}, {name: "lot-append", logAppendTime: true}}
	for _, tp := range topics {
		var cfg map[string]*string
		if tp.logAppendTime {
			cfg = map[string]*string{"message.timestamp.type": &lat}
		}
		harness.CreateTopic(t, all, tp.name, 1, cfg)
	}
	idem, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer idem.Close()
	leaderAck, err := kgo.NewClient(kgo.SeedBrokers(all...), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer leaderAck.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	for r := range rounds {
		for ti := range topics {
			tp := &topics[ti]
			// Every broker with acks=all, then every broker with acks=1.
			node, acks := r%len(c.Nodes), int16(-1)
			if r/len(c.Nodes)%2 == 1 {
				acks = 1
			}
			sent := time.Now().UnixMilli()
			// Out of order within the batch: the first record is later
			// than the second; the batch's largest is the third.
			base := sent - 50
			stamps := []int64{base + 3, base, base + 7, base + 1}[:1+(r+r/len(c.Nodes)+ti)%4]
			off, appendTime, err := produceStamped(ctx, c, node, tp.name, acks, stamps, r)
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
			how := fmt.Sprintf("a batch of %d produced to node%d with acks=%d", len(stamps), node, acks)
			if tp.logAppendTime {
				if appendTime < 0 {
					t.Fatalf("round %d: %s to LogAppendTime topic %s was answered without a log_append_time", r, how, tp.name)
				}
				if appendTime < sent {
					t.Errorf("round %d: %s to LogAppendTime topic %s was stamped %d, %d ms before it was sent",
						r, how, tp.name, appendTime, sent-appendTime)
				}
				for i := range stamps {
					stamps[i] = appendTime
				}
			}
			what := fmt.Sprintf("round %d, %s", r, how)
			tp.add(t, off, stamps, what)
			checkListOffsets(ctx, t, c, tp, stamps, sent, what)
		}
		// franz-go's producer, to the leader, on the CreateTime topic.
		tp := &topics[0]
		cl, how := idem, "franz-go idempotent acks=all"
		if r%2 == 1 {
			cl, how = leaderAck, "franz-go acks=1"
		}
		rec := &kgo.Record{Topic: tp.name, Partition: 0, Value: fmt.Appendf(nil, "kgo-%d", r)}
		sent := time.Now().UnixMilli()
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("round %d: %s: %v", r, how, err)
		}
		ts := rec.Timestamp.UnixMilli()
		what := fmt.Sprintf("round %d, %s", r, how)
		tp.add(t, rec.Offset, []int64{ts}, what)
		checkListOffsets(ctx, t, c, tp, []int64{ts}, sent, what)
	}
	t.Logf("%d rounds in %v", rounds, time.Since(start).Round(time.Millisecond))
}

// lotTopic is a topic of TestListOffsetsByTimeAcrossBrokers and what its
// partition 0 holds: each record's timestamp, by offset.
type lotTopic struct {
	name          string
	logAppendTime bool
	stamps        []int64
}

// add records a batch acknowledged at offset off.
func (tp *lotTopic) add(t *testing.T, off int64, stamps []int64, what string) {
	t.Helper()
	if off != int64(len(tp.stamps)) {
		t.Fatalf("%s: acknowledged at offset %d, but %s-0 held %d records", what, off, tp.name, len(tp.stamps))
	}
	tp.stamps = append(tp.stamps, stamps...)
}

// byTime is what Kafka answers to ListOffsets for ts: the first offset
// whose record's timestamp is at least ts, and that timestamp; -1, -1 when
// there is none.
func (tp *lotTopic) byTime(ts int64) (int64, int64) {
	for off, s := range tp.stamps {
		if s >= ts {
			return int64(off), s
		}
	}
	return -1, -1
}

// maxTime is the answer to ListOffsets -3 (KIP-734): the first record with
// the largest timestamp.
func (tp *lotTopic) maxTime() (int64, int64) {
	best, at := int64(-1), int64(-1)
	for off, s := range tp.stamps {
		if s > best {
			best, at = s, int64(off)
		}
	}
	return at, best
}

// checkListOffsets asks every broker at once, one request per timestamp,
// about the batch just written with stamps (and for sent, the time it was
// sent), and compares with tp's model.
func checkListOffsets(ctx context.Context, t *testing.T, c *cluster, tp *lotTopic, stamps []int64, sent int64, what string) {
	t.Helper()
	asks := map[int64]bool{-1: true, -3: true, sent: true}
	hi := int64(0)
	for _, s := range stamps {
		asks[s], asks[s-1] = true, true
		hi = max(hi, s)
	}
	asks[hi+1] = true
	type answer struct {
		node          int
		ask, off, ts  int64
		code          int16
		err           error
		wantOff, want int64
	}
	var (
		mu   sync.Mutex
		bad  []answer
		wg   sync.WaitGroup
		hwm  = int64(len(tp.stamps))
		mOff int64
		mTs  int64
	)
	mOff, mTs = tp.maxTime()
	for node := range c.Nodes {
		for ask := range asks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := answer{node: node, ask: ask}
				switch ask {
				case -1:
					a.wantOff, a.want = hwm, -1
				case -3:
					a.wantOff, a.want = mOff, mTs
				default:
					a.wantOff, a.want = tp.byTime(ask)
				}
				// A broker still catching up answers the retriable
				// NOT_LEADER_OR_FOLLOWER; clients retry, so does this.
				for deadline := time.Now().Add(10 * time.Second); ; {
					a.off, a.ts, a.code, a.err = listOffset(ctx, c, node, tp.name, ask)
					if a.err != nil || a.code != kerr.NotLeaderForPartition.Code || time.Now().After(deadline) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if a.err != nil || a.code != 0 || a.off != a.wantOff || a.ts != a.want {
					mu.Lock()
					bad = append(bad, a)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for _, a := range bad {
		t.Errorf("%s: %s-0 holds %d records; node%d ListOffsets(%d) = offset %d timestamp %d (error %v %v), want offset %d timestamp %d",
			what, tp.name, hwm, a.node, a.ask, a.off, a.ts, kerr.ErrorForCode(a.code), a.err, a.wantOff, a.want)
	}
	if len(bad) > 0 {
		t.FailNow()
	}
}

// listOffset sends node one ListOffsets for partition 0 of topic at ts.
func listOffset(ctx context.Context, c *cluster, node int, topic string, ts int64) (off, rts int64, code int16, err error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := c.Request(ctx, node, req)
	if err != nil {
		return 0, 0, 0, err
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, 0, 0, fmt.Errorf("ListOffsets answered %d topics", len(resp.Topics))
	}
	sp := resp.Topics[0].Partitions[0]
	return sp.Offset, sp.Timestamp, sp.ErrorCode, nil
}

// produceStamped produces one uncompressed CreateTime batch with a record
// per timestamp to partition 0 of topic on node itself, and returns its
// base offset and log_append_time.
func produceStamped(ctx context.Context, c *cluster, node int, topic string, acks int16, stamps []int64, round int) (int64, int64, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, stampedBatch(stamps, round)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := c.Request(ctx, node, req)
	if err != nil {
		return 0, 0, fmt.Errorf("node%d Produce: %w", node, err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, 0, fmt.Errorf("node%d Produce: answer has %d topics", node, len(resp.Topics))
	}
	sp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
		return 0, 0, fmt.Errorf("node%d Produce to %s: %w", node, topic, err)
	}
	return sp.BaseOffset, sp.LogAppendTime, nil
}

// stampedBatch builds an uncompressed RecordBatch v2 without producer id,
// one record per timestamp, its MaxTimestamp the largest of them.
func stampedBatch(stamps []int64, round int) []byte {
	first, maxTs := stamps[0], stamps[0]
	var recs []byte
	for i, s := range stamps {
		maxTs = max(maxTs, s)
		r := kmsg.Record{TimestampDelta64: s - first, OffsetDelta: int32(i), Value: fmt.Appendf(nil, "r%d-%d", round, i)}
		body := r.AppendTo(nil)[1:] // drop the zero length varint AppendTo wrote
		recs = kbin.AppendVarint(recs, int32(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, 0, 61+len(recs))
	b = binary.BigEndian.AppendUint64(b, 0)                     // base offset
	b = binary.BigEndian.AppendUint32(b, 0)                     // length, below
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)            // partition leader epoch -1
	b = append(b, 2)                                            // magic
	b = binary.BigEndian.AppendUint32(b, 0)                     // crc, below
	b = binary.BigEndian.AppendUint16(b, 0)                     // attributes: CreateTime
	b = binary.BigEndian.AppendUint32(b, uint32(len(stamps)-1)) // last offset delta
	b = binary.BigEndian.AppendUint64(b, uint64(first))         // first timestamp
	b = binary.BigEndian.AppendUint64(b, uint64(maxTs))         // max timestamp
	b = binary.BigEndian.AppendUint64(b, 0xffffffffffffffff)    // producer id -1
	b = binary.BigEndian.AppendUint16(b, 0xffff)                // producer epoch -1
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)            // base sequence -1
	b = binary.BigEndian.AppendUint32(b, uint32(len(stamps)))   // record count
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}
