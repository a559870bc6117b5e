package cli

import (
	"testing"

	"github.com/stele-io/stele/internal/record"
)

// TestSameAsSource: a view's record is its source record only with the
// same key, value and timestamp, the source's headers in order, and
// nothing added but the view's own headers.
func TestSameAsSource(t *testing.T) {
	h := func(kvs ...string) []record.RecordHeader {
		var out []record.RecordHeader
		for i := 0; i < len(kvs); i += 2 {
			out = append(out, record.RecordHeader{Key: kvs[i], Value: []byte(kvs[i+1])})
		}
		return out
	}
	src := record.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: 7, Headers: h("a", "1", "stele-subject", "x.y")}
	view := func(edit func(r *record.Record)) record.Record {
		r := src
		r.Headers = append(h("a", "1", "stele-subject", "x.y"), h("stele-source", "t/0/3")...)
		edit(&r)
		return r
	}
	for _, c := range []struct {
		name string
		v    record.Record
		same bool
	}{
		{"the copy", view(func(*record.Record) {}), true},
		{"a subject added (a JSON source)", view(func(r *record.Record) { r.Headers = append(r.Headers, h("stele-subject", "x.y")...) }), true},
		{"another value", view(func(r *record.Record) { r.Value = []byte("w") }), false},
		{"a null value", view(func(r *record.Record) { r.Value = nil }), false},
		{"another key", view(func(r *record.Record) { r.Key = []byte("j") }), false},
		{"a null key", view(func(r *record.Record) { r.Key = nil }), false},
		{"another timestamp", view(func(r *record.Record) { r.Timestamp = 8 }), false},
		{"a header changed", view(func(r *record.Record) { r.Headers[0].Value = []byte("2") }), false},
		{"headers reordered", view(func(r *record.Record) { r.Headers[0], r.Headers[1] = r.Headers[1], r.Headers[0] }), false},
		{"a header left out", view(func(r *record.Record) { r.Headers = r.Headers[1:] }), false},
		{"a header added", view(func(r *record.Record) { r.Headers = append(r.Headers, h("b", "2")...) }), false},
	} {
		if got := sameAsSource(c.v, src); got != c.same {
			t.Errorf("%s: sameAsSource %v, want %v", c.name, got, c.same)
		}
	}
}
