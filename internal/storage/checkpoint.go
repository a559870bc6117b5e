package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
)

// ErrCheckpointExists is returned by Log.Checkpoint and Store.Checkpoint
// when the destination already exists: a checkpoint never overwrites one.
var ErrCheckpointExists = errors.New("stele/storage: checkpoint destination exists")

// CheckpointFile is one file of a log checkpoint.
type CheckpointFile struct {
	// Name is the file's name in the checkpoint directory (the segment's
	// name in the log: 20 digits and .log, .index or .timeindex).
	Name string
	// Size is how many bytes of the file belong to the checkpoint. A file
	// linked from the active segment keeps growing as the log appends to
	// it; read it only up to Size.
	Size int64
}

// LogPin is a picture of a log taken by Pin: its segment files as they are
// at that moment, held open so that what later happens to the log
// (appends, rolls, compaction, deletion) cannot take them away, until
// WriteTo puts them in a directory of their own. Release lets them go.
//
// A sealed segment's files never change again under their inode
// (compaction writes a new file and renames it over the old name;
// retention and topic deletion unlink the name), and the active segment's
// .log only grows past the size recorded (Append writes at the end;
// TruncateTo cuts only what was never committed, which lies past any size
// recorded between commits). So the pinned inodes, read up to the recorded
// sizes, are the log as it was.
type LogPin struct {
	segs     []*segment // referenced until Release
	files    []pinnedFile
	released bool
}

type pinnedFile struct {
	CheckpointFile
	path string   // the file's name in the log
	f    *os.File // the pinned file, or nil when data holds the contents
	data []byte
}

// Pin takes a LogPin of the log. It must be called by the applier,
// between commits, so that the sizes are those of committed data; it costs
// no I/O (references and a copy of the active segment's index entries), so
// the applier is not held up however large the log.
func (l *Log) Pin() (*LogPin, error) {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	p := &LogPin{}
	segs := l.mu.segs
	for i, s := range segs {
		s.ref()
		p.segs = append(p.segs, s)
		name := filepath.Base(s.path)
		p.files = append(p.files, pinnedFile{CheckpointFile{name + logSuffix, s.size}, s.path + logSuffix, s.log, nil})
		if i < len(segs)-1 {
			p.files = append(p.files,
				pinnedFile{CheckpointFile{name + indexSuffix, int64(s.ix.nOffs) * offsetEntrySize}, s.path + indexSuffix, s.offIdx, nil},
				pinnedFile{CheckpointFile{name + timeIndexSuffix, int64(s.ix.nTimes) * timeEntrySize}, s.path + timeIndexSuffix, s.timeIdx, nil})
			continue
		}
		// The active segment's index files are written lazily and
		// rewritten in place when the index settings change: its entries
		// are copied from memory instead.
		offs := append([]byte{}, s.ix.offs[:s.ix.nOffs*offsetEntrySize]...)
		times := append([]byte{}, s.ix.times[:s.ix.nTimes*timeEntrySize]...)
		p.files = append(p.files,
			pinnedFile{CheckpointFile{name + indexSuffix, int64(len(offs))}, "", nil, offs},
			pinnedFile{CheckpointFile{name + timeIndexSuffix, int64(len(times))}, "", nil, times})
	}
	return p, nil
}

// Files lists the pinned files in offset order (each segment's .log, then
// .index, then .timeindex).
func (p *LogPin) Files() []CheckpointFile {
	out := make([]CheckpointFile, len(p.files))
	for i, f := range p.files {
		out[i] = f.CheckpointFile
	}
	return out
}

// WriteTo puts the pinned files into dir, which it creates and which must
// not exist yet, named as Files says. A file whose name in the log still
// refers to the pinned inode is hard-linked (no data is copied; a linked
// active segment keeps growing past Size, so read it only up to Size);
// otherwise (compacted or deleted since) the pinned file's first Size bytes
// are copied. Nothing is fsynced (see SyncTree). It may run on any
// goroutine, before Release.
func (p *LogPin) WriteTo(dir string) error {
	if p.released {
		return ErrClosed
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("%w: %s", ErrCheckpointExists, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("stele/storage: checkpoint: %w", err)
	}
	for _, f := range p.files {
		dst := filepath.Join(dir, f.Name)
		var err error
		if f.f == nil {
			err = os.WriteFile(dst, f.data, 0o644)
		} else {
			err = linkOrCopy(f.path, f.f, f.Size, dst)
		}
		if err != nil {
			return fmt.Errorf("stele/storage: checkpoint: %w", err)
		}
	}
	return nil
}

// Release lets the pinned files go. It may be called more than once.
func (p *LogPin) Release() {
	if p.released {
		return
	}
	p.released = true
	for _, s := range p.segs {
		s.unref()
	}
}

// linkOrCopy makes dst the file pinned as f: a hard link to path if path
// is still that file, else a copy of its first size bytes.
func linkOrCopy(path string, f *os.File, size int64, dst string) error {
	pinned, err := f.Stat()
	if err != nil {
		return err
	}
	if err := os.Link(path, dst); err == nil {
		if linked, err := os.Stat(dst); err == nil && os.SameFile(pinned, linked) {
			return nil
		}
		if err := os.Remove(dst); err != nil {
			return err
		}
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(f, 0, size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// Checkpoint is Pin, WriteTo(dir) and Release in one: the log as it is
// now, in dir. Like Pin it is for the applier, between commits; unlike Pin
// it does the file work while holding the applier up.
func (l *Log) Checkpoint(dir string) ([]CheckpointFile, error) {
	p, err := l.Pin()
	if err != nil {
		return nil, err
	}
	defer p.Release()
	if err := p.WriteTo(dir); err != nil {
		return nil, err
	}
	return p.Files(), nil
}

// Checkpoint writes a consistent copy of the store to dir, which must not
// exist yet: Pebble's checkpoint, which hard-links the immutable table
// files and copies the manifest and the write-ahead log (flushed and synced
// first). Writes committed before the call are in it; writes racing it may
// or may not be. Open the copy with ScanStoreDir.
func (s *Store) Checkpoint(dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("%w: %s", ErrCheckpointExists, dir)
	}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("stele/storage: store checkpoint: %w", err)
	}
	return nil
}

// ScanStoreDir opens the store in dir (a Store.Checkpoint copy) read-only
// and calls fn for every key in ascending order, stopping at the first
// error fn returns. k and v are only valid during the call.
func ScanStoreDir(dir string, fn func(k, v []byte) error) error {
	s, err := OpenStoreReadOnly(dir)
	if err != nil {
		return err
	}
	err = s.Scan(nil, fn)
	return errors.Join(err, s.Close())
}

// OpenStoreReadOnly opens the store in dir (a Store.Checkpoint copy)
// read-only: Get and Scan work, writes fail.
func OpenStoreReadOnly(dir string) (*Store, error) {
	opts := &pebble.Options{ReadOnly: true, Logger: quietLogger{}, Cache: pebble.NewCache(8 << 20)}
	defer opts.Cache.Unref()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("stele/storage: opening store checkpoint %s: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// SyncTree fsyncs every regular file and directory under root (root
// included), making a directory tree that was written without syncing
// durable.
func SyncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("stele/storage: %w", err)
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("stele/storage: fsync %s: %w", path, err)
		}
		return nil
	})
}
