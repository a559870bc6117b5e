package topics

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/stele-io/stele/internal/storage"
)

// The topics module's work on its files around Commit: the block's
// partition logs fsynced before its state is written, the deletions and
// compactions it decided run after, and the logs closed with the state
// machine.

// syncLogs fsyncs every partition log the block wrote to, concurrently:
// the disk takes several flushes at once in about the time of one, and a
// block that wrote to many partitions would otherwise wait for each in turn.
// Which file is flushed first changes nothing in the state.
func (f *Topics) syncLogs() error {
	parts := make([]*Partition, 0, len(f.dirtyParts))
	for p := range f.dirtyParts {
		parts = append(parts, p)
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Log.Sync(); err != nil {
				errs[i] = fmt.Errorf("stele/fsm: sync %s-%d: %w", p.Topic, p.Index, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// afterCommit runs the destructive file operations decided by the committed
// block. Every one is attempted; the failures are returned (a local fault:
// the broker stops, and Open redoes these steps, since the state already
// says what the files must look like).
func (f *Topics) afterCommit() error {
	var errs []error
	for _, t := range f.deleted {
		for _, p := range t.Partitions {
			if err := p.Log.Remove(); err != nil {
				errs = append(errs, fmt.Errorf("removing deleted partition %s-%d: %w", t.Name, p.Index, err))
			}
		}
	}
	for p := range f.dirtyParts {
		errs = append(errs, f.settleFiles(p))
	}
	return errors.Join(errs...)
}

// settleFiles brings a partition's files in line with its committed state:
// segments below the log start offset are deleted, and a decided compaction
// is planned and started in the background. Open calls it for every
// partition.
func (f *Topics) settleFiles(p *Partition) error {
	if p.Start > p.Log.BaseOffset() {
		if _, err := p.Log.DeleteSegmentsBefore(p.Start); err != nil {
			return fmt.Errorf("deleting segments of %s-%d: %w", p.Topic, p.Index, err)
		}
	}
	if p.pendingCompact {
		p.pendingCompact = false
		if err := f.planCompaction(p, f.compactOptions(p)); err != nil {
			return err
		}
	}
	return nil
}

// planCompaction fixes the decided pass of p (its plan written durably) and
// starts it in the background (compactor.go).
func (f *Topics) planCompaction(p *Partition, opts storage.CompactOptions) error {
	pass, err := p.Log.PrepareCompaction(opts)
	if err != nil {
		return fmt.Errorf("planning the compaction of %s-%d: %w", p.Topic, p.Index, err)
	}
	f.startCompaction(p, pass)
	return nil
}

// forgetTopics forgets the committed block's changes to the topics.
func forgetTopics(f *Topics) {
	clear(f.DirtyTopics)
	clear(f.dirtyParts)
	clear(f.leafRefs)
	f.leafRefs = f.leafRefs[:0]
	f.deleted = f.deleted[:0]
}

// closeTopics closes the logs, which stops the compactions in flight, and
// waits for their goroutines.
func closeTopics(f *Topics) {
	f.CloseLogs()
	f.Compactor.Wg.Wait()
}

func (f *Topics) CloseLogs() {
	for _, name := range SortedNames(f.ByName) {
		for _, p := range f.ByName[name].Partitions {
			if p.Log != nil { // nil when Open failed before reaching it
				p.Log.Close()
			}
		}
	}
}

func SortedNames(m map[string]*Topic) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
