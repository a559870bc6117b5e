package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// workloadOptions configures a workload.
type workloadOptions struct {
	topic      string
	partitions int32
	// configs are topic configs set at creation (e.g. segment.bytes).
	configs map[string]*string
	// writers producers each produce one record every interval, spread
	// round-robin over the partitions; consumers read every partition.
	writers, consumers int
	interval           time.Duration
	// produceTimeout is the produce request's timeout (the broker answers
	// REQUEST_TIMED_OUT after it); deliveryTimeout is how long the client
	// keeps retrying a record before failing it.
	produceTimeout, deliveryTimeout time.Duration
	// plainProducers turns idempotence off: franz-go's idempotent producer
	// does not give up on a record it has sent (failing it would break the
	// sequence), so a test that needs records to fail after their delivery
	// timeout uses plain ones; their retries may store a record twice, which
	// is then counted, not failed on.
	plainProducers bool
}

// workload is franz-go producers and consumers running against a cluster
// and everything they saw: the records sent, acknowledged (with partition
// and offset), failed and consumed.
//
// A value is "w<writer>-p<partition>-<seq>": seq counts up per writer, so
// the acknowledged records of one writer in one partition must sit at
// increasing offsets. The producers are idempotent (franz-go's default), so
// a retry — to the same broker or, after a crash, to another — must never
// store a record twice: a duplicate fails the test (unless
// workloadOptions.plainProducers).
type workload struct {
	t      *testing.T
	opts   workloadOptions
	cancel context.CancelFunc
	stopW  chan struct{}
	writeG sync.WaitGroup
	readG  sync.WaitGroup
	prods  []*kgo.Client
	cons   []*kgo.Client
	mu     struct {
		sync.Mutex
		sent     map[string]int32 // value -> partition it was sent to
		acked    []ackedRecord
		failed   map[string]int // error -> records failed with it
		failedAt []time.Time
		consumed []consumedRecord
		anomaly  []string
	}
}

// ackedRecord is a record the cluster acknowledged.
type ackedRecord struct {
	Partition int32
	Offset    int64
	Value     string
	Writer    int
	Seq       int
	At        time.Time
}

// consumedRecord is a record a consumer read.
type consumedRecord struct {
	Consumer  int
	Partition int32
	Offset    int64
	Value     string
}

// startWorkload creates the topic and starts the producers and consumers,
// all seeded with every broker of seeds. Stop them with stopProducing and
// stopConsuming.
func startWorkload(t *testing.T, seeds []string, o workloadOptions) *workload {
	t.Helper()
	harness.CreateTopic(t, seeds, o.topic, o.partitions, o.configs)
	w := &workload{t: t, opts: o, stopW: make(chan struct{})}
	w.mu.sent = map[string]int32{}
	w.mu.failed = map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	t.Cleanup(w.close)

	common := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.DialTimeout(2 * time.Second),
		kgo.RequestTimeoutOverhead(3 * time.Second),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.MetadataMaxAge(3 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 200 * time.Millisecond }),
	}
	for i := range o.writers {
		opts := append(slices.Clone(common),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ProduceRequestTimeout(o.produceTimeout),
			kgo.RecordDeliveryTimeout(o.deliveryTimeout),
			kgo.ProducerLinger(5*time.Millisecond),
		)
		if o.plainProducers {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		w.prods = append(w.prods, cl)
		w.writeG.Add(1)
		go w.write(ctx, i, cl)
	}
	parts := map[int32]kgo.Offset{}
	for p := range o.partitions {
		parts[p] = kgo.NewOffset().AtStart()
	}
	for i := range o.consumers {
		opts := append(slices.Clone(common),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.topic: parts}),
			kgo.FetchMaxWait(500*time.Millisecond),
		)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		w.cons = append(w.cons, cl)
		w.readG.Add(1)
		go w.read(ctx, i, cl)
	}
	return w
}

// write produces one record every interval until stopProducing.
func (w *workload) write(ctx context.Context, writer int, cl *kgo.Client) {
	defer w.writeG.Done()
	tick := time.NewTicker(w.opts.interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-w.stopW:
			return
		case <-tick.C:
		}
		p := int32(seq) % w.opts.partitions
		value := fmt.Sprintf("w%d-p%d-%08d", writer, p, seq)
		w.mu.Lock()
		w.mu.sent[value] = p
		w.mu.Unlock()
		rec := &kgo.Record{Topic: w.opts.topic, Partition: p, Value: []byte(value)}
		cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if err != nil {
				w.mu.failed[errorClass(err)]++
				w.mu.failedAt = append(w.mu.failedAt, time.Now())
				return
			}
			w.mu.acked = append(w.mu.acked, ackedRecord{Partition: r.Partition, Offset: r.Offset,
				Value: value, Writer: writer, Seq: seq, At: time.Now()})
		})
	}
}

// errorClass names an error for counting: ErrRecordTimeout with the last
// broker error it wraps, a Kafka error code, or the error's text.
func errorClass(err error) string {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout) && errors.As(err, &ke):
		return "record timeout, last error " + ke.Message
	case errors.Is(err, kgo.ErrRecordTimeout):
		return "record timeout"
	case errors.As(err, &ke):
		return ke.Message
	}
	return err.Error()
}

// read consumes every partition from the start until stopConsuming.
func (w *workload) read(ctx context.Context, consumer int, cl *kgo.Client) {
	defer w.readG.Done()
	next := map[int32]int64{}
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			var loss *kgo.ErrDataLoss
			if !errors.As(err, &loss) {
				return // connection errors while brokers die: the client retries
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			w.mu.anomaly = append(w.mu.anomaly, fmt.Sprintf("consumer %d at %s: franz-go detected data loss on %s-%d (KIP-320): "+
				"a broker said the log ends at offset %d, below offset %d the consumer had already read, and the client rewound: %v",
				consumer, harness.Clock(), topic, p, loss.ResetTo, loss.ConsumedTo, err))
		})
		fs.EachRecord(func(r *kgo.Record) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if r.Offset < next[r.Partition] {
				w.mu.anomaly = append(w.mu.anomaly, fmt.Sprintf("consumer %d at %s read %s-%d offset %d after offset %d: the partition went backwards",
					consumer, harness.Clock(), r.Topic, r.Partition, r.Offset, next[r.Partition]-1))
			}
			next[r.Partition] = r.Offset + 1
			w.mu.consumed = append(w.mu.consumed, consumedRecord{consumer, r.Partition, r.Offset, string(r.Value)})
		})
	}
}

// registerRaw records values sent outside the producers (rawProduce), so
// the checker knows they were sent to partition p.
func (w *workload) registerRaw(p int32, values ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range values {
		w.mu.sent[v] = p
	}
}

// ackRaw records values the cluster acknowledged to rawProduce at base.
func (w *workload) ackRaw(p int32, base int64, values ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, v := range values {
		w.mu.acked = append(w.mu.acked, ackedRecord{Partition: p, Offset: base + int64(i), Value: v, Writer: -1, Seq: i, At: time.Now()})
	}
}

// ackedCount returns the number of acknowledged records.
func (w *workload) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mu.acked)
}

// failedSince returns how many records failed after t.
func (w *workload) failedSince(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, at := range w.mu.failedAt {
		if at.After(t) {
			n++
		}
	}
	return n
}

// ackedSnapshot returns a copy of the acknowledged records.
func (w *workload) ackedSnapshot() []ackedRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.mu.acked)
}

// waitAcked waits up to d until n more records than now are acknowledged.
func (w *workload) waitAcked(c *cluster, d time.Duration, n int, why string) {
	c.T.Helper()
	target := w.ackedCount() + n
	start := time.Now()
	c.Eventually(d, fmt.Sprintf("%d more acknowledged records (%s)", n, why), func() error {
		if got := w.ackedCount(); got < target {
			return fmt.Errorf("%d acknowledged, want %d", got, target)
		}
		return nil
	})
	c.T.Logf("%d more records acknowledged in %v (%s)", n, time.Since(start).Round(time.Millisecond), why)
}

// stopProducing stops the writers and waits up to d for every record they
// produced to be acknowledged or failed.
func (w *workload) stopProducing(d time.Duration) {
	w.t.Helper()
	close(w.stopW)
	w.writeG.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for i, cl := range w.prods {
		if err := cl.Flush(ctx); err != nil {
			w.t.Fatalf("producer %d: records neither acknowledged nor failed %v after producing stopped: %v", i, d, err)
		}
	}
}

// stopConsuming stops the consumers.
func (w *workload) stopConsuming() {
	w.cancel()
	w.readG.Wait()
}

// close stops everything still running and closes the clients.
func (w *workload) close() {
	select {
	case <-w.stopW:
	default:
		close(w.stopW)
	}
	w.writeG.Wait()
	w.cancel()
	w.readG.Wait()
	for _, cl := range append(w.prods, w.cons...) {
		cl.Close()
	}
}

// summary describes what the workload did.
func (w *workload) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	failed := 0
	var why []string
	for e, n := range w.mu.failed {
		failed += n
		why = append(why, fmt.Sprintf("%d: %s", n, e))
	}
	sort.Strings(why)
	return fmt.Sprintf("sent %d, acknowledged %d, failed %d %v, consumed %d",
		len(w.mu.sent), len(w.mu.acked), failed, why, len(w.mu.consumed))
}

// check checks one broker's view of the topic, logs[p] being partition p's
// records from offset 0 to the high watermark:
//   - every acknowledged record is at its acknowledged offset;
//   - the acknowledged records of each writer are in the order sent;
//   - every record present was sent, to that partition;
//   - every record a consumer read (from whichever broker) is there at the
//     offset it was read at: no broker ever exposed something else.
//
// It returns the number of duplicate records (copies from client retries).
func (w *workload) check(who string, logs map[int32][]harness.LogRecord) int {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(who+": "+format, args...)) }

	at := map[int32]map[int64]string{}
	dups := 0
	for p, recs := range logs {
		at[p] = map[int64]string{}
		seen := map[string]bool{}
		last := int64(-1)
		for _, r := range recs {
			if r.Offset <= last {
				fail("%s-%d offset %d follows offset %d", w.opts.topic, p, r.Offset, last)
			}
			last = r.Offset
			at[p][r.Offset] = r.Value
			if sentTo, ok := w.mu.sent[r.Value]; !ok {
				fail("%s-%d offset %d holds %q, which was never sent", w.opts.topic, p, r.Offset, r.Value)
			} else if sentTo != p {
				fail("%s-%d offset %d holds %q, which was sent to partition %d", w.opts.topic, p, r.Offset, r.Value, sentTo)
			}
			if seen[r.Value] {
				dups++
			}
			seen[r.Value] = true
		}
	}

	type key struct {
		writer int
		p      int32
	}
	order := map[key][]ackedRecord{}
	for _, a := range w.mu.acked {
		got, ok := at[a.Partition][a.Offset]
		switch {
		case !ok:
			fail("acknowledged %q at %s-%d offset %d is missing (lost)", a.Value, w.opts.topic, a.Partition, a.Offset)
		case got != a.Value:
			fail("acknowledged %q at %s-%d offset %d, but that offset holds %q", a.Value, w.opts.topic, a.Partition, a.Offset, got)
		}
		if a.Writer >= 0 {
			order[key{a.Writer, a.Partition}] = append(order[key{a.Writer, a.Partition}], a)
		}
	}
	for k, as := range order {
		sort.Slice(as, func(i, j int) bool { return as[i].Seq < as[j].Seq })
		for i := 1; i < len(as); i++ {
			if as[i].Offset <= as[i-1].Offset {
				fail("writer %d, %s-%d: %q acknowledged at offset %d, before the earlier-sent %q at %d",
					k.writer, w.opts.topic, k.p, as[i].Value, as[i].Offset, as[i-1].Value, as[i-1].Offset)
			}
		}
	}
	for _, r := range w.mu.consumed {
		got, ok := at[r.Partition][r.Offset]
		if !ok || got != r.Value {
			fail("consumer %d read %q at %s-%d offset %d, which holds %q", r.Consumer, r.Value, w.opts.topic, r.Partition, r.Offset, got)
		}
	}
	for _, a := range w.mu.anomaly {
		fail("%s", a)
	}
	for i, e := range errs {
		if i == 20 {
			w.t.Errorf("%s: ... and %d more errors", who, len(errs)-20)
			break
		}
		w.t.Error(e)
	}
	return dups
}

// end stops the workload (producers within the given time), then requires
// brokers on (every broker, if none is named) to agree on the app hash and
// to serve every acknowledged record, stops every broker and requires the
// log files of on to be byte-identical.
func (w *workload) end(c *cluster, within time.Duration, on ...int) {
	c.T.Helper()
	if len(on) == 0 {
		on = c.All()
	}
	w.stopProducing(within)
	w.stopConsuming()
	c.T.Log(w.summary())
	c.CheckAppHashes(30*time.Second, on...)
	w.checkBrokers(c, on...)
	c.StopAll()
	c.T.Logf("%d files under logs/ are byte-identical on brokers %v", c.CompareLogs(on...), on)
}

// checkBrokers checks the view each of the nodes given serves (raw Fetch to
// that broker); a duplicate record fails the test (idempotent producers).
func (w *workload) checkBrokers(c *cluster, idx ...int) {
	c.T.Helper()
	for _, i := range idx {
		logs := map[int32][]harness.LogRecord{}
		for p := range w.opts.partitions {
			recs, err := c.FetchAll(i, w.opts.topic, p)
			if err != nil {
				c.T.Fatal(err)
			}
			logs[p] = recs
		}
		dups := w.check(fmt.Sprintf("node%d (served)", i), logs)
		if dups > 0 && !w.opts.plainProducers {
			c.T.Errorf("node%d serves %d duplicate records: the producers are idempotent, retries must not be stored twice", i, dups)
		}
		n := 0
		for _, recs := range logs {
			n += len(recs)
		}
		c.T.Logf("node%d serves %d records of %s, %d of them duplicates", i, n, w.opts.topic, dups)
	}
}

// checkDisk checks node i's log as stored on disk (the node is stopped).
func (w *workload) checkDisk(c *cluster, i int) {
	c.T.Helper()
	logs := map[int32][]harness.LogRecord{}
	for p := range w.opts.partitions {
		recs, err := c.DiskLog(i, w.opts.topic, p)
		if err != nil {
			c.T.Fatalf("node%d's %s-%d on disk: %v", i, w.opts.topic, p, err)
		}
		logs[p] = recs
	}
	if dups := w.check(fmt.Sprintf("node%d (disk)", i), logs); dups > 0 && !w.opts.plainProducers {
		c.T.Errorf("node%d holds %d duplicate records on disk: the producers are idempotent", i, dups)
	}
}
