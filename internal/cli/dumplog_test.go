package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stele-io/stele/internal/record"
	"github.com/stele-io/stele/internal/storage"
)

// writeSegment writes a partition directory holding one batch of values and
// returns the path of its .log file.
func writeSegment(t *testing.T, values ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "orders-0")
	l, err := storage.OpenLog(dir, storage.LogConfig{IndexIntervalBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]record.Record, len(values))
	for i, v := range values {
		recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Key: []byte("k"), Value: []byte(v)}
	}
	b, err := record.Build(record.Header{FirstTimestamp: 1700000000000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(b, 1700000000000); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "00000000000000000000.log")
}

func TestDumpLog(t *testing.T) {
	path := writeSegment(t, "hello", "world")
	r := runCLI(t.Context(), "", "dump-log", path, "--print-data-log")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"Dumping " + path, "baseOffset: 0 lastOffset: 1 count: 2", "isvalid: true",
		"| offset: 1 ", "payload: world"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dump lacks %q:\n%s", want, r.stdout)
		}
	}
	index := strings.TrimSuffix(path, ".log") + ".index"
	if r := runCLI(t.Context(), "", "dump-log", index, "--verify-index"); r.code != ExitOK {
		t.Errorf("verify sound index: exit %d: %s", r.code, r.stderr)
	}

	// A flipped byte in the records breaks the CRC: the dump says so and exits 1.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t.Context(), "", "dump-log", path, filepath.Join(t.TempDir(), "00000000000000000000.log"))
	wantFailure(t, r, ExitFailure, path, "corrupt", "no such file")

	wantFailure(t, runCLI(t.Context(), "", "dump-log"), ExitUsage, "missing PATH argument")
}
