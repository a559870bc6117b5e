package storage

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// Readers run against one appender (with rolls), then against retention
// and compaction; every answer must be whole, valid batches below the high
// watermark, and while only appends run, exactly the batches appended.
// Run with -race.
func TestConcurrentReadersAndApplier(t *testing.T) {
	l, _ := testLog(t, LogConfig{SegmentBytes: 3000, IndexIntervalBytes: 128})
	const total = 300
	batches := make([][]byte, total) // batch i holds offsets 2i, 2i+1
	for i := range batches {
		batches[i] = mkBatch(t, int64(2*i), []rec{
			kv(fmt.Sprint("k", i%10), fmt.Sprint("v", i), int64(i)),
			kv(fmt.Sprint("k", (i+5)%10), fmt.Sprint("w", i), int64(i)),
		})
	}
	var hw atomic.Int64 // the committed end readers may see
	var phase2 atomic.Bool
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for !stop.Load() {
				if err := readCheck(l, rng, &hw, batches, &phase2); err != nil {
					errs <- err
					return
				}
			}
		}(uint64(r))
	}
	for i, b := range batches {
		if err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			// A batch appended and never committed: cut on restart.
			stray := mkBatch(t, int64(2*i+2), []rec{kv("stray", "x", 0)})
			if err := l.Append(stray, 0); err != nil {
				t.Fatal(err)
			}
			if err := l.TruncateTo(int64(2*i + 2)); err != nil {
				t.Fatal(err)
			}
		}
		hw.Store(int64(2*i + 2))
	}
	phase2.Store(true)
	if _, err := l.DeleteSegmentsBefore(100); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Compact(0); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// readCheck reads a random range and checks it. phase2 says retention and
// compaction may have run; it is read after the read, since they may start
// while it is in progress (a read begun before is then judged as relaxed).
func readCheck(l *Log, rng *rand.Rand, hw *atomic.Int64, batches [][]byte, phase2 *atomic.Bool) error {
	upTo := hw.Load()
	if upTo == 0 {
		return nil
	}
	off := rng.Int64N(upTo)
	b, err := l.Read(off, 1+rng.IntN(2000), upTo)
	relaxed := phase2.Load()
	if relaxed && errors.Is(err, ErrOffsetOutOfRange) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("Read(%d, _, %d): %w", off, upTo, err)
	}
	split, err := record.Split(b)
	if err != nil || len(split) == 0 {
		return fmt.Errorf("Read(%d): %d bytes, %d batches, %v", off, len(b), len(split), err)
	}
	prev := int64(-1)
	for _, x := range split {
		h, err := record.CheckCRC(x)
		if err != nil {
			return fmt.Errorf("Read(%d): %w", off, err)
		}
		if h.BaseOffset >= upTo || h.BaseOffset <= prev || (prev < 0 && h.LastOffset() < off) {
			return fmt.Errorf("Read(%d, _, %d): batch [%d, %d] out of place", off, upTo, h.BaseOffset, h.LastOffset())
		}
		prev = h.LastOffset()
		if !relaxed && string(x) != string(batches[h.BaseOffset/2]) {
			return fmt.Errorf("Read(%d): batch at %d differs from the one appended", off, h.BaseOffset)
		}
	}
	if _, _, _, err := l.OffsetForTimestamp(rng.Int64N(400), upTo); err != nil {
		return err
	}
	if _, _, err := l.MaxTimestamp(upTo); err != nil {
		return err
	}
	_ = l.Segments()
	return nil
}
