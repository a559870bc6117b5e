package topics

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/storage"
)

// The topics module's files in a snapshot (snapshot.go): the partition
// directories, Dir/logs/<topic>-<partition>, shipped as
//
//	logs/<topic>-<partition>/<20-digit offset>.log, .index, .timeindex
//	logs/<topic>-<partition>/partition.metadata
//
// CaptureSnapshot pins every partition log at its committed end
// (storage.Log.Pin) after waiting for the compactions in flight, so that
// every broker ships the compacted files; BuildSnapshot writes the pinned
// files and a fresh partition.metadata. A restoring broker accepts under
// logs/ only the paths checkLogPath lets through; the files' bytes are
// checked against the snapshot's chunk hashes only (snapshot_restore.go),
// and Open (loadTopics) opens each log and cuts it back to the committed
// end the restored state gives.

// registerTopicSnapshot registers the partition logs as the topics'
// snapshot files (RegisterTopics calls it).
func registerTopicSnapshot(r *core.Registry) {
	core.RegisterModuleSnapshotFiles(r, topicsOf, core.ModuleSnapshotFiles[*Topics]{Rank: 10, Name: "partition logs", Module: ModTopics, Dir: "logs",
		Capture: captureLogs, CheckPath: checkLogPath})
}

// capturedPartition is one partition's pinned log.
type capturedPartition struct {
	dir string // logs/<topic>-<partition>
	id  core.TopicID
	pin *storage.LogPin
}

// captureLogs waits for the compactions in flight and pins every
// partition's log, in the order of the topics' names.
func captureLogs(f *Topics) ([]core.CapturedFiles, error) {
	// Every broker must capture the same files: the compacted ones.
	if err := f.WaitCompactions(); err != nil {
		return nil, f.Faulted(err)
	}
	var parts []core.CapturedFiles
	for _, name := range SortedNames(f.ByName) {
		t := f.ByName[name]
		for _, p := range t.Partitions {
			pin, err := p.Log.Pin()
			if err != nil {
				return parts, fmt.Errorf("stele/fsm: snapshot of %s-%d: %w", t.Name, p.Index, err)
			}
			part := "logs/" + filepath.Base(f.partitionDir(t.Name, p.Index))
			parts = append(parts, &capturedPartition{dir: part, id: t.ID, pin: pin})
		}
	}
	return parts, nil
}

// Materialise writes the pinned files and the partition.metadata file of
// the partition's directory under root.
func (p *capturedPartition) Materialise(root string) ([]core.SnapFile, error) {
	dst := filepath.Join(root, filepath.FromSlash(p.dir))
	if err := p.pin.WriteTo(dst); err != nil {
		return nil, err
	}
	var files []core.SnapFile
	for _, f := range p.pin.Files() {
		files = append(files, core.SnapFile{Path: p.dir + "/" + f.Name, Size: f.Size})
	}
	if err := writePartitionMetadata(dst, p.id); err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	fi, err := os.Stat(filepath.Join(dst, "partition.metadata"))
	if err != nil {
		return nil, fmt.Errorf("stele/fsm: snapshot: %w", err)
	}
	return append(files, core.SnapFile{Path: p.dir + "/partition.metadata", Size: fi.Size()}), nil
}

func (p *capturedPartition) Release() { p.pin.Release() }

// checkLogPath says what is wrong with a path under logs/ of a peer's
// snapshot ("" if nothing): it must be <topic>-<partition>/<file>, with a
// valid topic name, a partition number below MaxPartitions written without
// leading zeros, and a segment file or partition.metadata.
func checkLogPath(rest string) string {
	parts := strings.Split(rest, "/")
	if len(parts) != 2 {
		return "not logs/<partition>/<file>"
	}
	i := strings.LastIndexByte(parts[0], '-')
	if i < 0 {
		return "partition directory is not <topic>-<partition>"
	}
	if ValidStateTopicName(parts[0][:i]) != nil {
		return "invalid topic name"
	}
	if n, err := strconv.ParseUint(parts[0][i+1:], 10, 31); err != nil || n >= MaxPartitions || strconv.FormatUint(n, 10) != parts[0][i+1:] {
		return "invalid partition number"
	}
	if name := parts[1]; name != "partition.metadata" && !isSegmentFileName(name) {
		return "not a segment file or partition.metadata"
	}
	return ""
}

// isSegmentFileName reports whether name is a 20-digit offset and .log,
// .index or .timeindex.
func isSegmentFileName(name string) bool {
	if len(name) <= 20 {
		return false
	}
	for _, c := range name[:20] {
		if c < '0' || c > '9' {
			return false
		}
	}
	switch name[20:] {
	case ".log", ".index", ".timeindex":
		return true
	}
	return false
}
