package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// txnReader is a read_committed consumer that runs through a whole test
// and records every record it is handed, in the order handed: the history
// the transaction checks are run over.
type txnReader struct {
	cl     *kgo.Client
	done   chan struct{}
	cancel context.CancelFunc
	mu     sync.Mutex
	reads  []txnRead
}

// txnRead is one record as a reader received it.
type txnRead struct {
	Partition int32
	Offset    int64
	Value     string
	At        time.Time
}

// startTxnReader starts a read_committed reader of topic (every
// partition, from the start) seeded with seeds.
func startTxnReader(seeds []string, topic string) (*txnReader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(300*time.Millisecond), kgo.DialTimeout(2*time.Second),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(3*time.Second))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &txnReader{cl: cl, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				r.mu.Lock()
				r.reads = append(r.reads, txnRead{rec.Partition, rec.Offset, string(rec.Value), now})
				r.mu.Unlock()
			})
		}
	}()
	return r, nil
}

// stop ends the reader and returns its history.
func (r *txnReader) stop() []txnRead {
	r.cancel()
	<-r.done
	r.cl.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// checkTxnHistory checks what a read_committed reader was handed during
// the run against the final committed log (partition -> offset -> value,
// read after healing) and the values the run meant to write exactly once:
//   - aborted or uncommitted read: a record handed out that is not in the
//     final committed log at that offset (a record of an aborted or
//     never-committed transaction, or one exposed then lost);
//   - non-monotonic poll: within a partition, offsets handed out not
//     strictly increasing;
//   - duplicate: a wanted value committed more than once;
//   - lost: a wanted value not committed;
//   - unseen: a committed record the reader was never handed.
//
// It returns one line per anomaly kind that occurred (with its count and
// first example), and a summary.
func checkTxnHistory(reads []txnRead, final map[int32]map[int64]string, want []string) (anomalies []string, summary string) {
	count := map[string]int{}
	first := map[string]string{}
	note := func(kind, format string, args ...any) {
		if count[kind] == 0 {
			first[kind] = fmt.Sprintf(format, args...)
		}
		count[kind]++
	}
	last := map[int32]int64{}
	seen := map[int32]map[int64]bool{}
	for _, r := range reads {
		if got, ok := final[r.Partition][r.Offset]; !ok || got != r.Value {
			note("aborted or uncommitted read", "partition %d offset %d read %q at %s; the committed log holds %q there",
				r.Partition, r.Offset, r.Value, r.At.Format("15:04:05.000"), got)
		}
		if l, ok := last[r.Partition]; ok && r.Offset <= l {
			note("non-monotonic poll", "partition %d: offset %d handed out after %d", r.Partition, r.Offset, l)
		}
		last[r.Partition] = r.Offset
		if seen[r.Partition] == nil {
			seen[r.Partition] = map[int64]bool{}
		}
		seen[r.Partition][r.Offset] = true
	}
	committed := map[string]int{}
	total := 0
	for p, offs := range final {
		for off, v := range offs {
			committed[v]++
			total++
			if !seen[p][off] {
				note("unseen", "partition %d offset %d (%q) was committed but never handed to the reader", p, off, v)
			}
		}
	}
	for _, v := range want {
		switch k := committed[v]; {
		case k == 0:
			note("lost", "%q is not in the committed log", v)
		case k > 1:
			note("duplicate", "%q is committed %d times", v, k)
		}
	}
	kinds := make([]string, 0, len(count))
	for k := range count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		anomalies = append(anomalies, fmt.Sprintf("%s: %d (first: %s)", k, count[k], first[k]))
	}
	return anomalies, fmt.Sprintf("%d reads checked against %d committed records; anomalies: %d", len(reads), total, len(anomalies))
}

// TestCheckTxnHistory: the checker names each anomaly it is shown.
func TestCheckTxnHistory(t *testing.T) {
	final := map[int32]map[int64]string{0: {0: "a", 1: "b", 3: "c"}}
	reads := []txnRead{{0, 0, "a", time.Time{}}, {0, 2, "x", time.Time{}}, {0, 1, "b", time.Time{}}}
	anomalies, _ := checkTxnHistory(reads, final, []string{"a", "b", "c", "d"})
	got := strings.Join(anomalies, "\n")
	for _, kind := range []string{"aborted or uncommitted read: 1", "non-monotonic poll: 1", "unseen: 1", "lost: 1"} {
		if !strings.Contains(got, kind) {
			t.Errorf("the checker did not report %q; it said:\n%s", kind, got)
		}
	}
	final[0][4] = "a"
	reads = append(reads, txnRead{0, 3, "c", time.Time{}}, txnRead{0, 4, "a", time.Time{}})
	if anomalies, _ := checkTxnHistory(reads, final, []string{"a", "b", "c"}); !strings.Contains(strings.Join(anomalies, "\n"), "duplicate: 1") {
		t.Errorf("the checker missed a duplicate: %v", anomalies)
	}
	clean := []txnRead{{0, 0, "a", time.Time{}}, {0, 1, "b", time.Time{}}}
	if anomalies, _ := checkTxnHistory(clean, map[int32]map[int64]string{0: {0: "a", 1: "b"}}, []string{"a", "b"}); len(anomalies) != 0 {
		t.Errorf("a clean history: %v", anomalies)
	}
}
