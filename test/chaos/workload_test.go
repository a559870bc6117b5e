package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The clients of a run: idempotent producers (franz-go's defaults) writing
// one record at a time to sendTopic, one transactional producer writing
// small transactions to txnTopic (every fifth aborted on purpose), two
// consumers assigned every partition of both topics (read_committed and
// read_uncommitted), two members of a consumer group on sendTopic, and
// two members of each of two share groups on sendTopic (KIP-932,
// docs/share-groups.md), the second key-ordered, that accept every record
// they are handed (sharePoll). sendTopic's records have keys (RecordKey).
// Every operation is recorded with its invocation and completion times.
// Every record has a subject (chaosSubject), and viewTopic is a view of
// both topics in the global order (docs/subjects.md), checked at the end
// by checkView.
const (
	sendTopic = "chaos"
	sendParts = 4
	txnTopic  = "chaos-txn"
	txnParts  = 2
	group     = "chaos-group"
	shareGrp  = "chaos-share"
	keyedGrp  = "chaos-share-keyed" // stele.share.key.ordering=true
	viewTopic = "chaos-view"
	viewOf    = "chaos.*.7" // its pattern: about a tenth of the records

	// Process ids in the history.
	firstSender   = 0  // and 1
	transactor    = 2  // the transactional producer
	firstAssigned = 10 // 10 read_committed, 11 read_uncommitted
	firstMember   = 20 // 20, 21: the group's members
	firstShare    = 30 // 30, 31: the share group's members
	firstKeyed    = 32 // 32, 33: the key-ordered share group's members
)

// chaosSubject is the subject of the record whose value is v: chaos, its
// kind (s or t) and the last digit of its number.
func chaosSubject(v string) string { return "chaos." + v[:1] + "." + v[len(v)-1:] }

// subjectHeader is the headers of the record whose value is v.
func subjectHeader(v string) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: "stele-subject", Value: []byte(chaosSubject(v))}}
}

// workload runs the clients. Producers and consumers stop separately:
// producing first, then consuming once the consumers have read everything.
type workload struct {
	seeds []string
	seed  uint64
	rec   *Recorder

	produce, consume     context.Context
	stopProduce, stopAll context.CancelFunc
	producers, consumers sync.WaitGroup

	// read[process][tp] is the highest offset a consumer was handed;
	// shared[group] the values the share group's members were handed.
	mu     sync.Mutex
	read   map[int]map[TP]int64
	shared map[string]map[string]bool
}

func startWorkload(seeds []string, seed uint64, rec *Recorder) *workload {
	w := &workload{seeds: seeds, seed: seed, rec: rec, read: map[int]map[TP]int64{}, shared: map[string]map[string]bool{shareGrp: {}, keyedGrp: {}}}
	w.consume, w.stopAll = context.WithCancel(context.Background())
	w.produce, w.stopProduce = context.WithCancel(w.consume)
	for i := range 2 {
		w.producers.Go(func() { w.send(firstSender + i) })
	}
	w.producers.Go(func() { w.transact(transactor) })
	topics := map[string]int32{sendTopic: sendParts, txnTopic: txnParts}
	w.consumers.Go(func() { w.poll(firstAssigned, kgo.ReadCommitted(), topics, "") })
	w.consumers.Go(func() { w.poll(firstAssigned+1, kgo.ReadUncommitted(), topics, "") })
	for i := range 2 {
		w.consumers.Go(func() { w.poll(firstMember+i, kgo.ReadCommitted(), map[string]int32{sendTopic: sendParts}, group) })
	}
	w.shareFromStart(shareGrp)
	w.shareFromStart(keyedGrp, "stele.share.key.ordering", "true", "share.delivery.count.limit", strconv.Itoa(ShareDeliveryLimit))
	for i := range 2 {
		w.consumers.Go(func() { w.sharePoll(firstShare+i, shareGrp, false) })
		w.consumers.Go(func() { w.sharePoll(firstKeyed+i, keyedGrp, true) })
	}
	return w
}

// shareFromStart sets share group grp's share.auto.offset.reset to
// earliest, so that its members are handed every record of sendTopic,
// and the other configs given in name, value pairs, retrying for up to a
// minute while the cluster starts.
func (w *workload) shareFromStart(grp string, configs ...string) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.seeds...)}, clientOpts...)...)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, grp
		kv := append([]string{"share.auto.offset.reset", "earliest"}, configs...)
		for i := 0; i+1 < len(kv); i += 2 {
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			c.Name, c.Value = kv[i], kmsg.StringPtr(kv[i+1])
			res.Configs = append(res.Configs, c)
		}
		req.Resources = append(req.Resources, res)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := req.RequestWith(ctx, cl)
		cancel()
		if err == nil && resp.Resources[0].ErrorCode == 0 {
			return
		}
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("stele/chaos: setting the configs of share group %s: %v %+v", grp, err, resp))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// sharePoll is a member of share group grp (keyed: key-ordered) on
// sendTopic until consuming stops: each poll is recorded (TypeSharePoll), then its records are
// accepted and the acknowledgement flushed; the acceptance is recorded
// ok (TypeShareAck) only when the flush and every acknowledgement result
// it waited for came back without an error, info otherwise.
func (w *workload) sharePoll(process int, grp string, keyed bool) {
	var (
		mu     sync.Mutex
		ackErr error
	)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.seeds...), kgo.ShareGroup(grp), kgo.ConsumeTopics(sendTopic),
		kgo.FetchMaxWait(500 * time.Millisecond), kgo.ShareMaxRecords(500),
		kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
			if err := rs.Error(); err != nil {
				mu.Lock()
				ackErr = errors.Join(ackErr, err)
				mu.Unlock()
			}
		})}, clientOpts...)...)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	for w.consume.Err() == nil {
		invoke := time.Now()
		ctx, cancel := context.WithTimeout(w.consume, 2*time.Second)
		krs := cl.PollRecords(ctx, 500).Records()
		cancel()
		if len(krs) == 0 {
			continue
		}
		var recs []Rec
		for _, r := range krs {
			recs = append(recs, Rec{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
		}
		w.rec.SharePoll(process, grp, keyed, invoke, recs)
		w.mu.Lock()
		for _, r := range recs {
			w.shared[grp][r.Value] = true
		}
		w.mu.Unlock()
		mu.Lock()
		ackErr = nil // the previous flush waited for every result before it
		mu.Unlock()
		idx := w.rec.Invoke(process, TypeShareAck, recs)
		for _, r := range krs {
			r.Ack(kgo.AckAccept)
		}
		fctx, fcancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := cl.FlushAcks(fctx)
		fcancel()
		mu.Lock()
		err = errors.Join(err, ackErr)
		mu.Unlock()
		outcome := OutcomeOK
		if err != nil {
			outcome = OutcomeInfo // it may have been applied: the record may come again
		}
		w.rec.Complete(idx, outcome, nil, err)
	}
}

// rng is a client's own random source, from the run's seed and its id.
func (w *workload) rng(process int) *rand.Rand {
	return rand.New(rand.NewPCG(w.seed, uint64(process)))
}

// send produces "s<process>-<n>" to random partitions of sendTopic, up to
// eight records in flight, until producing stops; then it flushes what is
// buffered (up to 90 s) and closes: what never completed is recorded as
// info by Recorder.History.
func (w *workload) send(process int) {
	rng := w.rng(process)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.seeds...), kgo.DefaultProduceTopic(sendTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, clientOpts...)...)
	if err != nil {
		panic(err) // only bad options fail here
	}
	defer cl.Close()
	inflight := make(chan struct{}, 16)
	for n := 0; ; n++ {
		select {
		case inflight <- struct{}{}:
		case <-w.produce.Done():
			flush, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			cl.Flush(flush)
			cancel()
			return
		}
		r := Rec{Topic: sendTopic, Partition: int32(rng.IntN(sendParts)), Offset: -1, Value: fmt.Sprintf("s%d-%d", process, n)}
		idx := w.rec.Invoke(process, TypeSend, []Rec{r})
		cl.Produce(context.Background(), &kgo.Record{Partition: r.Partition, Key: []byte(RecordKey(r.Value)), Value: []byte(r.Value), Headers: subjectHeader(r.Value)}, func(kr *kgo.Record, err error) {
			out := r
			outcome := OutcomeOK
			if err != nil {
				outcome = OutcomeInfo // an idempotent producer's failure may still have been written
			} else {
				out.Offset = kr.Offset
			}
			w.rec.Complete(idx, outcome, []Rec{out}, err)
			<-inflight
		})
		time.Sleep(5 * time.Millisecond)
	}
}

// transact runs transactions of 1-4 records on random partitions of
// txnTopic until producing stops. A transaction is recorded when its end
// is asked for (so a read that completes before that is precommitted); a
// commit that fails is info; an abort can never commit, so it is ok
// whatever EndTxn answers. After a failure the client is replaced: the new
// one's InitProducerId fences the old epoch and aborts what it left open.
func (w *workload) transact(process int) {
	rng := w.rng(process)
	connect := func() *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.seeds...), kgo.DefaultProduceTopic(txnTopic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("chaos-txn"),
			kgo.TransactionTimeout(10 * time.Second)}, clientOpts...)...)
		if err != nil {
			panic(err)
		}
		return cl
	}
	cl := connect()
	defer func() { cl.Close() }()
	for n := 0; w.produce.Err() == nil; n++ {
		if err := cl.BeginTransaction(); err != nil {
			cl.Close()
			cl = connect()
			continue
		}
		recs := make([]Rec, 1+rng.IntN(4))
		krs := make([]*kgo.Record, len(recs))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for i := range recs {
			recs[i] = Rec{Topic: txnTopic, Partition: int32(rng.IntN(txnParts)), Offset: -1, Value: fmt.Sprintf("t%d-%d", n, i)}
			krs[i] = &kgo.Record{Partition: recs[i].Partition, Value: []byte(recs[i].Value), Headers: subjectHeader(recs[i].Value)}
		}
		failed := cl.ProduceSync(ctx, krs...).FirstErr() // results come in completion order
		cancel()
		if failed == nil {
			for i, kr := range krs {
				recs[i].Offset = kr.Offset
			}
		}
		commit := failed == nil && n%5 != 4
		idx := w.rec.Invoke(process, TypeTxn, recs)
		w.rec.SetCommit(idx, commit)
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		end := kgo.TryAbort
		if commit {
			end = kgo.TryCommit
		} else if failed != nil {
			cl.AbortBufferedRecords(ctx)
		}
		err := cl.EndTransaction(ctx, end)
		cancel()
		switch {
		case err == nil:
			w.rec.Complete(idx, OutcomeOK, nil, failed)
		case commit:
			w.rec.Complete(idx, OutcomeInfo, nil, err)
		default:
			w.rec.Complete(idx, OutcomeOK, nil, errors.Join(failed, err))
		}
		if err != nil {
			cl.Close()
			cl = connect()
		}
	}
}

// poll consumes until consuming stops: the partitions of topics assigned
// from the start when group is "", else as a member of group. Each
// assignment a member receives begins a new session: a partition handed
// back resumes from its committed offset, which may repeat records.
func (w *workload) poll(process int, isolation kgo.IsolationLevel, topics map[string]int32, group string) {
	iso := ReadUncommitted
	if isolation == kgo.ReadCommitted() {
		iso = ReadCommitted
	}
	var session atomic.Int64
	session.Store(1)
	opts := []kgo.Opt{kgo.SeedBrokers(w.seeds...), kgo.FetchIsolationLevel(isolation)}
	if group == "" {
		parts := map[string]map[int32]kgo.Offset{}
		for topic, n := range topics {
			parts[topic] = map[int32]kgo.Offset{}
			for p := range n {
				parts[topic][p] = kgo.NewOffset().AtStart()
			}
		}
		opts = append(opts, kgo.ConsumePartitions(parts))
	} else {
		var names []string
		for topic := range topics {
			names = append(names, topic)
		}
		next := func(context.Context, *kgo.Client, map[string][]int32) { session.Add(1) }
		opts = append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(names...),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(next), kgo.OnPartitionsRevoked(next), kgo.OnPartitionsLost(next))
	}
	cl, err := kgo.NewClient(append(opts, clientOpts...)...)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	for w.consume.Err() == nil {
		invoke := time.Now()
		ctx, cancel := context.WithTimeout(w.consume, 2*time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		var recs []Rec
		fetches.EachRecord(func(r *kgo.Record) {
			recs = append(recs, Rec{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
		})
		if len(recs) > 0 {
			w.rec.Poll(process, int(session.Load()), iso, invoke, recs)
			w.mu.Lock()
			if w.read[process] == nil {
				w.read[process] = map[TP]int64{}
			}
			for _, r := range recs {
				w.read[process][r.TP()] = max(w.read[process][r.TP()], r.Offset)
			}
			w.mu.Unlock()
		}
		cl.AllowRebalance()
	}
}

// caughtUp reports whether the assigned consumers have been handed every
// partition's last committed record of final, and each share group's
// members every committed record of sendTopic, or says which is behind.
func (w *workload) caughtUp(final Final) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for tp, offs := range final.Committed {
		if tp.Topic != sendTopic {
			continue
		}
		for off, v := range offs {
			for _, grp := range []string{shareGrp, keyedGrp} {
				if !w.shared[grp][v] {
					return fmt.Errorf("share group %s's members have not been handed %q (%s@%d)", grp, v, tp, off)
				}
			}
		}
	}
	for _, process := range []int{firstAssigned, firstAssigned + 1} {
		for tp, offs := range final.Committed {
			last := int64(-1)
			for off := range offs {
				last = max(last, off)
			}
			if got, ok := w.read[process][tp]; last >= 0 && (!ok || got < last) {
				return fmt.Errorf("consumer %d has read %s up to %d of %d", process, tp, got, last)
			}
		}
	}
	return nil
}
