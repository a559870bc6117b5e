package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// FuzzOpenLog writes arbitrary bytes as a partition's only segment (and,
// split, as a sealed segment and its index before it): OpenLog must not
// panic, and must either fail or recover a prefix of whole valid batches
// that reads back and takes appends.
func FuzzOpenLog(f *testing.F) {
	valid := concat([][]byte{
		mkBatch(f, 0, []rec{kv("a", "1", 10), kv("b", "2", 11)}),
		mkBatch(f, 2, []rec{kv("c", "3", 12)}, batchOpts{codec: record.CodecGzip}),
	})
	f.Add(valid, uint16(0))
	f.Add(valid[:len(valid)-5], uint16(0))
	f.Add(append(append([]byte{}, valid...), 0, 0, 0, 0, 0, 0, 0, 9), uint16(8))
	f.Add([]byte{}, uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 100), uint16(40))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if s := int(split); s > 0 && s < len(data) {
			// Bytes as the index of the first segment, and a second segment.
			os.WriteFile(filepath.Join(dir, "00000000000000000000.index"), data[:s], 0o644)
			os.WriteFile(filepath.Join(dir, "00000000000000000003.log"), data[s:], 0o644)
		}
		l, err := OpenLog(dir, LogConfig{IndexIntervalBytes: 16})
		if err != nil {
			return
		}
		defer l.Close()
		got, err := l.Read(l.BaseOffset(), 1<<20, l.NextOffset())
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range mustSplit(t, got) {
			if _, err := record.CheckCRC(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Append(mkBatch(t, l.NextOffset(), []rec{kv("z", "z", 1)}), 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.MaxTimestamp(l.NextOffset()); err != nil {
			t.Fatal(err)
		}
	})
}

func mustSplit(t *testing.T, b []byte) [][]byte {
	t.Helper()
	out, err := record.Split(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
