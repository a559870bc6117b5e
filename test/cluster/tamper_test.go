package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestByzantineTamperedStorage: a broker's partition files are altered
// while it is stopped — one byte of a record's value flipped, as a bad disk
// or a hand with access to the data directory would — and the broker is
// restarted. It must stop serving instead of serving wrong data.
//   - Active segment (node X): recovery checks every batch's CRC and cuts
//     the segment before the damaged batch, so the log ends below the
//     committed offset; the broker must refuse to start, exit non-zero
//     naming the loss ("the log lost acknowledged data"), never answer
//     /healthz, and not panic.
//   - Sealed segment (node Y), a batch before the segment's last offset
//     index entry: the broker must either refuse to start or go on serving
//     the batch exactly as committed; serving the altered bytes fails the
//     test.
//
// (Fault test 4, tampered log; docs/cluster.md "What a cluster guarantees".)
func TestByzantineTamperedStorage(t *testing.T) {
	const topic, parts = "tamper", 3
	c := newCluster(t, clusterOptions{})
	c.StartAll()
	// Small segments with dense offset indexes: several sealed segments per
	// partition, each with index entries.
	w := startWorkload(t, c.KafkaAddrs(c.All()...), workloadOptions{
		topic: topic, partitions: parts, writers: 2, consumers: 1, interval: 5 * time.Millisecond,
		produceTimeout: 5 * time.Second, deliveryTimeout: 30 * time.Second,
		configs: map[string]*string{"segment.bytes": ptr("8192"), "index.interval.bytes": ptr("1024")},
	})
	w.waitAcked(c, 45*time.Second, 2000, "4 brokers")
	w.stopProducing(30 * time.Second)
	w.stopConsuming()
	t.Log(w.summary())
	c.CheckAppHashes(30*time.Second, c.All()...)
	// How the producers batched decides how many batches the active
	// segment of partition 0 holds; the test needs three. Every broker
	// holds the same files, so node0's tell; single-record batches top
	// it up.
	for i := 0; ; i++ {
		segs := harness.SegmentFiles(t, filepath.Join(c.Nodes[0].Dir, "logs", fmt.Sprintf("%s-0", topic)))
		if len(harness.SegmentBatches(t, segs[len(segs)-1])) >= 3 {
			break
		}
		if i == 20 {
			t.Fatalf("the active segment of %s-0 holds fewer than 3 batches after %d more", topic, i)
		}
		if code, _, err := c.RawProduce(0, topic, 0, 5*time.Second, fmt.Sprintf("top-up-%d", i)); err != nil || code != 0 {
			t.Fatalf("topping up %s-0: code %d, %v", topic, code, err)
		}
	}
	c.CheckAppHashes(30*time.Second, c.All()...)

	perm := c.Rng.Perm(len(c.Nodes))
	x, y, others := perm[0], perm[1], perm[2:]
	c.Stop(x)
	c.Stop(y)

	// Node X: the active (last) segment of partition 0, a batch in its
	// middle. Partition 0 is loaded first, so partitions remain to be
	// opened when its loss is found.
	dir := filepath.Join(c.Nodes[x].Dir, "logs", fmt.Sprintf("%s-0", topic))
	segs := harness.SegmentFiles(t, dir)
	active := segs[len(segs)-1]
	bs := harness.SegmentBatches(t, active)
	if len(bs) < 3 {
		t.Fatalf("%s holds %d batches; the test needs 3 or more", active, len(bs))
	}
	ta := flipValueByte(t, active, bs[len(bs)/2])
	t.Logf("node%d: %s", x, ta)

	// Node Y: a sealed segment of partition 1, a batch wholly before the
	// segment's last offset index entry (the part a clean start does not
	// re-read).
	dir = filepath.Join(c.Nodes[y].Dir, "logs", fmt.Sprintf("%s-1", topic))
	segs = harness.SegmentFiles(t, dir)
	var ts tampered
	for _, seg := range segs[:len(segs)-1] {
		last := lastIndexPosition(t, strings.TrimSuffix(seg, ".log")+".index")
		for _, b := range harness.SegmentBatches(t, seg) {
			if b.Pos > 0 && b.Pos+b.Size <= last {
				ts = flipValueByte(t, seg, b)
				break
			}
		}
		if ts.path != "" {
			break
		}
	}
	if ts.path == "" {
		t.Fatalf("%s: no sealed segment with a batch before its last offset index entry (%d segments)", dir, len(segs))
	}
	t.Logf("node%d: %s", y, ts)

	t.Run("active-segment", func(t *testing.T) {
		c.Launch(x)
		exitErr, served := c.WatchUntilExit(x, 30*time.Second)
		if served {
			t.Errorf("node%d answered /healthz with an active segment cut below its committed offset", x)
		}
		if exitErr == nil {
			t.Errorf("node%d exited with status 0 after finding its log damaged; want non-zero", x)
		}
		if len(c.logLines(x, "the log lost acknowledged data")) == 0 {
			t.Errorf("node%d's log does not say \"the log lost acknowledged data\"", x)
		}
		if p := c.logLines(x, "panic:"); len(p) > 0 {
			frames := c.logLines(x, "github.com/stele-io/stele/internal/")
			t.Errorf("node%d refused to start (good) but by panicking instead of returning an error: %q, in %s",
				x, p, strings.Join(frames[:min(len(frames), 3)], " <- "))
		}
		t.Logf("node%d exited: %v", x, exitErr)
	})

	t.Run("sealed-segment", func(t *testing.T) {
		c.Launch(y)
		var started bool
		c.Eventually(30*time.Second, fmt.Sprintf("node%d answers /healthz or exits", y), func() error {
			select {
			case <-c.Nodes[y].Proc.Done:
				return nil
			default:
			}
			if _, err := c.Health(y); err != nil {
				return err
			}
			started = true
			return nil
		})
		if !started {
			err := c.WaitExit(y, time.Second, "exiting")
			t.Logf("node%d refused to start on a damaged sealed segment: %v; its log: %q", y, err, c.logLines(y, "level=ERROR"))
			return
		}
		c.WaitCaughtUp(30*time.Second, y, others...)
		want, err := c.fetchBatchEventually(others[0], topic, 1, ts.base)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(want, ts.orig) {
			t.Fatalf("node%d serves at %s-1 offset %d a batch other than the one the test altered on node%d", others[0], topic, ts.base, y)
		}
		// The damaged broker must never answer with the altered batch: it
		// checks every batch's CRC before sending it, answers
		// KAFKA_STORAGE_ERROR, and stops (fail-stop).
		var refused error
		c.Eventually(30*time.Second, fmt.Sprintf("node%d refuses %s-1 offset %d", y, topic, ts.base), func() error {
			got, err := c.fetchBatch(y, topic, 1, ts.base)
			switch {
			case err == nil && !bytes.Equal(got, want):
				return harness.GiveUp(fmt.Errorf("node%d served the altered batch at %s-1 offset %d: %q where the chain committed %q", y, topic, ts.base, ts.altered, ts.value))
			case err == nil:
				return harness.GiveUp(fmt.Errorf("node%d served offset %d intact although its file was altered (%s)", y, ts.base, ts))
			case errors.Is(err, kerr.KafkaStorageError) || c.exitedNow(y):
				refused = err
				return nil
			}
			return err // still catching up (NOT_LEADER_OR_FOLLOWER) or starting
		})
		if exitErr := c.WaitExit(y, 30*time.Second, "stopping after finding its storage damaged"); exitErr == nil {
			t.Errorf("node%d exited with status 0 after finding its storage damaged; want non-zero", y)
		}
		if len(c.logLines(y, "stored batch fails its CRC")) == 0 {
			t.Errorf("node%d's log does not name the damaged batch", y)
		}
		t.Logf("node%d refused the damaged batch (%v) and stopped", y, refused)
	})
}

// fetchBatchEventually is fetchBatch retried while the broker catches up.
func (c *cluster) fetchBatchEventually(i int, topic string, p int32, offset int64) ([]byte, error) {
	var b []byte
	c.Eventually(30*time.Second, fmt.Sprintf("node%d serves %s-%d offset %d", i, topic, p, offset), func() error {
		var err error
		b, err = c.fetchBatch(i, topic, p, offset)
		return err
	})
	return b, nil
}

// tampered describes one flipped byte.
type tampered struct {
	path           string
	at             int64  // file position of the flipped byte
	base           int64  // base offset of the batch holding it
	orig           []byte // the batch as it was
	value, altered string // the record value before and after
}

func (t tampered) String() string {
	return fmt.Sprintf("flipped byte %d of %s (batch at offset %d): value %q is now %q", t.at, t.path, t.base, t.value, t.altered)
}

// lastIndexPosition returns the file position of the last entry of an
// offset index (8-byte entries: relative offset, position), 0 if empty.
func lastIndexPosition(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint32(data[len(data)-4:]))
}

// valueRE matches a workload record value.
var valueRE = regexp.MustCompile(`w\d+-p\d+-\d{8}`)

// flipValueByte flips the lowest bit of the last digit of the first record
// value in batch b of the segment at path: a digit becomes its neighbour, so
// the altered record still looks like one the workload could have sent.
func flipValueByte(t *testing.T, path string, b harness.BatchPos) tampered {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	batch := data[b.Pos : b.Pos+b.Size]
	loc := valueRE.FindIndex(batch[61:]) // records follow the 61-byte header
	if loc == nil {
		t.Fatalf("%s: no record value in the batch at %d", path, b.Pos)
	}
	at := b.Pos + 61 + int64(loc[1]) - 1
	tp := tampered{path: path, at: at, base: b.Base, orig: slices.Clone(batch),
		value: string(batch[61+loc[0] : 61+loc[1]])}
	data[at] ^= 0x01
	tp.altered = string(data[b.Pos+61+int64(loc[0]) : b.Pos+61+int64(loc[1])])
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return tp
}

// fetchBatch asks node i for partition p of topic at offset and returns the
// bytes of the first batch of the answer, unchecked.
func (c *cluster) fetchBatch(i int, topic string, p int32, offset int64) ([]byte, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 0, 1<<20
	req.SessionID, req.SessionEpoch = 0, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, 1
	rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kresp, err := c.Request(ctx, i, req)
	if err != nil {
		return nil, fmt.Errorf("node%d Fetch %s-%d@%d: %w", i, topic, p, offset, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("node%d Fetch %s-%d: answer has %d topics", i, topic, p, len(resp.Topics))
	}
	fp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		return nil, fmt.Errorf("node%d Fetch %s-%d@%d: %w", i, topic, p, offset, err)
	}
	b := fp.RecordBatches
	if len(b) < 12 || int64(len(b)) < 12+int64(binary.BigEndian.Uint32(b[8:])) {
		return nil, fmt.Errorf("node%d Fetch %s-%d@%d: no whole batch in %d bytes", i, topic, p, offset, len(b))
	}
	return b[:12+binary.BigEndian.Uint32(b[8:])], nil
}

func ptr[T any](v T) *T { return &v }

// exitedNow reports whether node i's process has exited.
func (c *cluster) exitedNow(i int) bool {
	p := c.Nodes[i].Proc
	if p == nil {
		return true
	}
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}
