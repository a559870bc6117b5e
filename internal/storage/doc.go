// Package storage keeps partition logs in Kafka's on-disk layout, and the
// Pebble store for metadata (Store).
//
// # Layout
//
// A partition is a directory (DATA/logs/orders-0/) of segments. A segment
// is named by its base offset, the first offset it may hold, in 20 digits:
//
//	00000000000000000000.log        RecordBatch v2 (magic 2) batches, back to
//	                                back, exactly as Append got them and as
//	                                Fetch returns them
//	00000000000000000000.index      offset index: 8-byte entries, the batch's
//	                                last offset minus the base offset (uint32
//	                                big-endian), then the batch's byte position
//	                                in the .log (uint32 big-endian)
//	00000000000000000000.timeindex  time index: 12-byte entries, a timestamp
//	                                (int64 big-endian), then an offset minus
//	                                the base offset (uint32 big-endian)
//
// The indexes are sparse and follow Kafka's rules (see indexer): a batch
// starting more than index.interval.bytes after the last indexed one gets an
// offset index entry, and the time index then records the largest timestamp
// so far with the last offset of the first batch that reached it, whenever
// that timestamp grew; a sealed segment's time index ends with its largest
// timestamp. Entries are appended, never preallocated (Kafka preallocates
// and mmaps); the active segment's entries are also kept in memory and
// written to the files lazily (on Sync, roll and Close), since OpenLog
// rebuilds the active segment's indexes anyway.
//
// Segments are contiguous: a sealed segment's last batch ends just before
// the next segment's base offset. Compaction keeps this true by keeping the
// last batch of a segment as an empty batch when all its records go.
//
// While compaction rewrites a segment, transient files appear beside it:
// NNN.log.cleaned, NNN.index.cleaned, NNN.timeindex.cleaned while being
// written, then .swap once committed (see Log.Compact); compaction.plan
// holds a pass prepared and not yet finished (Log.PrepareCompaction). Other files in the
// directory (partition.metadata, ...) are not this package's and are left
// alone.
//
// # Determinism
//
// Every broker applies the same blocks, so every decision here is made from
// replicated inputs only: the batches, the LogConfig, and the block time
// passed in by the caller. Nothing reads the wall clock or file times.
// Rolls, indexes and compaction output are functions of those inputs.
//
// # Durability
//
// Append writes to the page cache; Sync makes the log durable. A segment is
// fsynced when it is sealed, so after a crash only the last segment can have
// a torn tail, which OpenLog cuts. Sync fsyncs only the active segment's
// .log: OpenLog rebuilds that segment's indexes from it after any stop, so
// their files are fsynced only when the segment is sealed (as Kafka, which
// flushes indexes at a roll and rebuilds the active ones on recovery).
// Corruption elsewhere is reported, not repaired.
//
// # Concurrency
//
// One goroutine (the state machine's applier) mutates a Log, and one
// compaction pass at a time may rewrite its sealed segments beside it (see
// Log for the locks); any number of goroutines read it. Readers take a picture of the segments under a
// read lock, pin their files with a reference count, and read without the
// lock, so neither appends nor compaction wait for a reader's I/O.
package storage
