package merkle

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagSync   = flag.Bool("merkle.sync", true, "fsync every block's commit (Stele does)")
	flagStates = flag.String("merkle.states", "10k,1M", "state sizes to preload, comma-separated (k and M suffixes)")
	flagBlocks = flag.String("merkle.blocks", "10,100,1000", "updates per block, comma-separated")
	flagHot    = flag.String("merkle.hot-blocks", "10,100", "updates per block of the hot-key runs, comma-separated (empty: none)")
	flagStores = flag.String("merkle.stores", strings.Join(Kinds, ","), "candidates, comma-separated")
	flagDir    = flag.String("merkle.dir", "", "directory for the stores (default: a temporary one, removed at exit)")
	flagCache  = flag.Int("merkle.iavl-cache", 781250, "iavl node cache size in nodes (the Cosmos SDK's default)")
)

// TestMain removes the benchmark stores at exit.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	fixturesMu.Lock()
	for _, f := range fixtures {
		f.printTotals()
		for _, s := range f.stores {
			_ = s.Close()
		}
	}
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
	}
	fixturesMu.Unlock()
	os.Exit(code)
}

// A fixture is every candidate preloaded with the same state, fed the same
// blocks from then on: they stay open for the whole run so that -count
// repetitions go on from where the last one stopped.
type fixture struct {
	n      uint64
	names  []string
	stores []Store
	dirs   []string
	w      *Workload
	// what each store's Pebble had written when its preload ended
	wal0, lsm0 []uint64
}

var (
	fixturesMu sync.Mutex
	fixtures   = map[uint64]*fixture{}
	tmpDir     string
)

// printTotals prints what each store wrote after its preload, over the
// whole run: the WAL (the batches) and the LSM's flushes and compactions,
// whose ratio is the write amplification inside Pebble. Short benchmark
// runs flush few memtables; the total over the run is the steadier figure.
func (f *fixture) printTotals() {
	for j, s := range f.stores {
		wal, lsm := Written(s.DB())
		wal, lsm = wal-f.wal0[j], lsm-f.lsm0[j]
		disk, _ := DirSize(f.dirs[j])
		amp := 0.0
		if wal > 0 {
			amp = float64(lsm) / float64(wal)
		}
		fmt.Printf("totals state=%d store=%s: WAL %.1f MB, tables flushed+compacted %.1f MB (%.2f x WAL), on disk %.1f MB\n",
			f.n, f.names[j], float64(wal)/1e6, float64(lsm)/1e6, amp, float64(disk)/1e6)
	}
}

func parseSize(s string) uint64 {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1000, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1000000, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("merkle: bad size %q", s))
	}
	return n * mult
}

func list(s string) []string { return strings.Split(s, ",") }

// getFixture opens and preloads the stores for a state of n keys, once per
// process. The preload is 10,000 keys per block (one iavl version each);
// what it took and left is logged.
func getFixture(b *testing.B, n uint64) *fixture {
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	if f := fixtures[n]; f != nil {
		return f
	}
	root := *flagDir
	if root == "" {
		if tmpDir == "" {
			d, err := os.MkdirTemp("", "stele-merkle-bench-")
			if err != nil {
				b.Fatal(err)
			}
			tmpDir = d
		}
		root = tmpDir
	}
	f := &fixture{n: n, w: NewWorkload(uint64(n))}
	pre := f.w.Preload(int(n), 10000)
	for _, kind := range list(*flagStores) {
		dir := filepath.Join(root, fmt.Sprintf("%s-%d-sync%v", kind, n, *flagSync))
		_ = os.RemoveAll(dir)
		heap0 := liveHeap()
		start := time.Now()
		s, err := Open(kind, Options{Dir: dir, Sync: *flagSync, IAVLCacheNodes: *flagCache, KeepVersions: 100, PruneEvery: 10})
		if err != nil {
			b.Fatal(err)
		}
		for _, blk := range pre {
			if _, err := s.Apply(blk); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.AfterPreload(); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		if err := Settle(s.DB()); err != nil {
			b.Fatal(err)
		}
		disk, _ := DirSize(dir)
		b.Logf("preload state=%d store=%s: %.1f s, live heap +%.0f MB, on disk %.1f MB",
			n, kind, took.Seconds(), float64(liveHeap()-heap0)/1e6, float64(disk)/1e6)
		wal, lsm := Written(s.DB())
		f.wal0, f.lsm0 = append(f.wal0, wal), append(f.lsm0, lsm)
		f.names = append(f.names, kind)
		f.stores = append(f.stores, s)
		f.dirs = append(f.dirs, dir)
	}
	fixtures[n] = f
	return f
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkApply commits blocks of updates to every candidate in turn, the
// same block to each (the first to go rotates), so that the candidates'
// figures come from the same moments of the machine's load. One iteration
// is one block applied to every candidate; each candidate's own figures
// are reported as <store>-<unit>:
//
//	ns/block     Apply: the updates, the root, the commit (synced with -merkle.sync)
//	ns/update    the same per update
//	allocs/update, B/update   heap allocations of Apply
//	walB/block   bytes Pebble wrote to its WAL (the batch, framed)
//	lsmB/block   bytes of tables flushed and compacted meanwhile (write
//	             amplification in the LSM; lumpy over short runs)
//	diskMB       the store's directory after the run
//	x-pebble     ns/block divided by the plain Pebble baseline's
//
// keys=uniform blocks overwrite keys chosen uniformly over the whole state
// (and insert some): the worst case for every cache. keys=hot blocks
// overwrite keys of a hot set of HotKeys keys, as a produce load does
// (the end offsets and producer states of the partitions written to).
func BenchmarkApply(b *testing.B) {
	for _, st := range list(*flagStates) {
		n := parseSize(st)
		for _, bs := range list(*flagBlocks) {
			per := int(parseSize(bs))
			b.Run(fmt.Sprintf("state=%s/keys=uniform/block=%d", st, per), func(b *testing.B) {
				benchApply(b, getFixture(b, n), per, false)
			})
		}
		for _, bs := range list(*flagHot) {
			if bs == "" {
				continue
			}
			per := int(parseSize(bs))
			b.Run(fmt.Sprintf("state=%s/keys=hot/block=%d", st, per), func(b *testing.B) {
				benchApply(b, getFixture(b, n), per, true)
			})
		}
	}
}

func benchApply(b *testing.B, f *fixture, per int, hot bool) {
	k := len(f.stores)
	elapsed := make([]time.Duration, k)
	allocs, bytes := make([]uint64, k), make([]uint64, k)
	wal0, lsm0 := make([]uint64, k), make([]uint64, k)
	for j, s := range f.stores {
		wal0[j], lsm0[j] = Written(s.DB())
	}
	var m0, m1 runtime.MemStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var blk []KV
		if hot {
			blk = f.w.HotBlock(per)
		} else {
			blk = f.w.Block(per)
		}
		for r := range k {
			j := (i + r) % k
			runtime.ReadMemStats(&m0)
			t0 := time.Now()
			if _, err := f.stores[j].Apply(blk); err != nil {
				b.Fatal(err)
			}
			elapsed[j] += time.Since(t0)
			runtime.ReadMemStats(&m1)
			allocs[j] += m1.Mallocs - m0.Mallocs
			bytes[j] += m1.TotalAlloc - m0.TotalAlloc
		}
	}
	b.StopTimer()
	base := -1
	for j, name := range f.names {
		if name == "pebble" {
			base = j
		}
	}
	blocks, updates := float64(b.N), float64(b.N*per)
	for j, name := range f.names {
		wal, lsm := Written(f.stores[j].DB())
		disk, _ := DirSize(f.dirs[j])
		b.ReportMetric(float64(elapsed[j].Nanoseconds())/blocks, name+"-ns/block")
		b.ReportMetric(float64(elapsed[j].Nanoseconds())/updates, name+"-ns/update")
		b.ReportMetric(float64(allocs[j])/updates, name+"-allocs/update")
		b.ReportMetric(float64(bytes[j])/updates, name+"-B/update")
		b.ReportMetric(float64(wal-wal0[j])/blocks, name+"-walB/block")
		b.ReportMetric(float64(lsm-lsm0[j])/blocks, name+"-lsmB/block")
		b.ReportMetric(float64(disk)/1e6, name+"-diskMB")
		if base >= 0 && j != base {
			b.ReportMetric(float64(elapsed[j])/float64(elapsed[base]), name+"-x-pebble")
		}
	}
}

// BenchmarkProof proves a random present key and a random absent one in
// every tree, and verifies each proof against the root, reporting per tree
// <store>-ns/prove-in, -ns/verify-in, -B/proof-in (membership) and the same
// with -out (absence). The proof's size is the library's own encoding:
// ICS-23 protobuf for iavl, the gob-encoded compact proof for the SMT.
func BenchmarkProof(b *testing.B) {
	for _, st := range list(*flagStates) {
		n := parseSize(st)
		b.Run("state="+st, func(b *testing.B) { benchProof(b, getFixture(b, n)) })
	}
}

func benchProof(b *testing.B, f *fixture) {
	type acc struct {
		prove, verify [2]time.Duration
		size          [2]int
	}
	var trees []int
	for j, name := range f.names {
		if name != "pebble" {
			trees = append(trees, j)
		}
	}
	roots := make([][]byte, len(f.stores))
	// Apply one block so that every store has a root and the iavl proof
	// tree is the latest version.
	blk := f.w.Block(10)
	for _, j := range trees {
		r, err := f.stores[j].Apply(blk)
		if err != nil {
			b.Fatal(err)
		}
		roots[j] = r
	}
	accs := make([]acc, len(f.stores))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, present := f.w.ExistingKey()
		keys := [2][]byte{present, absentKey(uint64(i))}
		for r := range trees {
			j := trees[(i+r)%len(trees)]
			s := f.stores[j]
			want, err := s.Get(present)
			if err != nil || want == nil {
				b.Fatalf("%s: Get(%q) = %x, %v", f.names[j], present, want, err)
			}
			for kind, key := range keys {
				val := want
				if kind == 1 {
					val = nil
				}
				t0 := time.Now()
				p, err := s.Prove(key)
				t1 := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Verify(roots[j], key, val); err != nil {
					b.Fatalf("%s: %v", f.names[j], err)
				}
				t2 := time.Now()
				a := &accs[j]
				a.prove[kind] += t1.Sub(t0)
				a.verify[kind] += t2.Sub(t1)
				a.size[kind] += p.Size()
			}
		}
	}
	b.StopTimer()
	for _, j := range trees {
		a, name := accs[j], f.names[j]
		for kind, suffix := range []string{"in", "out"} {
			b.ReportMetric(float64(a.prove[kind].Nanoseconds())/float64(b.N), name+"-ns/prove-"+suffix)
			b.ReportMetric(float64(a.verify[kind].Nanoseconds())/float64(b.N), name+"-ns/verify-"+suffix)
			b.ReportMetric(float64(a.size[kind])/float64(b.N), name+"-B/proof-"+suffix)
		}
	}
}
