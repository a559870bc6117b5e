package views

import (
	"strconv"
	"testing"
)

// FuzzParseSource: a stele-source value read back from a view's record
// (or sent by anyone, were the produce check missing) never panics, and
// what it accepts prints back to itself.
func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"orders/3/1042", "a.b-c_d/0/0", "/1/2", "t//2", "t/1/", "t/-1/2", "t/1/99999999999999999999", "t/1/2/3", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		topic, p, off, err := ParseSource(v)
		if err != nil {
			return
		}
		if p < 0 || off < 0 || topic == "" {
			t.Fatalf("%q: topic %q partition %d offset %d", v, topic, p, off)
		}
		if back := topic + "/" + strconv.Itoa(int(p)) + "/" + strconv.FormatInt(off, 10); back != string(v) {
			t.Fatalf("%q reads as %q", v, back)
		}
	})
}
