package storage

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stele-io/stele/internal/record"
)

// DumpOptions controls DumpSegment.
type DumpOptions struct {
	// VerifyIndex checks an index file's entries against its log without
	// printing them (kafka-dump-log --verify-index-only); mismatches are
	// printed either way.
	VerifyIndex bool
	// PrintRecords prints every record of a .log file
	// (kafka-dump-log --print-data-log).
	PrintRecords bool
}

// DumpSegment prints a segment file the way Kafka's kafka-dump-log
// (DumpLogSegments) does:
//
//   - for a .log file, one line per batch (baseOffset, lastOffset, count,
//     sequences, producer, partitionLeaderEpoch, isTransactional, isControl,
//     deleteHorizonMs, position, CreateTime or LogAppendTime, size, magic,
//     compresscodec, crc, isvalid) and, with PrintRecords, one "| offset:"
//     line per record with its timestamp, key and value sizes, sequence,
//     header keys, key and payload (as text), or the marker of a control
//     record;
//   - for a .index file, "offset: O position: P" per entry, and for a
//     .timeindex file "timestamp: T offset: O", each entry checked against
//     the .log beside it (an offset index entry must name the last offset of
//     the batch at its position; a time index entry the last offset of a
//     batch whose MaxTimestamp is its timestamp, in increasing order);
//     mismatches are printed after the entries in Kafka's words.
//
// It prints what it can and returns an error wrapping ErrCorrupt if
// anything is corrupt: a batch with a bad CRC, bytes that are not a batch,
// an index entry that does not match.
func DumpSegment(w io.Writer, path string, opts DumpOptions) error {
	name := filepath.Base(path)
	base, suffix, ok := parseSegmentName(name)
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	fmt.Fprintf(bw, "Dumping %s\n", path)
	if !ok {
		return fmt.Errorf("stele/storage: %s is not named like a segment file (20-digit offset and .log, .index or .timeindex)", name)
	}
	var err error
	switch suffix {
	case logSuffix, logSuffix + cleanedSuffix, logSuffix + swapSuffix:
		err = dumpLog(bw, path, base, opts)
	case indexSuffix, timeIndexSuffix:
		err = dumpIndex(bw, path, base, suffix, opts)
	default:
		err = fmt.Errorf("stele/storage: cannot dump a %s file", suffix)
	}
	return err
}

// dumpLog prints the batches of a .log file.
func dumpLog(w *bufio.Writer, path string, base int64, opts DumpOptions) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	fmt.Fprintf(w, "Log starting offset: %d\n", base)
	r := bufio.NewReaderSize(f, 1<<20)
	var pos int64
	invalid := 0
	for pos < fi.Size() {
		b, h, err := readBatch(r, fi.Size()-pos)
		if err != nil {
			fmt.Fprintf(w, "Found %d invalid bytes at the end of %s\n", fi.Size()-pos, filepath.Base(path))
			return corruptAt(path, pos, err.Error())
		}
		_, crcErr := record.CheckCRC(b)
		printBatch(w, h, pos, crcErr == nil)
		if crcErr != nil {
			invalid++
		} else if opts.PrintRecords {
			if err := printRecords(w, h, b); err != nil {
				fmt.Fprintf(w, "| records do not decode: %v\n", err)
				invalid++
			}
		}
		pos += int64(len(b))
	}
	if invalid > 0 {
		return fmt.Errorf("%w: %s: %d batches are invalid", ErrCorrupt, path, invalid)
	}
	return nil
}

// readBatch reads the next whole batch from r, at most left bytes.
func readBatch(r *bufio.Reader, left int64) ([]byte, record.Header, error) {
	hb, err := r.Peek(record.HeaderSize)
	if err != nil {
		return nil, record.Header{}, fmt.Errorf("a partial batch header")
	}
	h, err := record.ParseHeader(hb)
	if err != nil {
		return nil, record.Header{}, err
	}
	if int64(h.Size()) > left {
		return nil, record.Header{}, fmt.Errorf("a batch of %d bytes with %d left in the file", h.Size(), left)
	}
	b := make([]byte, h.Size())
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, record.Header{}, err
	}
	return b, h, nil
}

func printBatch(w io.Writer, h record.Header, pos int64, valid bool) {
	lastSeq := int32(-1)
	if h.BaseSequence >= 0 {
		lastSeq = int32((int64(h.BaseSequence) + int64(h.LastOffsetDelta)) % (1 << 31))
	}
	horizon := "OptionalLong.empty"
	if h.Attributes&0x40 != 0 {
		horizon = fmt.Sprintf("OptionalLong[%d]", h.FirstTimestamp)
	}
	fmt.Fprintf(w, "baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %t isControl: %t deleteHorizonMs: %s position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d isvalid: %t\n",
		h.BaseOffset, h.LastOffset(), h.NumRecords, h.BaseSequence, lastSeq, h.ProducerID, h.ProducerEpoch,
		h.PartitionLeaderEpoch, h.Transactional(), h.Control(), horizon, pos, timestampType(h), h.MaxTimestamp,
		h.Size(), h.Magic, h.Codec(), h.CRC, valid)
}

func timestampType(h record.Header) string {
	if h.LogAppendTime() {
		return "LogAppendTime"
	}
	return "CreateTime"
}

func printRecords(w io.Writer, h record.Header, b []byte) error {
	_, err := record.Each(b, func(r *record.Record) error {
		seq := int32(-1)
		if h.BaseSequence >= 0 {
			seq = int32((int64(h.BaseSequence) + int64(r.OffsetDelta)) % (1 << 31))
		}
		keys := make([]string, len(r.Headers))
		for i, hd := range r.Headers {
			keys[i] = hd.Key
		}
		fmt.Fprintf(w, "| offset: %d %s: %d keySize: %d valueSize: %d sequence: %d headerKeys: [%s]",
			r.Offset, timestampType(h), r.Timestamp, nullableLen(r.Key), nullableLen(r.Value), seq, strings.Join(keys, ","))
		switch {
		case h.Control():
			fmt.Fprint(w, controlRecord(r))
		default:
			if r.Key != nil {
				fmt.Fprintf(w, " key: %s", r.Key)
			}
			if r.Value != nil {
				fmt.Fprintf(w, " payload: %s", r.Value)
			}
		}
		fmt.Fprintln(w)
		return nil
	})
	return err
}

func nullableLen(b []byte) int {
	if b == nil {
		return -1
	}
	return len(b)
}

// controlRecord describes a control record as Kafka's dump does.
func controlRecord(r *record.Record) string {
	if len(r.Key) < 4 {
		return " controlType: unknown"
	}
	typ := int16(binary.BigEndian.Uint16(r.Key[2:]))
	switch typ {
	case controlAbort, controlCommit:
		marker := "ABORT"
		if typ == controlCommit {
			marker = "COMMIT"
		}
		epoch := int32(-1)
		if len(r.Value) >= 6 {
			epoch = int32(binary.BigEndian.Uint32(r.Value[2:]))
		}
		return fmt.Sprintf(" endTxnMarker: %s coordinatorEpoch: %d", marker, epoch)
	}
	return fmt.Sprintf(" controlType: UNKNOWN(%d)", typ)
}

// dumpIndex prints and checks an offset or time index.
func dumpIndex(w *bufio.Writer, path string, base int64, suffix string, opts DumpOptions) error {
	entries, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	width := offsetEntrySize
	if suffix == timeIndexSuffix {
		width = timeEntrySize
	}
	if len(entries) == 0 {
		fmt.Fprintf(w, "%s is empty.\n", path)
		return nil
	}
	logPath := strings.TrimSuffix(path, suffix) + logSuffix
	lf, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("stele/storage: the log %s is needed to check %s: %w", logPath, path, err)
	}
	defer lf.Close()
	fi, err := lf.Stat()
	if err != nil {
		return fmt.Errorf("stele/storage: %w", err)
	}
	var problems []string
	if len(entries)%width != 0 {
		problems = append(problems, fmt.Sprintf("  %d trailing bytes are not a whole entry", len(entries)%width))
	}
	if width == offsetEntrySize {
		problems = append(problems, checkOffsetEntries(w, lf, fi.Size(), base, entries, opts.VerifyIndex)...)
	} else {
		problems = append(problems, checkTimeEntries(w, lf, fi.Size(), base, entries, opts.VerifyIndex)...)
	}
	if len(problems) == 0 {
		return nil
	}
	if width == offsetEntrySize {
		fmt.Fprintf(w, "Mismatches in :%s\n", path)
	} else {
		fmt.Fprintf(w, "Found timestamp mismatch in :%s\n", path)
	}
	for _, p := range problems {
		fmt.Fprintln(w, p)
	}
	return fmt.Errorf("%w: %s: %d index entries do not match the log", ErrCorrupt, path, len(problems))
}

// headerAt reads the batch header at pos of the log, if a whole batch is
// there.
func headerAt(lf *os.File, size, pos int64) (record.Header, error) {
	var b [record.HeaderSize]byte
	if pos < 0 || pos+record.HeaderSize > size {
		return record.Header{}, errors.New("no batch header there")
	}
	if err := readFull(lf, b[:], pos); err != nil {
		return record.Header{}, err
	}
	h, err := record.ParseHeader(b[:])
	if err == nil && pos+int64(h.Size()) > size {
		err = errors.New("the batch runs past the end of the log")
	}
	return h, err
}

func checkOffsetEntries(w io.Writer, lf *os.File, size, base int64, entries []byte, quiet bool) []string {
	var problems []string
	prev := int64(-1)
	for i := 0; i+offsetEntrySize <= len(entries); i += offsetEntrySize {
		off := base + int64(binary.BigEndian.Uint32(entries[i:]))
		pos := int64(binary.BigEndian.Uint32(entries[i+4:]))
		if !quiet {
			fmt.Fprintf(w, "offset: %d position: %d\n", off, pos)
		}
		switch h, err := headerAt(lf, size, pos); {
		case err != nil:
			problems = append(problems, fmt.Sprintf("  Index offset: %d, position %d: %v", off, pos, err))
		case h.LastOffset() != off:
			problems = append(problems, fmt.Sprintf("  Index offset: %d, log offset: %d", off, h.LastOffset()))
		case off <= prev:
			problems = append(problems, fmt.Sprintf("  Index offset: %d, previous index offset: %d (out of order)", off, prev))
		}
		prev = off
	}
	return problems
}

func checkTimeEntries(w io.Writer, lf *os.File, size, base int64, entries []byte, quiet bool) []string {
	// The batches' last offsets and max timestamps, read once.
	type batchInfo struct{ last, maxTs int64 }
	var batches []batchInfo
	var problems []string
	walk := newWalker(lf, 0, size)
	for {
		h, _, ok, err := walk.next()
		if err != nil {
			problems = append(problems, "  "+err.Error())
			break
		}
		if !ok {
			break
		}
		batches = append(batches, batchInfo{h.LastOffset(), h.MaxTimestamp})
	}
	prevTs := int64(-1 << 63)
	for i := 0; i+timeEntrySize <= len(entries); i += timeEntrySize {
		ts := int64(binary.BigEndian.Uint64(entries[i:]))
		off := base + int64(binary.BigEndian.Uint32(entries[i+8:]))
		if !quiet {
			fmt.Fprintf(w, "timestamp: %d offset: %d\n", ts, off)
		}
		j := sort.Search(len(batches), func(j int) bool { return batches[j].last >= off })
		switch {
		case j == len(batches) || batches[j].last != off:
			found := int64(-1)
			if j < len(batches) {
				found = batches[j].last
			}
			problems = append(problems, fmt.Sprintf("  Indexed offset: %d, found log offset: %d", off, found))
		case batches[j].maxTs != ts:
			problems = append(problems, fmt.Sprintf("  Index timestamp: %d, log timestamp: %d", ts, batches[j].maxTs))
		}
		if ts <= prevTs {
			problems = append(problems, fmt.Sprintf("  Index timestamp: %d, Previously indexed timestamp: %d", ts, prevTs))
		}
		prevTs = ts
	}
	return problems
}
