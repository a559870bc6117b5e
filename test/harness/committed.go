package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stele-io/stele/internal/record"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CommittedLog reads partition p of topic from node i as stored (raw
// read_uncommitted Fetch) and resolves it by its own transaction markers:
// a transactional record is committed when the next marker of its producer
// in the partition is a commit. It returns the committed records and the
// records of aborted transactions, by offset (markers are in neither). The broker's
// read_committed machinery (last stable offset, aborted lists) is not
// used: this is the ground truth the reader's history is checked against.
func (c *Cluster) CommittedLog(i int, topic string, p int32) (committed, aborted map[int64]string, err error) {
	committed, aborted = map[int64]string{}, map[int64]string{}
	pending := map[int64]map[int64]string{} // producer -> offset -> value
	next := int64(0)
	for {
		fp, ferr := c.RawFetch(i, topic, p, next)
		if ferr != nil {
			return nil, nil, ferr
		}
		if next >= fp.HighWatermark {
			return committed, aborted, nil
		}
		batches, err := record.Split(fp.RecordBatches)
		if err != nil || len(batches) == 0 {
			return nil, nil, fmt.Errorf("node%d Fetch %s-%d@%d: %d batches (%v)", i, topic, p, next, len(batches), err)
		}
		for _, b := range batches {
			h, recs, err := record.Records(b)
			if err != nil {
				return nil, nil, fmt.Errorf("node%d %s-%d batch at %d: %w", i, topic, p, h.BaseOffset, err)
			}
			if h.LastOffset() < next {
				continue
			}
			switch {
			case h.Control():
				commit, ok := record.MarkerCommits(b)
				if !ok {
					return nil, nil, fmt.Errorf("node%d %s-%d offset %d: an unreadable marker", i, topic, p, h.BaseOffset)
				}
				to := aborted
				if commit {
					to = committed
				}
				for off, v := range pending[h.ProducerID] {
					to[off] = v
				}
				delete(pending, h.ProducerID)
			case h.Transactional():
				if pending[h.ProducerID] == nil {
					pending[h.ProducerID] = map[int64]string{}
				}
				for _, r := range recs {
					pending[h.ProducerID][h.BaseOffset+int64(r.OffsetDelta)] = string(r.Value)
				}
			default:
				for _, r := range recs {
					committed[h.BaseOffset+int64(r.OffsetDelta)] = string(r.Value)
				}
			}
			next = h.LastOffset() + 1
		}
	}
}

// CreateTopic creates topic with the given partitions and configs through
// seeds.
func CreateTopic(t *testing.T, seeds []string, topic string, partitions int32, configs map[string]*string, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
}

// Clock is the wall-clock time of day, to line events up with the brokers'
// logs.
func Clock() string { return time.Now().Format("15:04:05.000") }
