package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stele-io/stele/test/harness"
)

// The run's settings. The short run of .ci/run uses the defaults; the long
// run is documented in docs/reliability.md.
var (
	duration = flag.Duration("chaos.duration", 90*time.Second, "how long faults are injected")
	gap      = flag.Duration("chaos.gap", 4*time.Second, "mean quiet time between two faults")
	hold     = flag.Duration("chaos.hold", 8*time.Second, "longest time a fault lasts (the shortest is a quarter of it)")
	seedFlag = flag.Uint64("chaos.seed", 0, "seed of the schedule and the clients' choices (0: from the time; STELE_CHAOS_SEED also sets it)")
	kinds    = flag.String("chaos.faults", "", "comma-separated fault kinds to inject (default: all of "+strings.Join(FaultKinds(), ",")+")")
	known    = flag.String("chaos.known", "", "comma-separated anomaly kinds that are printed but do not fail the run: open bugs docs/reliability.md describes")
	out      = flag.String("chaos.history", "", "write the history and final state (JSON) here; by default they are written only when the run fails")
	secure   = flag.Bool("chaos.secure", false, "run TestChaos on a cluster made by `stele cluster init --tls --http-tls --admin-password-file`: every client over SASL_SSL (SCRAM-SHA-512) as the admin, the data plane over https")
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// TestChaos runs the workload on a 4-broker cluster of real processes
// while faults from the seeded schedule are injected, then heals
// everything, reads the final state back from every broker and checks the
// history: no anomaly of any kind, every broker holding the same committed
// records, the same app hash, and byte-identical log files.
func TestChaos(t *testing.T) {
	seed := runSeed(t)
	var only []string
	if *kinds != "" {
		only = strings.Split(*kinds, ",")
	}
	plan, err := Schedule(seed, *duration, *gap, *hold, 4, only)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos seed %d (rerun: go test ./test/chaos -run TestChaos -chaos.seed %d -chaos.duration %v -chaos.gap %v -chaos.hold %v); %d faults planned",
		seed, seed, *duration, *gap, *hold, len(plan))

	hopts := harness.Options{Proxies: true, SyncJournal: true, SlowFsync: 5 * time.Millisecond}
	var pw string
	if *secure {
		pw = filepath.Join(t.TempDir(), "admin.password")
		if err := os.WriteFile(pw, []byte(secureAdminPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		hopts.InitArgs = []string{"--tls", "--http-tls", "--admin-password-file", pw}
	}
	c := harness.New(t, hopts)
	if *secure {
		clientOpts = secureClientOpts(t, filepath.Join(filepath.Dir(c.Nodes[0].Dir), "ca", "ca.crt"))
		c.ClientOpts = clientOpts
		t.Cleanup(func() { clientOpts = nil })
	}
	c.StartAll()
	if *secure {
		c.WaitHeight(time.Minute, 2, c.All()...) // the genesis admin exists from block 1
	}
	seeds := c.KafkaAddrs(c.All()...)
	harness.CreateTopic(t, seeds, sendTopic, sendParts, nil, clientOpts...)
	harness.CreateTopic(t, seeds, txnTopic, txnParts, nil, clientOpts...)
	from, pattern, order := sendTopic+","+txnTopic, viewOf, "global"
	harness.CreateTopic(t, seeds, viewTopic, -1, map[string]*string{"stele.view.from": &from, "stele.view.subject": &pattern, "stele.view.order": &order}, clientOpts...)

	start := time.Now()
	rec := NewRecorder(seed, start)
	w := startWorkload(seeds, seed, rec)
	defer w.stopAll()
	recovery := injectFaults(c, rec, plan, start, *duration)
	if rest := time.Until(start.Add(*duration)); rest > 0 {
		time.Sleep(rest)
	}

	t.Logf("%s faults over; every broker running and connected; stopping the producers", harness.Clock())
	final := w.finish(t, c)
	checkView(t, c, final)
	c.StopAll()
	files := c.CompareLogs(c.All()...)

	h := rec.History()
	report := Check(h, final)
	t.Logf("chaos summary (%d log files byte-identical on 4 brokers)\n%s%s", files, report.Summary(), recovery)
	path := *out
	if path == "" && (!report.OK() || t.Failed()) { // known anomalies included
		path = filepath.Join(os.TempDir(), fmt.Sprintf("stele-chaos-%d.json", seed))
	}
	if path != "" {
		if err := WriteFile(path, h, final); err != nil {
			t.Errorf("writing the history: %v", err)
		} else {
			t.Logf("history written to %s (recheck: go test ./test/chaos -run TestCheckFile -chaos.history %s)", path, path)
		}
	}
	for _, kind := range AnomalyKinds() {
		switch n := report.Counts[kind]; {
		case n > 0 && slices.Contains(strings.Split(*known, ","), kind):
			t.Logf("%d %s anomalies: a known open bug (docs/reliability.md), not failing the run (-chaos.known)", n, kind)
		case n > 0:
			t.Errorf("%d %s anomalies (seed %d)", n, kind, seed)
		}
	}
}

// byzantineModes are the lies of a FaultByzantine broker, none of which
// may stall or corrupt the honest three (test/cluster's Byzantine tests
// check each alone), nor lose or corrupt anything a client reads: to its
// clients it names itself the only broker and leader of everything, and
// reports high watermarks 1000 above the truth. (Lies about the records
// themselves would fool any client that does not verify:
// TestByzantineAnswers shows them apart.)
const byzantineModes = "malformed-proposals,sign-without-storing,corrupt-batches,lie-metadata,forge-watermark"

// injectFaults applies plan in order from the test's goroutine, undoing
// each fault before the next, and returns the recovery figures: how long a
// killed broker took to answer /healthz after its restart (liveness only),
// to reach the height the others had when it came back, and how long a
// wiped broker took to rejoin. Recoveries can take longer than the
// schedule allows for; a fault that would begin after the run's end is
// left out, so the run stays within its length.
func injectFaults(c *harness.Cluster, rec *Recorder, plan []Planned, start time.Time, length time.Duration) string {
	var serve, catchUp, rebuild []time.Duration
	var clock clockWatch
	skipped := 0
	added := -1 // the broker a FaultMembership added, until removed
	for n, p := range plan {
		if time.Since(start)+p.For > length {
			skipped = len(plan) - n
			break
		}
		if wait := time.Until(start.Add(p.At)); wait > 0 {
			time.Sleep(wait)
		}
		c.T.Logf("%s fault: %s", harness.Clock(), p)
		end := rec.Fault(p.Kind, p.Nodes, p.String())
		rest := others(c, p.Nodes)
		switch p.Kind {
		case FaultKill, FaultKillAll:
			for _, i := range p.Nodes {
				c.Kill9(i)
			}
		case FaultPowerCut:
			for _, i := range p.Nodes {
				c.Kill9(i)
			}
			for _, i := range p.Nodes {
				c.LoseUnsynced(i)
			}
		case FaultPause:
			c.Pause(p.Nodes[0])
		case FaultIsolate, FaultSplit:
			c.Partition(p.Nodes, rest)
		case FaultOneWay:
			c.DropFrom(p.Nodes[0])
		case FaultByzantine:
			n := c.Nodes[p.Nodes[0]]
			c.Kill9(n.Idx)
			n.Bin, n.Env = harness.ByzantineBin(c.T), []string{"STELE_BYZANTINE=" + byzantineModes}
			c.Restart(n.Idx)
		case FaultCorrupt:
			corrupt(c, p.Nodes[0], p.Variant)
		case FaultTamper:
			tamper(c, p.Nodes[0], rest)
		case FaultClock:
			n := c.Nodes[p.Nodes[0]]
			c.Kill9(n.Idx)
			off := clockOffsets[int(p.Variant)%len(clockOffsets)]
			n.Bin, n.Env = harness.ByzantineBin(c.T), []string{fmt.Sprintf("STELE_BYZANTINE=clock-offset=%v", off)}
			c.Restart(n.Idx)
			c.T.Logf("%s node%d's clock is %v off", harness.Clock(), n.Idx, off)
			clock = clockWatch{from: c.MaxHeight(rest...) + 1, node: n.Idx, off: off}
		case FaultMembership:
			if p.Variant%2 == 1 && c.NextNodeID() <= harness.MaxNodeID {
				added = addReplica(c, rest[0])
			} else {
				setPower(c, rest[0], p.Nodes[0], 0)
			}
		}
		time.Sleep(p.For)
		switch p.Kind {
		case FaultKill, FaultKillAll, FaultPowerCut:
			// All at once, as after a power cut: a broker replaying its
			// blocks may need a batch only its peers hold.
			t0 := time.Now()
			c.StartNodes(p.Nodes...)
			c.T.Logf("%s nodes %v restarted", harness.Clock(), p.Nodes)
			serve = append(serve, time.Since(t0))
			if time.Since(t0) > slowStart {
				logStartPhases(c, p.Nodes)
			}
			if len(p.Nodes) == 1 {
				t0 := time.Now()
				c.WaitCaughtUp(2*time.Minute, p.Nodes[0], rest...)
				catchUp = append(catchUp, time.Since(t0))
			}
		case FaultPause:
			c.Resume(p.Nodes[0])
		case FaultIsolate, FaultSplit, FaultOneWay:
			c.Heal()
		case FaultByzantine:
			n := c.Nodes[p.Nodes[0]]
			c.Kill9(n.Idx)
			n.Bin, n.Env = "", nil
			c.Restart(n.Idx)
			c.WaitCaughtUp(2*time.Minute, n.Idx, rest...)
		case FaultClock:
			clock.check(c, rest[0])
			n := c.Nodes[p.Nodes[0]]
			c.Kill9(n.Idx)
			n.Bin, n.Env = "", nil
			c.Restart(n.Idx)
			c.WaitCaughtUp(2*time.Minute, n.Idx, rest...)
		case FaultCorrupt, FaultTamper:
			t0 := time.Now()
			c.Restart(p.Nodes[0])
			c.WaitCaughtUp(rejoinBound(c.MaxHeight(rest...)), p.Nodes[0], rest...)
			rebuild = append(rebuild, time.Since(t0))
		case FaultMembership:
			if added >= 0 {
				removeReplica(c, rest[0], added)
				added = -1
			} else {
				setPower(c, rest[0], p.Nodes[0], -1)
			}
		}
		end()
	}
	return fmt.Sprintf("recovery: restart to /healthz answering %s; a killed broker's catch-up to the others' height %s; a wiped broker's rejoin %s\n"+
		"%d planned faults left out: recoveries ran past the time the schedule allowed\n",
		spread(serve), spread(catchUp), spread(rebuild), skipped)
}

// slowStart is the time to /healthz past which injectFaults logs where the
// restarted brokers spent it (the median is about 0.15 s).
const slowStart = time.Second

// logStartPhases logs the lines each of nodes logged while opening its
// state at its latest start, each with how long its step took
// (harness.StartPhases), so that a slow restart in a long run says where
// its time went.
func logStartPhases(c *harness.Cluster, nodes []int) {
	for _, i := range nodes {
		for _, l := range c.StartLines(i, harness.StartPhases...) {
			c.T.Logf("node%d: %s", i, l)
		}
	}
}

// clockWatch checks the block times of the heights committed while one
// broker's clock was off.
type clockWatch struct {
	from int64 // the first height committed with the clock off
	node int
	off  time.Duration
}

// check fails the test if a block committed since the fault began, read
// from honest broker i, is stamped later than the harness's clock when
// the fault ended (5 s of slack): a clock running ahead is what could push
// block time forward. The lower side is not checked here: a block carries
// the median time of its predecessor's precommits (BFT time), so after a
// stall or while brokers replay (the previous fault may have been a
// kill-all) the blocks of the span can carry times from before it.
// test/cluster's TestClockOffset checks both sides on a quiet cluster.
func (w clockWatch) check(c *harness.Cluster, i int) {
	c.T.Helper()
	t1 := time.Now()
	to := c.MaxHeight(i)
	if to < w.from {
		return
	}
	headers, err := c.BlockHeaders(i, w.from, to)
	if err != nil {
		c.T.Errorf("clock fault: %v", err)
		return
	}
	for h := w.from; h <= to; h++ {
		if bt := headers[h].Time; bt.After(t1.Add(5 * time.Second)) {
			c.T.Errorf("clock fault: height %d is stamped %s, after %s when the fault ended (node%d's clock %v off)",
				h, bt.Format(time.StampMilli), t1.Format(time.StampMilli), w.node, w.off)
		}
	}
}

// corrupt kills broker i and damages the active segment of one partition
// of sendTopic (the first, from variant on, that holds a batch): a byte of
// a batch flipped, or the file cut in the middle of a batch. Restarted on
// it, the broker must exit with an error without ever answering /healthz:
// recovery finds a committed batch damaged or gone ("the log lost
// acknowledged data"). It is then wiped, to be restarted empty.
func corrupt(c *harness.Cluster, i int, variant uint32) {
	c.Kill9(i)
	var what string
	for k := range uint32(sendParts) {
		dir := filepath.Join(c.Nodes[i].Dir, "logs", fmt.Sprintf("%s-%d", sendTopic, (variant+k)%sendParts))
		segs := harness.SegmentFiles(c.T, dir)
		active := segs[len(segs)-1]
		batches := harness.SegmentBatches(c.T, active)
		if len(batches) == 0 {
			continue
		}
		b := batches[int(variant/2)%len(batches)]
		if variant%2 == 0 {
			data, err := os.ReadFile(active)
			if err != nil {
				c.T.Fatal(err)
			}
			data[b.Pos+b.Size-1] ^= 0x40 // the last byte of the batch's last record
			if err := os.WriteFile(active, data, 0o644); err != nil {
				c.T.Fatal(err)
			}
			what = fmt.Sprintf("flipped a byte of the batch at offset %d in %s", b.Base, active)
		} else {
			if err := os.Truncate(active, b.Pos+b.Size/2); err != nil {
				c.T.Fatal(err)
			}
			what = fmt.Sprintf("cut %s in the middle of the batch at offset %d", active, b.Base)
		}
		break
	}
	if what == "" {
		c.T.Logf("node%d holds no batch of %s yet: nothing damaged", i, sendTopic)
	} else {
		c.T.Logf("%s node%d: %s", harness.Clock(), i, what)
		c.Launch(i)
		exitErr, served := c.WatchUntilExit(i, time.Minute)
		if served || exitErr == nil {
			c.T.Errorf("node%d started on a damaged log (%s): served /healthz %v, exit %v; it must refuse", i, what, served, exitErr)
		}
	}
	c.Wipe(i)
}

// tamper restarts broker i from the stelebyzantine build reporting a wrong
// app hash from 20 heights on, as a broker whose stored state was altered
// would; CometBFT must find the committed blocks invalid for it and the
// broker exit non-zero instead of serving what it holds. It is then wiped,
// to be restarted empty and honest.
func tamper(c *harness.Cluster, i int, rest []int) {
	n := c.Nodes[i]
	c.Kill9(i)
	at := c.MaxHeight(rest...) + 20
	n.Bin, n.Env = harness.ByzantineBin(c.T), []string{fmt.Sprintf("STELE_BYZANTINE=diverge-at=%d", at)}
	c.Launch(i)
	c.T.Logf("%s node%d restarted with its state diverging at height %d", harness.Clock(), i, at)
	if exitErr, _ := c.WatchUntilExit(i, 3*time.Minute); exitErr == nil {
		c.T.Errorf("node%d exited with status 0 after its state diverged; want non-zero", i)
	}
	n.Bin, n.Env = "", nil
	c.Wipe(i)
}

// runSeed is -chaos.seed, else STELE_CHAOS_SEED, else the time.
func runSeed(t *testing.T) uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if s := os.Getenv("STELE_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STELE_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// finish stops the producers, waits until no transaction is open, reads
// the final state from node0, lets the assigned consumers read all of it,
// stops them, and requires every broker to hold the same committed and
// aborted records and one app hash.
func (w *workload) finish(t *testing.T, c *harness.Cluster) Final {
	w.stopProduce()
	w.producers.Wait()
	waitNoOpenTransactions(t, w.seeds)
	// node0's files are read directly: it must first hold every block the
	// others had once the writes stopped, or a lagging node0 (a fault just
	// ended) reports the newest acknowledged records lost.
	c.WaitCaughtUp(time.Minute, 0, c.All()[1:]...)
	final := readFinal(t, c, 0)
	c.Eventually(90*time.Second, "the assigned consumers and both share groups' members read every committed record", func() error { return w.caughtUp(final) })
	w.stopAll()
	w.consumers.Wait()
	for _, i := range c.All()[1:] {
		if other := readFinal(t, c, i); !sameFinal(final, other) {
			t.Errorf("node%d's committed log differs from node0's", i)
		}
	}
	c.CheckAppHashes(time.Minute, c.All()...)
	return final
}

// others returns the brokers not in nodes.
func others(c *harness.Cluster, nodes []int) []int {
	var out []int
	for _, i := range c.All() {
		if !slices.Contains(nodes, i) {
			out = append(out, i)
		}
	}
	return out
}

// spread prints the median and maximum of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %v, max %v over %d", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// waitNoOpenTransactions waits until no transaction is ongoing (one a
// replaced client left open ends by its 10 s timeout), so that the final
// state has no undecided records.
func waitNoOpenTransactions(t *testing.T, seeds []string) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		req := kmsg.NewPtrListTransactionsRequest()
		req.StateFilters = []string{"Ongoing"}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		shards := cl.RequestSharded(ctx, req)
		cancel()
		open := 0
		for _, s := range shards {
			if s.Err == nil {
				open += len(s.Resp.(*kmsg.ListTransactionsResponse).TransactionStates)
			}
		}
		if open == 0 && len(shards) > 0 && shards[0].Err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions still open a minute after the producers stopped", open)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readFinal reads both topics from node i as stored, resolved by their
// transaction markers (harness.CommittedLog).
func readFinal(t *testing.T, c *harness.Cluster, i int) Final {
	f := Final{Committed: map[TP]map[int64]string{}, Aborted: map[string]bool{}}
	for topic, n := range map[string]int32{sendTopic: sendParts, txnTopic: txnParts} {
		for p := range n {
			var committed, aborted map[int64]string
			c.Eventually(30*time.Second, fmt.Sprintf("node%d's log of %s-%d", i, topic, p), func() error {
				var err error
				committed, aborted, err = c.CommittedLog(i, topic, p)
				return err
			})
			f.Committed[TP{Topic: topic, Partition: p}] = committed
			for _, v := range aborted {
				f.Aborted[v] = true
			}
		}
	}
	return f
}

// checkView checks the view of both topics on every broker
// (docs/subjects.md): it holds every committed record whose subject
// matches its pattern once, none other, each source partition's in their
// order there, and the same on every broker.
func checkView(t *testing.T, c *harness.Cluster, final Final) {
	t.Helper()
	where := map[string]place{} // value -> where its source record is
	for tp, offs := range final.Committed {
		for off, v := range offs {
			if strings.HasSuffix(chaosSubject(v), ".7") {
				where[v] = place{tp, off}
			}
		}
	}
	var first []string
	for _, i := range c.All() {
		var view map[int64]string
		c.Eventually(30*time.Second, fmt.Sprintf("node%d's view", i), func() error {
			var err error
			view, _, err = c.CommittedLog(i, viewTopic, 0)
			return err
		})
		seq := make([]string, 0, len(view))
		for _, off := range slices.Sorted(maps.Keys(view)) {
			seq = append(seq, view[off])
		}
		seen := map[string]bool{}
		last := map[TP]int64{}
		for _, v := range seq {
			p, ok := where[v]
			switch {
			case seen[v]:
				t.Errorf("node%d's view holds %q twice", i, v)
			case !ok:
				t.Errorf("node%d's view holds %q, which is no committed record matching %s", i, v, viewOf)
			case p.off < last[p.tp]:
				t.Errorf("node%d's view holds %q (%s) after a later record of %v", i, v, p, p.tp)
			}
			seen[v] = true
			if ok {
				last[p.tp] = p.off + 1
			}
		}
		if len(seen) != len(where) {
			t.Errorf("node%d's view holds %d of the %d committed records matching %s", i, len(seen), len(where), viewOf)
		}
		if first == nil {
			first = seq
			t.Logf("the view %s holds the %d committed records of %s and %s matching %s, each source partition's in order, on every broker", viewTopic, len(seq), sendTopic, txnTopic, viewOf)
		} else if !slices.Equal(seq, first) {
			t.Errorf("node%d's view differs from node%d's", i, c.All()[0])
		}
	}
}

func sameFinal(a, b Final) bool {
	if !maps.Equal(a.Aborted, b.Aborted) || len(a.Committed) != len(b.Committed) {
		return false
	}
	for tp, offs := range a.Committed {
		if !maps.Equal(offs, b.Committed[tp]) {
			return false
		}
	}
	return true
}

// TestCheckFile rechecks a history written by a run (-chaos.history FILE);
// without the flag it is skipped.
func TestCheckFile(t *testing.T) {
	if *out == "" {
		t.Skip("no -chaos.history file given")
	}
	h, f, err := ReadFile(*out)
	if err != nil {
		t.Fatal(err)
	}
	report := Check(h, f)
	t.Log(report.Summary())
	if !report.OK() {
		t.Error("anomalies found")
	}
}

// TestSchedule: a schedule depends on its seed alone, keeps to the run's
// length and the kinds asked for, and names the brokers each kind needs.
func TestSchedule(t *testing.T) {
	a, err := Schedule(7, 10*time.Minute, 4*time.Second, 8*time.Second, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Schedule(7, 10*time.Minute, 4*time.Second, 8*time.Second, 4, nil)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("the same seed gave two schedules")
	}
	if c, _ := Schedule(8, 10*time.Minute, 4*time.Second, 8*time.Second, 4, nil); fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
	seen := map[string]int{}
	var last time.Duration
	for _, p := range a {
		seen[p.Kind]++
		if p.At < last || p.At+p.For > 10*time.Minute || p.For < 2*time.Second || p.For > 8*time.Second {
			t.Fatalf("fault %s: overlaps the previous (which ended at %v) or leaves the run", p, last)
		}
		last = p.At + p.For
		want := map[string]int{FaultKill: 1, FaultPause: 1, FaultIsolate: 1, FaultOneWay: 1, FaultSplit: 2, FaultKillAll: 4, FaultByzantine: 1, FaultCorrupt: 1, FaultTamper: 1, FaultClock: 1, FaultMembership: 1}[p.Kind]
		if p.Kind == FaultPowerCut && (len(p.Nodes) == 1 || len(p.Nodes) == 4) {
			want = len(p.Nodes)
		}
		if len(p.Nodes) != want || !sort.IntsAreSorted(p.Nodes) || p.Nodes[len(p.Nodes)-1] > 3 {
			t.Fatalf("fault %s: nodes %v", p, p.Nodes)
		}
	}
	for _, k := range FaultKinds() {
		if seen[k] == 0 {
			t.Errorf("no %s fault in ten minutes: %v", k, seen)
		}
	}
	only, _ := Schedule(7, 5*time.Minute, 4*time.Second, 8*time.Second, 4, []string{FaultPause})
	for _, p := range only {
		if p.Kind != FaultPause {
			t.Fatalf("asked for pauses only, got %s", p)
		}
	}
	if _, err := Schedule(7, time.Minute, time.Second, 8*time.Second, 4, []string{"meteor"}); err == nil {
		t.Fatal("an unknown fault kind was accepted")
	}
}

// clientOpts are added to every client of the workload: TLS and SASL
// under -chaos.secure, none otherwise.
var clientOpts []kgo.Opt

// secureAdminPassword is the admin's password of a -chaos.secure cluster.
const secureAdminPassword = "chaos-admin-secret"

// secureClientOpts connects over the cluster's TLS (its CA) and logs in
// as the admin with SCRAM-SHA-512: the super user, so the ACLs allow the
// workload everything, while every connection still authenticates.
func secureClientOpts(t *testing.T, caFile string) []kgo.Opt {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	return []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
		kgo.SASL(scram.Auth{User: "admin", Pass: secureAdminPassword}.AsSha512Mechanism())}
}

// rejoinBound is how long a broker that starts with an empty state (wiped
// after corrupt or tamper, or added as a replica) may take to reach
// height, the others' height when it started. While its peers keep every
// block (the first --retain-blocks heights, 10,000 by default) it replays
// the chain from genesis, since state sync's auto mode is chosen only once
// they have pruned some (docs/cluster.md), so the time follows the chain:
// the hour-long run of 2026-12-06 (docs/reliability.md) rebuilt brokers at
// about 47 heights a second on the 2-core machine with the suite's slower
// fsyncs, 2 min 58.6 s at height 8,332. The bound is the 3 minutes that
// cover a short run's start and catch-up plus 30 heights a second of
// replay, so that a longer run, or a slower machine, fails on a broker
// that stopped catching up rather than on one still replaying.
func rejoinBound(height int64) time.Duration {
	return 3*time.Minute + time.Duration(max(height, 0)/30)*time.Second
}
