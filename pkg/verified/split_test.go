package verified

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzSplit: a Fetch answer's records (a broker's bytes, not trusted) are
// cut into batches whose concatenation is a prefix of the input, each at
// least a length field long and as long as it says; nothing panics.
func FuzzSplit(f *testing.F) {
	batch := func(n int) []byte {
		b := make([]byte, 12+n)
		binary.BigEndian.PutUint32(b[8:12], uint32(n))
		return b
	}
	f.Add(append(batch(49), batch(60)...))
	f.Add(append(batch(49), batch(60)[:30]...)) // a partial last batch
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var joined []byte
		for _, b := range split(data) {
			if len(b) < 12 || int64(binary.BigEndian.Uint32(b[8:12]))+12 != int64(len(b)) {
				t.Fatalf("batch of %d bytes says %d", len(b), binary.BigEndian.Uint32(b[8:12]))
			}
			joined = append(joined, b...)
		}
		if !bytes.HasPrefix(data, joined) {
			t.Fatal("the batches are not a prefix of the input")
		}
	})
}
