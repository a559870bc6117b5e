package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

// testRecords returns n records with varied keys, values and headers: null
// keys and values, empty ones, and headers with null values.
func testRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		r := Record{
			TimestampDelta: int64(i * 3),
			OffsetDelta:    int32(i),
			Key:            []byte(fmt.Sprintf("key-%d", i%5)),
			Value:          bytes.Repeat([]byte{byte('a' + i%26)}, 10+i*7),
		}
		switch i % 4 {
		case 1:
			r.Key = nil
		case 2:
			r.Value = nil // a tombstone
			r.Headers = []RecordHeader{{Key: "h", Value: nil}}
		case 3:
			r.Key, r.Value = []byte{}, []byte{}
			r.Headers = []RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "", Value: []byte{}}}
		}
		recs[i] = r
	}
	return recs
}

// franzBatch encodes records the way franz-go does, independently of Build:
// kmsg.Record and kmsg.RecordBatch encoding, franz-go's own compressor
// (xerial Snappy, LZ4 frames, ...), and a CRC computed here.
func franzBatch(t testing.TB, codec Codec, firstTimestamp int64, recs []Record) []byte {
	t.Helper()
	var raw []byte
	var maxTs int64 = firstTimestamp
	for _, r := range recs {
		kr := kmsg.Record{
			Attributes:       r.Attributes,
			TimestampDelta64: r.TimestampDelta,
			OffsetDelta:      r.OffsetDelta,
			Key:              r.Key,
			Value:            r.Value,
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		// Length is the size of what follows it: encode once with a
		// one-byte zero length to measure.
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		raw = kr.AppendTo(raw)
		maxTs = max(maxTs, firstTimestamp+r.TimestampDelta)
	}
	payload := raw
	if codec != CodecNone {
		var kc kgo.CompressionCodec
		switch codec {
		case CodecGzip:
			kc = kgo.GzipCompression()
		case CodecSnappy:
			kc = kgo.SnappyCompression()
		case CodecLZ4:
			kc = kgo.Lz4Compression()
		case CodecZstd:
			kc = kgo.ZstdCompression()
		}
		comp, err := kgo.DefaultCompressor(kc)
		if err != nil {
			t.Fatal(err)
		}
		out, used := comp.Compress(new(bytes.Buffer), raw)
		if int(used) != int(codec) {
			t.Fatalf("franz-go compressed with codec %d, want %d", used, codec)
		}
		payload = bytes.Clone(out)
	}
	kb := kmsg.RecordBatch{
		FirstOffset:          0,
		Length:               int32(minLength + len(payload)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(codec),
		LastOffsetDelta:      int32(len(recs) - 1),
		FirstTimestamp:       firstTimestamp,
		MaxTimestamp:         maxTs,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(recs)),
		Records:              payload,
	}
	b := kb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// fixCRC recomputes the CRC of a batch after a test edited it.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[offCRC:], checksum(b))
	return b
}

// mustBuild is Build for tests.
func mustBuild(t testing.TB, h Header, recs []Record) []byte {
	t.Helper()
	b, err := Build(h, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameRecords reports the first difference between two record lists,
// telling null from empty.
func sameRecords(got, want []Record) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Attributes != w.Attributes || g.TimestampDelta != w.TimestampDelta || g.OffsetDelta != w.OffsetDelta {
			return fmt.Errorf("record %d: %+v, want %+v", i, g, w)
		}
		if !sameBytes(g.Key, w.Key) || !sameBytes(g.Value, w.Value) {
			return fmt.Errorf("record %d: key %q value %q, want key %q value %q", i, g.Key, g.Value, w.Key, w.Value)
		}
		if len(g.Headers) != len(w.Headers) {
			return fmt.Errorf("record %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for j := range g.Headers {
			if g.Headers[j].Key != w.Headers[j].Key || !sameBytes(g.Headers[j].Value, w.Headers[j].Value) {
				return fmt.Errorf("record %d header %d: %+v, want %+v", i, j, g.Headers[j], w.Headers[j])
			}
		}
	}
	return nil
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
