package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/test/harness"
)

// Recovery figures (issue 7): how long a broker killed with SIGKILL takes
// to serve again, and how long a wiped broker takes to rejoin, as a
// function of the size of the log it holds. A measurement, not a timing
// assertion: the test fails only when a broker does not recover within
// generous deadlines or when data is missing or differs afterwards.
//
//	go test ./test/chaos -run TestRecoveryFigures -count=1 -v -timeout 3h \
//	    -chaos.recovery 64MiB,256MiB,1GiB
var recoverySizesFlag = flag.String("chaos.recovery", "",
	"TestRecoveryFigures: comma-separated log sizes to measure recovery at (e.g. 64MiB,256MiB,1GiB; suffixes KiB, MiB, GiB); the test is skipped without it")

const (
	// recoveryTopic is filled with about the size measured, one producer
	// per partition.
	recoveryTopic = "recovery"
	recoveryParts = 4
	// recoveryTickTopic carries the light load that keeps the chain
	// committing while a broker is down; it leaves recoveryTopic's high
	// watermarks still after the fill.
	recoveryTickTopic = "recovery-tick"
	recoveryTickEvery = 250 * time.Millisecond
	// recoveryValue is the size of one record's value: random bytes, so
	// nothing compresses.
	recoveryValue = 16 << 10
	// recoveryBatch is the producers' batch limit, under the topic's
	// default max.message.bytes (1048588).
	recoveryBatch = 1_000_000
	// recoveryDown is how long the killed broker stays down.
	recoveryDown = 5 * time.Second
	// The killed and the wiped broker.
	recoveryKilled = 1
	recoveryWiped  = 2
)

// errRecoveryData marks a difference in what a recovered broker serves:
// no retry can fix it.
var errRecoveryData = errors.New("stele/test/chaos: a recovered broker serves different data")

// recoveryFigures is one size's row of the table.
type recoveryFigures struct {
	size      int64
	records   int64         // records filled (recoveryValue bytes each)
	fillTook  time.Duration // first produce to last acknowledgement
	height    int64         // chain height after the fill
	kill      recoveryTimes
	wipe      recoveryTimes
	joinPath  string // how the wiped broker rebuilt its state
	wipedLogs int64  // bytes under the wiped broker's DATA/logs at the end
	refLogs   int64  // the same on node0
}

// recoveryTimes are measured from the restart (the process launched).
type recoveryTimes struct {
	healthz  time.Duration // /healthz answers
	caughtUp time.Duration // height reaches the others' height at the restart
	serving  time.Duration // a Fetch of every partition's last record answers it
	target   int64         // the others' height at the restart
}

// recoveryLast is the last record of one partition of recoveryTopic, as
// node0 serves it after the fill.
type recoveryLast struct {
	offset int64
	value  string
}

// TestRecoveryFigures measures, for each size given by -chaos.recovery, on
// a fresh 4-broker cluster of real processes with default settings:
//
//  1. a topic of 4 partitions filled with about that many bytes of 16 KiB
//     random records (franz-go, acks=all, idempotent, 1 MB batches, one
//     producer per partition), and the fill's throughput;
//  2. node1 killed with SIGKILL, down for 5 s while a light load keeps the
//     others committing, restarted: the time from the restart until its
//     /healthz answers, until it reaches the height the others had at the
//     restart, and until it serves a Fetch of every partition's last record
//     itself (same offset, same bytes, same high watermark as node0);
//  3. node2 stopped, wiped as docs/cluster.md says to rebuild a broker, and
//     restarted: the same three times, how it rebuilt its state (block sync
//     from the peers' stores or state sync from a snapshot) and the bytes
//     under its DATA/logs.
//
// At the end every broker must report the same app hash and, once stopped,
// hold byte-identical files under DATA/logs. A markdown table of the
// figures and a note of the machine are logged for docs/reliability.md.
//
// Reading the figures: /healthz is liveness only (it answers at the
// height the store holds, before any catching up); "serving" is what a
// client sees. Both restarts go through CometBFT's block sync, which waits
// 3 s for peers before asking for a block (blocksync's peerConnWait) and
// checks once a second whether to switch to consensus, and a broker
// answers reads only once it is in consensus: about 4 s is the floor at
// any size. With the default --retain-blocks (10,000) a wiped broker
// rejoins by block sync from genesis, fetching every batch again from its
// peers, unless the chain is longer than that; the table says which.
func TestRecoveryFigures(t *testing.T) {
	if *recoverySizesFlag == "" {
		t.Skip("recovery figures are measured only when asked: -chaos.recovery 64MiB,256MiB,1GiB")
	}
	sizes, err := parseRecoverySizes(*recoverySizesFlag)
	if err != nil {
		t.Fatalf("-chaos.recovery: %v", err)
	}
	machine := recoveryMachine()
	t.Logf("machine: %s", machine)
	var rows []recoveryFigures
	for k, size := range sizes {
		rows = append(rows, measureRecovery(t, size))
		if k < len(sizes)-1 {
			t.Logf("figures so far:\n%s", recoveryTable(rows, machine))
		}
	}
	t.Logf("recovery figures (paste into docs/reliability.md):\n\n%s", recoveryTable(rows, machine))
}

// measureRecovery runs steps 1-3 of TestRecoveryFigures for one size on a
// cluster of its own, which it stops and removes before returning. One
// cluster runs at a time.
func measureRecovery(t *testing.T, size int64) recoveryFigures {
	t.Logf("%s ===== log size %s =====", harness.Clock(), formatRecoverySize(size))
	fig := recoveryFigures{size: size}
	c := harness.New(t, harness.Options{})
	c.StartAll()
	all := c.All()
	seeds := c.KafkaAddrs(all...)
	harness.CreateTopic(t, seeds, recoveryTopic, recoveryParts, nil)
	harness.CreateTopic(t, seeds, recoveryTickTopic, 1, nil)

	// 1. Fill.
	fig.records, fig.fillTook = recoveryFill(t, seeds, size)
	mib := float64(fig.records*recoveryValue) / (1 << 20)
	t.Logf("%s filled %s with %d records of %d bytes (%.1f MiB) in %v: %.2f MiB/s",
		harness.Clock(), recoveryTopic, fig.records, recoveryValue, mib,
		fig.fillTook.Round(time.Millisecond), mib/fig.fillTook.Seconds())
	last := recoveryReference(t, c, fig.records)
	fig.height = c.MaxHeight(all...)
	t.Logf("chain height after the fill: %d", fig.height)

	ticks := startRecoveryTicks(t, seeds)
	deadline := recoveryDeadline(size)

	// 2. Killed broker.
	c.Kill9(recoveryKilled)
	time.Sleep(recoveryDown) // the outage being measured, not a synchronisation
	fig.kill = recoveryRestart(c, recoveryKilled, others(c, []int{recoveryKilled}), last, deadline)
	t.Logf("%s killed node%d: /healthz after %v, caught up to height %d after %v, serving the last records after %v",
		harness.Clock(), recoveryKilled, fig.kill.healthz.Round(time.Millisecond), fig.kill.target,
		fig.kill.caughtUp.Round(time.Millisecond), fig.kill.serving.Round(time.Millisecond))

	// 3. Wiped broker.
	c.Stop(recoveryWiped)
	c.Wipe(recoveryWiped)
	fig.wipe = recoveryRestart(c, recoveryWiped, others(c, []int{recoveryWiped}), last, deadline)
	fig.joinPath = recoveryJoinPath(t, c.Nodes[recoveryWiped].LogPath)
	t.Logf("%s wiped node%d (%s): /healthz after %v, caught up to height %d after %v, serving the last records after %v",
		harness.Clock(), recoveryWiped, fig.joinPath, fig.wipe.healthz.Round(time.Millisecond), fig.wipe.target,
		fig.wipe.caughtUp.Round(time.Millisecond), fig.wipe.serving.Round(time.Millisecond))

	// Nothing missing anywhere: the same high watermarks, app hash and
	// log files on every broker.
	ok, failed := ticks.stop()
	t.Logf("light load on %s: %d records acknowledged, %d failed", recoveryTickTopic, ok, failed)
	for _, i := range all {
		// A direct client's connection opened before a restart answers
		// its first request with EOF and is redialled: poll.
		c.Eventually(30*time.Second, fmt.Sprintf("node%d reports node0's high watermarks", i), func() error {
			hwm, err := c.HighWatermarks(i, recoveryTopic, recoveryParts)
			if err != nil {
				return err
			}
			for p, h := range hwm {
				if h != last[p].offset+1 {
					return harness.GiveUp(fmt.Errorf("node%d: %s-%d high watermark %d, node0's %d", i, recoveryTopic, p, h, last[p].offset+1))
				}
			}
			return nil
		})
	}
	c.CheckAppHashes(2*time.Minute, all...)
	c.StopAll()
	ref := recoveryDigests(t, c.Nodes[0].Dir)
	fig.refLogs = ref.bytes()
	for _, i := range all[1:] {
		d := recoveryDigests(t, c.Nodes[i].Dir)
		if i == recoveryWiped {
			fig.wipedLogs = d.bytes()
		}
		for _, diff := range ref.diff(d) {
			t.Errorf("node%d's logs differ from node0's: %s", i, diff)
		}
	}
	t.Logf("DATA/logs: node0 %s, wiped node%d %s; %d files compared on 4 brokers",
		formatRecoveryBytes(fig.refLogs), recoveryWiped, formatRecoveryBytes(fig.wipedLogs), len(ref))
	if t.Failed() {
		t.FailNow() // harness's cleanup prints the brokers' logs (and keeps them with STELE_FAULT_KEEP=1)
	}
	os.RemoveAll(c.Dir) // the next size needs the disk; harness's cleanup finds nothing left
	return fig
}

// recoveryFill writes ceil(size/16 KiB) records of random bytes to
// recoveryTopic as fast as the cluster takes them, one idempotent producer
// per partition, and returns the records acknowledged and the time from
// the first produce to the last acknowledgement. Any failed produce fails
// the test: the fill is not under faults.
func recoveryFill(t *testing.T, seeds []string, size int64) (int64, time.Duration) {
	t.Helper()
	n := (size + recoveryValue - 1) / recoveryValue
	ctx, cancel := context.WithTimeout(context.Background(), recoveryFillDeadline(size))
	defer cancel()
	var (
		acked    atomic.Int64
		errMu    sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	start := time.Now()
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	for p := range int64(recoveryParts) {
		share := n / recoveryParts
		if p < n%recoveryParts {
			share++
		}
		wg.Go(func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(recoveryTopic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.ProducerBatchMaxBytes(recoveryBatch), kgo.ProducerLinger(5*time.Millisecond),
				kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MaxBufferedBytes(8<<20))
			if err != nil {
				fail(err)
				return
			}
			defer cl.Close()
			var seed [32]byte
			seed[0] = byte(p)
			rng := rand.NewChaCha8(seed)
			for range share {
				v := make([]byte, recoveryValue)
				rng.Read(v)
				cl.Produce(ctx, &kgo.Record{Partition: int32(p), Value: v}, func(_ *kgo.Record, err error) {
					if err != nil {
						fail(fmt.Errorf("producing to %s-%d: %w", recoveryTopic, p, err))
						return
					}
					acked.Add(1)
				})
			}
			if err := cl.Flush(ctx); err != nil {
				fail(fmt.Errorf("flushing %s-%d: %w", recoveryTopic, p, err))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-progress.C:
			t.Logf("%s fill: %d of %d records acknowledged", harness.Clock(), acked.Load(), n)
		}
	}
	took := time.Since(start)
	if firstErr != nil {
		t.Fatalf("filling %s (%d of %d records acknowledged): %v", recoveryTopic, acked.Load(), n, firstErr)
	}
	if got := acked.Load(); got != n {
		t.Fatalf("filling %s: %d of %d records acknowledged", recoveryTopic, got, n)
	}
	return n, took
}

// recoveryReference waits until every broker reports the same high
// watermarks for recoveryTopic, requires them to add up to the records
// acknowledged (each exactly once), and returns each partition's last
// record as node0 serves it.
func recoveryReference(t *testing.T, c *harness.Cluster, records int64) []recoveryLast {
	t.Helper()
	var hwm []int64
	c.Eventually(time.Minute, "every broker reports the same high watermarks", func() error {
		var err error
		if hwm, err = c.HighWatermarks(0, recoveryTopic, recoveryParts); err != nil {
			return err
		}
		for _, i := range c.All()[1:] {
			other, err := c.HighWatermarks(i, recoveryTopic, recoveryParts)
			if err != nil {
				return err
			}
			if !slices.Equal(other, hwm) {
				return fmt.Errorf("node0 %v, node%d %v", hwm, i, other)
			}
		}
		return nil
	})
	var sum int64
	for _, h := range hwm {
		sum += h
	}
	if sum != records {
		t.Fatalf("%s's high watermarks %v add up to %d records; %d were acknowledged", recoveryTopic, hwm, sum, records)
	}
	last := make([]recoveryLast, recoveryParts)
	for p := range int32(recoveryParts) {
		if hwm[p] == 0 {
			t.Fatalf("%s-%d is empty: the size is too small to fill every partition", recoveryTopic, p)
		}
		fp, err := c.RawFetch(0, recoveryTopic, p, hwm[p]-1)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := harness.DecodeBatches(recoveryTopic, p, hwm[p]-1, fp.RecordBatches)
		if err != nil || len(recs) == 0 || recs[0].Offset != hwm[p]-1 {
			t.Fatalf("node0 %s-%d: the last record (offset %d) not served: %d records (%v)", recoveryTopic, p, hwm[p]-1, len(recs), err)
		}
		last[p] = recoveryLast{offset: recs[0].Offset, value: recs[0].Value}
	}
	return last
}

// recoveryRestart launches node i (stopped) and polls it every 100 ms
// until it has both reached the others' height at the launch and served
// every partition's last record, for at most d.
func recoveryRestart(c *harness.Cluster, i int, others []int, last []recoveryLast, d time.Duration) recoveryTimes {
	c.T.Helper()
	got := recoveryTimes{target: c.MaxHeight(others...)}
	start := time.Now()
	c.Launch(i)
	c.T.Logf("%s node%d restarted; the others are at height %d", harness.Clock(), i, got.target)
	c.Eventually(d, fmt.Sprintf("node%d (restarted) reaches height %d and serves the last record of every partition", i, got.target), func() error {
		if err := c.Exited(i); err != nil {
			return harness.GiveUp(err)
		}
		h, err := c.Health(i)
		if err != nil {
			return err
		}
		now := time.Since(start)
		if got.healthz == 0 {
			got.healthz = now
		}
		if got.caughtUp == 0 && h.Height >= got.target {
			got.caughtUp = now
		}
		var serveErr error
		if got.serving == 0 {
			if serveErr = recoveryServes(c, i, last); serveErr == nil {
				got.serving = now
			} else if errors.Is(serveErr, errRecoveryData) {
				return harness.GiveUp(serveErr)
			}
		}
		if got.caughtUp == 0 || got.serving == 0 {
			return fmt.Errorf("at height %d; serving: %v", h.Height, serveErr)
		}
		return nil
	})
	return got
}

// recoveryServes fetches every partition's last record from node i itself
// and requires node0's offset, bytes and high watermark. A record with
// other bytes, or a high watermark above node0's, is errRecoveryData.
func recoveryServes(c *harness.Cluster, i int, last []recoveryLast) error {
	for p, want := range last {
		fp, err := c.RawFetch(i, recoveryTopic, int32(p), want.offset)
		if err != nil {
			return err
		}
		switch {
		case fp.HighWatermark > want.offset+1:
			return fmt.Errorf("%w: node%d %s-%d high watermark %d, node0's %d", errRecoveryData, i, recoveryTopic, p, fp.HighWatermark, want.offset+1)
		case fp.HighWatermark < want.offset+1:
			return fmt.Errorf("node%d %s-%d high watermark %d, node0's %d", i, recoveryTopic, p, fp.HighWatermark, want.offset+1)
		}
		recs, err := harness.DecodeBatches(recoveryTopic, int32(p), want.offset, fp.RecordBatches)
		if err != nil {
			return fmt.Errorf("%w: node%d %s-%d@%d: %v", errRecoveryData, i, recoveryTopic, p, want.offset, err)
		}
		if len(recs) == 0 || recs[0].Offset != want.offset {
			return fmt.Errorf("node%d %s-%d@%d: the record is not in the answer (%d records)", i, recoveryTopic, p, want.offset, len(recs))
		}
		if recs[0].Value != want.value {
			return fmt.Errorf("%w: node%d %s-%d@%d holds other bytes than node0", errRecoveryData, i, recoveryTopic, p, want.offset)
		}
	}
	return nil
}

// recoveryJoinPath reads the wiped broker's stderr since its last start
// and says how it rebuilt its state.
func recoveryJoinPath(t *testing.T, logPath string) string {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if k := bytes.LastIndex(data, []byte("=== harness: start #")); k >= 0 {
		data = data[k:]
	}
	if bytes.Contains(data, []byte("state sync: restoring a snapshot")) {
		return "state sync"
	}
	return "block sync"
}

// recoveryTicks is the light load: one record every 250 ms to
// recoveryTickTopic through a client seeded with every broker, sent
// without waiting for the previous one (a produce waits for its block).
type recoveryTicks struct {
	cancel     context.CancelFunc
	done       chan struct{}
	stopOnce   sync.Once
	ok, failed atomic.Int64
}

func startRecoveryTicks(t *testing.T, seeds []string) *recoveryTicks {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(recoveryTickTopic),
		kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(20*time.Second), kgo.MaxBufferedRecords(100))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &recoveryTicks{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() { r.stop() }) // when the test fails before stopping it
	go func() {
		defer close(r.done)
		defer cl.Close()
		tick := time.NewTicker(recoveryTickEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				flush, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				cl.Flush(flush)
				cancel()
				return
			case <-tick.C:
			}
			cl.Produce(context.Background(), &kgo.Record{Value: []byte("tick-" + strconv.Itoa(n))}, func(_ *kgo.Record, err error) {
				if err != nil {
					r.failed.Add(1)
				} else {
					r.ok.Add(1)
				}
			})
		}
	}()
	return r
}

// stop ends the light load, waits up to 30 s for what it has in flight and
// returns its acknowledged and failed records.
func (r *recoveryTicks) stop() (ok, failed int64) {
	r.stopOnce.Do(func() {
		r.cancel()
		<-r.done
	})
	return r.ok.Load(), r.failed.Load()
}

// recoveryFileDigest is one file under DATA/logs.
type recoveryFileDigest struct {
	size int64
	sum  [sha256.Size]byte
}

// recoveryLogDigests maps a path under DATA/logs to its digest.
type recoveryLogDigests map[string]recoveryFileDigest

// recoveryDigests hashes every file under dir/logs, streaming (the logs
// may be larger than memory allows twice over).
func recoveryDigests(t *testing.T, dir string) recoveryLogDigests {
	t.Helper()
	root := filepath.Join(dir, "logs")
	out := recoveryLogDigests{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var dg recoveryFileDigest
		dg.size = n
		copy(dg.sum[:], h.Sum(nil))
		out[filepath.ToSlash(rel)] = dg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// bytes is the total size of the files.
func (d recoveryLogDigests) bytes() int64 {
	var n int64
	for _, f := range d {
		n += f.size
	}
	return n
}

// diff lists the files missing from one side or differing, sorted.
func (d recoveryLogDigests) diff(other recoveryLogDigests) []string {
	var out []string
	for name, want := range d {
		got, ok := other[name]
		switch {
		case !ok:
			out = append(out, "logs/"+name+" is missing")
		case got != want:
			out = append(out, fmt.Sprintf("logs/%s: %d bytes against %d, different contents", name, got.size, want.size))
		}
	}
	for name := range other {
		if _, ok := d[name]; !ok {
			out = append(out, "logs/"+name+" is extra")
		}
	}
	slices.Sort(out)
	return out
}

// recoveryTable formats the rows as a markdown table with the command
// line and the machine under it.
func recoveryTable(rows []recoveryFigures, machine string) string {
	var b strings.Builder
	b.WriteString("| log size | fill MiB/s | chain height | kill: /healthz | kill: caught up | kill: serving | wipe: /healthz | wipe: caught up | wipe: serving | wipe: joined by | wiped broker's DATA/logs |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	secs := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	var sizes []string
	for _, r := range rows {
		mib := float64(r.records*recoveryValue) / (1 << 20)
		fmt.Fprintf(&b, "| %s | %.2f | %d | %s | %s | %s | %s | %s | %s | %s | %s (node0: %s) |\n",
			formatRecoverySize(r.size), mib/r.fillTook.Seconds(), r.height,
			secs(r.kill.healthz), secs(r.kill.caughtUp), secs(r.kill.serving),
			secs(r.wipe.healthz), secs(r.wipe.caughtUp), secs(r.wipe.serving),
			r.joinPath, formatRecoveryBytes(r.wipedLogs), formatRecoveryBytes(r.refLogs))
		sizes = append(sizes, formatRecoverySize(r.size))
	}
	fmt.Fprintf(&b, "\nTimes from the restart. `go test ./test/chaos -run TestRecoveryFigures -count=1 -v -timeout 3h -chaos.recovery %s",
		strings.ReplaceAll(strings.Join(sizes, ","), " ", ""))
	fmt.Fprintf(&b, "`; %s.\n", machine)
	return b.String()
}

// recoveryMachine describes the machine: CPUs, memory, load.
func recoveryMachine() string {
	s := fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				s += " (" + strings.TrimSpace(v) + ")"
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					s += ", " + formatRecoveryBytes(kb<<10) + " RAM"
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			s += ", load average " + strings.Join(f[:3], " ") + " at the start"
		}
	}
	return s + ", " + runtime.Version()
}

// recoveryDeadline bounds one broker's recovery: 5 minutes plus a second
// per MiB of log.
func recoveryDeadline(size int64) time.Duration {
	return 5*time.Minute + time.Duration(size>>20)*time.Second
}

// recoveryFillDeadline bounds the fill: 10 minutes plus 2 s per MiB.
func recoveryFillDeadline(size int64) time.Duration {
	return 10*time.Minute + time.Duration(size>>20)*2*time.Second
}

// parseRecoverySizes parses "64MiB,256MiB,1GiB": sizes in bytes with an
// optional KiB, MiB or GiB suffix (case-insensitive), each at least one
// record per partition.
func parseRecoverySizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		num, mult := f, int64(1)
		for _, u := range []struct {
			suffix string
			mult   int64
		}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}} {
			if len(f) > len(u.suffix) && strings.EqualFold(f[len(f)-len(u.suffix):], u.suffix) {
				num, mult = strings.TrimSpace(f[:len(f)-len(u.suffix)]), u.mult
				break
			}
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("size %q: want a whole number with an optional KiB, MiB or GiB suffix", f)
		}
		if n <= 0 || n > (1<<50)/mult {
			return nil, fmt.Errorf("size %q: out of range", f)
		}
		if n*mult < recoveryParts*recoveryValue {
			return nil, fmt.Errorf("size %q: at least %d KiB (one %d KiB record per partition)", f, recoveryParts*recoveryValue>>10, recoveryValue>>10)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// formatRecoverySize prints a size the way -chaos.recovery takes it.
func formatRecoverySize(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// formatRecoveryBytes prints a byte count in MiB (or GiB from 10 GiB).
func formatRecoveryBytes(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// TestParseRecoverySizes checks the -chaos.recovery parser.
func TestParseRecoverySizes(t *testing.T) {
	got, err := parseRecoverySizes("64MiB, 256mib,1GiB,65536,128KiB")
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{64 << 20, 256 << 20, 1 << 30, 65536, 128 << 10}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "MiB", "1.5GiB", "-1MiB", "0", "64MB", "1KiB", "64MiB,,1GiB", "99999999999GiB"} {
		if _, err := parseRecoverySizes(bad); err == nil {
			t.Errorf("parseRecoverySizes(%q) accepted it", bad)
		}
	}
	for _, n := range want {
		back, err := parseRecoverySizes(strings.ReplaceAll(formatRecoverySize(n), " ", ""))
		if err != nil || len(back) != 1 || back[0] != n {
			t.Errorf("%d formats as %q, which parses as %v (%v)", n, formatRecoverySize(n), back, err)
		}
	}
}
