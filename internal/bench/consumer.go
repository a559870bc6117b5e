package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// consumerStats is what the consumers record, shared by all of them.
type consumerStats struct {
	mu struct {
		sync.Mutex
		warm, meas     Histogram // e2e latency (ns), EndToEnd only
		all, allBytes  int64     // every record read (for progress)
		records, bytes int64     // measured records read
		errors         int64
		firstErr       error
		first, last    time.Time // receipt of the first and last measured record
	}
	// seen counts every record read, for the stop conditions.
	seen atomic.Int64
	// progressed is the UnixNano of the last fetch that returned records.
	progressed atomic.Int64
	// measureFrom is the UnixNano from which EndToEnd send times are
	// measured; records sent before it are warmup.
	measureFrom atomic.Int64
}

// consumer is one consuming client and its poll loop.
type consumer struct {
	cl     *kgo.Client
	stats  *consumerStats
	cfg    *Config
	ends   *endTracker   // Consume without Records: the end offsets to reach; else nil
	quota  *atomic.Int64 // records claimed, when limit > 0
	limit  int64         // Consume: stop after this many records; 0: no limit
	onStop func()        // called when this consumer has read all it must
}

// run polls until ctx is done, the client is closed, the tracked end
// offsets are reached or the record quota is used up.
func (c *consumer) run(ctx context.Context) {
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		now := time.Now()
		fetchErrors(fs, c.stats.fail)
		done := false
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			for _, r := range fp.Records {
				if done {
					return
				}
				var n int64
				if c.limit > 0 {
					if n = c.quota.Add(1); n > c.limit {
						done = true
						return
					}
				}
				c.record(r, now)
				if n == c.limit && n > 0 {
					done = true
				}
				if c.ends != nil && c.ends.reached(r.Partition, r.Offset) {
					done = true
				}
			}
		})
		if done {
			c.onStop()
			return
		}
	}
}

// fetchErrors passes each error of fs to fail, but for those of the run's
// own ending (a cancelled context, a closed client).
func fetchErrors(fs kgo.Fetches, fail func(error)) {
	fs.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		if topic == "" { // not about a partition: the group, the connection
			fail(fmt.Errorf("consume: %w", err))
			return
		}
		fail(fmt.Errorf("fetch topic %q partition %d: %w", topic, p, err))
	})
}

// record accounts for one record received at now.
func (c *consumer) record(r *kgo.Record, now time.Time) {
	size := int64(len(r.Key) + len(r.Value))
	c.stats.seen.Add(1)
	c.stats.progressed.Store(now.UnixNano())
	e2e := c.cfg.Scenario == EndToEnd
	sent, err := decodeValue(r.Value, c.cfg.RecordSize, e2e)
	if err != nil {
		err = fmt.Errorf("partition %d offset %d: %w", r.Partition, r.Offset, err)
	}
	measured, lat := true, int64(0)
	if e2e && err == nil {
		measured = sent >= c.stats.measureFrom.Load()
		lat = now.UnixNano() - sent
	}

	s := c.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.all++
	s.mu.allBytes += size
	if err != nil {
		s.mu.errors++
		if s.mu.firstErr == nil {
			s.mu.firstErr = err
		}
	}
	if !measured {
		s.mu.warm.Record(lat)
		return
	}
	if e2e && err == nil {
		s.mu.meas.Record(lat)
	}
	s.mu.records++
	s.mu.bytes += size
	if s.mu.records == 1 {
		s.mu.first = now
	}
	s.mu.last = now
}

// decodeValue checks a value read back from the broker: it must be size
// bytes (size 0 accepts any) and, for e2e, hold the 8-byte big-endian send
// time payload.value wrote, which it returns in Unix nanoseconds.
func decodeValue(v []byte, size int, e2e bool) (sentNanos int64, err error) {
	if size > 0 && len(v) != size {
		return 0, fmt.Errorf("value of %d bytes, want --record-size %d", len(v), size)
	}
	if !e2e {
		return 0, nil
	}
	if len(v) < 8 {
		return 0, fmt.Errorf("value of %d bytes cannot hold the 8-byte send time", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// fail counts an error that is not about one record.
func (s *consumerStats) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.errors++
	if s.mu.firstErr == nil {
		s.mu.firstErr = err
	}
}

// endTracker knows, for Consume, the offset each partition must reach
// (its end offset when the run started) and closes done once every
// partition has reached it.
type endTracker struct {
	mu struct {
		sync.Mutex
		end     map[int32]int64 // partitions not yet reached -> end offset
		pending int
	}
	done chan struct{}
}

// newEndTracker tracks partitions from start to end offsets; a partition
// already at its end counts as reached.
func newEndTracker(start, end map[int32]int64) *endTracker {
	t := &endTracker{done: make(chan struct{})}
	t.mu.end = make(map[int32]int64)
	for p, e := range end {
		if start[p] < e {
			t.mu.end[p] = e
		}
	}
	t.mu.pending = len(t.mu.end)
	if t.mu.pending == 0 {
		close(t.done)
	}
	return t
}

// reached records that partition p delivered offset and reports whether
// every partition has now reached its end.
func (t *endTracker) reached(p int32, offset int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.mu.end[p]; ok && offset+1 >= e {
		delete(t.mu.end, p)
		t.mu.pending--
		if t.mu.pending == 0 {
			close(t.done)
		}
	}
	return t.mu.pending == 0
}
