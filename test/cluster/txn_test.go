package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionsThroughACrash: two franz-go group transact sessions copy
// an input topic to an output topic, each record once, committing the
// input offsets in the same transactions (consume-transform-produce), while
// one of four brokers is killed with SIGKILL and later restarted; every
// seventh transaction is aborted on purpose. A
// read_committed reader follows the output throughout; its history is
// checked against the final committed log (checkTxnHistory): no aborted or
// uncommitted read, no non-monotonic poll, no duplicate, no loss, nothing
// unseen. Every broker, the restarted one included, must end at one app
// hash with byte-identical logs. (Issue 6; docs/exactly-once.md.)
func TestTransactionsThroughACrash(t *testing.T) {
	const n, parts = 600, 3
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	seeds := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, seeds, "in", parts, nil)
	harness.CreateTopic(t, seeds, "out", parts, nil)

	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprint(i % 29)), Value: []byte(fmt.Sprintf("r%05d", i))})
	}
	ctx := context.Background()
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	follower, err := startTxnReader(seeds, "out")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		committed atomic.Int64
		failures  atomic.Int64
		aborts    atomic.Int64
		batches   atomic.Int64
	)
	for w := range 2 {
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("copier"), kgo.ConsumeTopics("in"),
			kgo.TransactionalID(fmt.Sprintf("copier-%d", w)), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("out"),
			kgo.SessionTimeout(30*time.Second), kgo.HeartbeatInterval(time.Second), kgo.FetchMaxWait(300*time.Millisecond),
			kgo.MaxBufferedRecords(200), kgo.DialTimeout(2*time.Second), kgo.RetryTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				fs := s.PollRecords(pctx, 10) // small transactions: many of them span the crash
				cancel()
				if fs.NumRecords() == 0 {
					continue
				}
				if err := s.Begin(); err != nil {
					t.Errorf("copier %d: begin: %v", w, err)
					return
				}
				// Every seventh transaction is aborted on purpose, after its
				// records were written (ProduceSync): they are in the log,
				// must never be read, and the session reads their input
				// again for a later transaction.
				end := kgo.TryCommit
				if batches.Add(1)%7 == 0 {
					end = kgo.TryAbort
				}
				var out []*kgo.Record
				fs.EachRecord(func(r *kgo.Record) {
					out = append(out, &kgo.Record{Key: r.Key, Value: append([]byte("copy-"), r.Value...)})
				})
				if end == kgo.TryAbort {
					s.ProduceSync(ctx, out...)
				} else {
					for _, r := range out {
						s.Produce(ctx, r, nil)
					}
				}
				ectx, cancel := context.WithTimeout(ctx, time.Minute)
				ok, err := s.End(ectx, end)
				cancel()
				switch {
				case err != nil:
					failures.Add(1)
					t.Logf("copier %d: end: %v (the session aborts and re-reads)", w, err)
				case ok:
					committed.Add(1)
				case end == kgo.TryAbort:
					aborts.Add(1)
				default:
					failures.Add(1)
				}
			}
		}()
	}

	readOut := func(idx ...int) map[string]int {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs(idx...)...), kgo.ConsumeTopics("out"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.FetchMaxWait(300*time.Millisecond), kgo.DialTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		seen := map[string]int{}
		for idle := 0; idle < 3; {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			k := 0
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; k++ })
			if k == 0 {
				idle++
			} else {
				idle = 0
			}
		}
		return seen
	}

	c.Eventually(60*time.Second, "a fifth of the input copied", func() error {
		if got := len(readOut(c.All()...)); got < n/5 {
			return fmt.Errorf("%d of %d copied", got, n)
		}
		return nil
	})
	victim := c.Rng.IntN(len(c.Nodes))
	others := without(c.All(), victim)
	c.Kill9(victim)
	time.Sleep(5 * time.Second)
	c.Restart(victim)
	c.Eventually(120*time.Second, "the whole input copied", func() error {
		if got := len(readOut(others...)); got < n {
			return fmt.Errorf("%d of %d copied", got, n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	t.Logf("%d transactions committed, %d aborted on purpose, %d failed around the crash of node%d",
		committed.Load(), aborts.Load(), failures.Load(), victim)

	seen := readOut(others...)
	for i := range n {
		if k := seen[fmt.Sprintf("copy-r%05d", i)]; k != 1 {
			t.Errorf("input record %d is in the output %d times under read_committed", i, k)
		}
	}
	if len(seen) != n {
		t.Errorf("the output holds %d distinct records, want %d", len(seen), n)
	}
	c.WaitCaughtUp(60*time.Second, victim, others...)
	// The follower reads on until it holds the whole output.
	c.Eventually(30*time.Second, "the follower has read the whole output", func() error {
		follower.mu.Lock()
		k := len(follower.reads)
		follower.mu.Unlock()
		if k < n {
			return fmt.Errorf("%d of %d read", k, n)
		}
		return nil
	})
	history := follower.stop()
	committedLog := map[int32]map[int64]string{}
	aborted := 0
	for p := range int32(parts) {
		log, a, err := c.CommittedLog(others[0], "out", p)
		if err != nil {
			t.Fatal(err)
		}
		committedLog[p], aborted = log, aborted+len(a)
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("copy-r%05d", i)
	}
	anomalies, summary := checkTxnHistory(history, committedLog, want)
	t.Logf("history: %s (%d records of aborted transactions in the output)", summary, aborted)
	for _, a := range anomalies {
		t.Error(a)
	}
	c.CheckAppHashes(30*time.Second, c.All()...)
	c.StopAll()
	t.Logf("%d files under logs/ are byte-identical on the 4 brokers", c.CompareLogs(c.All()...))
}
