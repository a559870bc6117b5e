package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestDumpSegment(t *testing.T) {
	l, dir := testLog(t, LogConfig{IndexIntervalBytes: 1})
	appendRecs(t, l, 0, kv("k1", "hello", 1000), tombstone("k2", 1001))
	appendRecs(t, l, 0, kv("", "no key", 2000))
	if err := l.Append(mkControl(t, 3, 9, true, 3000), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	path := segmentFile(dir, 0, logSuffix)
	if err := DumpSegment(&out, path, DumpOptions{PrintRecords: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Dumping " + path + "\n",
		"Log starting offset: 0\n",
		"baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1001 size: ",
		"magic: 2 compresscodec: none crc: ",
		"isvalid: true\n",
		"| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: -1 headerKeys: [] key: k1 payload: hello\n",
		"| offset: 1 CreateTime: 1001 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [] key: k2\n",
		"| offset: 2 CreateTime: 2000 keySize: -1 valueSize: 6 sequence: -1 headerKeys: [] payload: no key\n",
		"producerId: 9 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true",
		"| offset: 3 CreateTime: 3000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := DumpSegment(&out, segmentFile(dir, 0, indexSuffix), DumpOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "offset: 2 position: ") {
		t.Errorf("index dump:\n%s", out.String())
	}
	out.Reset()
	if err := DumpSegment(&out, segmentFile(dir, 0, timeIndexSuffix), DumpOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "timestamp: 2000 offset: 2\n") {
		t.Errorf("time index dump:\n%s", out.String())
	}
}

// Reference: kafka-dump-log --verify-index-only reports index entries that
// do not match the log.
func TestDumpVerifyIndexCatchesBrokenIndex(t *testing.T) {
	l, dir := testLog(t, LogConfig{IndexIntervalBytes: 1})
	appendValues(t, l, 5, 2, 20, 100)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	idx := segmentFile(dir, 0, indexSuffix)
	var out bytes.Buffer
	if err := DumpSegment(&out, idx, DumpOptions{VerifyIndex: true}); err != nil || out.String() != "Dumping "+idx+"\n" {
		t.Fatalf("sound index: %v\n%s", err, out.String())
	}
	b, _ := os.ReadFile(idx)
	binary.BigEndian.PutUint32(b[offsetEntrySize:], 4) // entry 1 now names offset 4, not 5
	os.WriteFile(idx, b, 0o644)
	out.Reset()
	err := DumpSegment(&out, idx, DumpOptions{VerifyIndex: true})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(out.String(), "Mismatches in :"+idx+"\n  Index offset: 4, log offset: 5\n") {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "position:") {
		t.Fatal("VerifyIndex printed the entries")
	}

	tidx := segmentFile(dir, 0, timeIndexSuffix)
	b, _ = os.ReadFile(tidx)
	binary.BigEndian.PutUint64(b, 1) // a timestamp no batch has
	os.WriteFile(tidx, b, 0o644)
	out.Reset()
	if err := DumpSegment(&out, tidx, DumpOptions{VerifyIndex: true}); !errors.Is(err, ErrCorrupt) || !strings.Contains(out.String(), "Index timestamp: 1, log timestamp: ") {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

func TestDumpReportsCorruptLog(t *testing.T) {
	l, dir := testLog(t, LogConfig{})
	batches := appendValues(t, l, 3, 1, 20, 100)
	l.Close()
	path := segmentFile(dir, 0, logSuffix)
	b, _ := os.ReadFile(path)
	b[len(batches[0])+30] ^= 1 // the second batch's CRC fails
	b = append(b, 1, 2, 3)     // and three stray bytes
	os.WriteFile(path, b, 0o644)
	var out bytes.Buffer
	err := DumpSegment(&out, path, DumpOptions{PrintRecords: true})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatal(err)
	}
	for _, want := range []string{"isvalid: false", "Found 3 invalid bytes at the end of 00000000000000000000.log", fmt.Sprintf("baseOffset: 2 lastOffset: 2")} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
