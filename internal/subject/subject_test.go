package subject

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, s := range []string{"a", "orders.eu.fr.created", "a.b-c_d.E9", "ünïcode.ok", strings.Repeat("x", 255)} {
		if err := Check([]byte(s)); err != nil {
			t.Errorf("Check(%q) = %v, want nil", s, err)
		}
	}
	for _, s := range []string{"", ".", "a.", ".a", "a..b", "a.*", "a.>", "a*b", "a b", "a\tb", "a\x00", "a\x7f", strings.Repeat("x", 256), "\xff\xfe"} {
		err := Check([]byte(s))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern string
		subject string
		want    bool
	}{
		{"orders", "orders", true},
		{"orders", "orders.eu", false},
		{"orders.eu", "orders", false},
		{"*", "orders", true},
		{"*", "orders.eu", false},
		{">", "orders", true},
		{">", "orders.eu.fr", true},
		{"orders.>", "orders", false},
		{"orders.>", "orders.eu", true},
		{"orders.>", "orders.eu.fr.created", true},
		{"orders.*.fr.>", "orders.eu.fr.created", true},
		{"orders.*.fr.>", "orders.eu.fr", false},
		{"orders.*.fr.>", "orders.eu.de.created", false},
		{"orders.*.fr", "orders.eu.fr", true},
		{"orders.*.fr", "orders.eu.fr.x", false},
		{"*.*", "a.b", true},
		{"*.*", "a", false},
		{"a.b", "a.bc", false},
		{"a.bc", "a.b", false},
	} {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", c.pattern, err)
		}
		if got := p.Match([]byte(c.subject)); got != c.want {
			t.Errorf("%q matches %q: %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
	for _, p := range []string{"", "a.", ".a", "a..b", ">.a", "a.>.b", "a*", "*a", "a.b>", "a b", strings.Repeat("x", 256)} {
		if _, err := ParsePattern(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePattern(%q) = %v, want ErrInvalid", p, err)
		}
	}
	if !MustPattern("a.b").Literal() || MustPattern("a.*").Literal() || MustPattern("a.>").Literal() {
		t.Error("Literal is wrong")
	}
}

func TestHasPrefix(t *testing.T) {
	for _, c := range []struct {
		s, prefix string
		want      bool
	}{{"orders.eu", "", true}, {"orders.eu", "orders", true}, {"orders.eu", "orders.eu", true}, {"orders.europe", "orders.eu", false}, {"orders", "orders.eu", false}} {
		if got := HasPrefix([]byte(c.s), []byte(c.prefix)); got != c.want {
			t.Errorf("HasPrefix(%q, %q) = %v", c.s, c.prefix, got)
		}
	}
}

func TestPointer(t *testing.T) {
	v := []byte(`{"a": {"b/c": ["x", {"k~": "orders.eu"}], "n": 3, "o": {}, "arr": [], "t": true, "z": null}, "a": {"b/c": ["first-wins"]}, "s": "top"}`)
	for _, c := range []struct {
		ptr   string
		want  string
		found bool
		err   bool
	}{
		{"/s", "top", true, false},
		{"/a/b~1c/1/k~0", "orders.eu", true, false},
		{"/a/b~1c/0", "x", true, false},
		{"/a/b~1c/2", "", false, false},
		{"/a/b~1c/01", "", false, false},
		{"/a/missing", "", false, false},
		{"/a/n", "", false, true},
		{"/a/o", "", false, true},
		{"/a/arr", "", false, true},
		{"/a/t", "", false, true},
		{"/a/z", "", false, false},
		{"/s/deeper", "", false, false},
		{"", "", false, true},
	} {
		p, err := ParsePointer(c.ptr)
		if err != nil {
			t.Fatalf("ParsePointer(%q): %v", c.ptr, err)
		}
		got, found, err := p.FromJSON(v)
		if string(got) != c.want || found != c.found || (err != nil) != c.err {
			t.Errorf("%q: %q %v %v, want %q %v err %v", c.ptr, got, found, err, c.want, c.found, c.err)
		}
	}
	p, _ := ParsePointer("")
	if got, found, err := p.FromJSON([]byte(`"whole.value"`)); string(got) != "whole.value" || !found || err != nil {
		t.Errorf("the whole value: %q %v %v", got, found, err)
	}
	if _, found, err := p.FromJSON(nil); found || err != nil {
		t.Errorf("a tombstone: %v %v", found, err)
	}
	q, _ := ParsePointer("/s")
	for _, bad := range []string{`{"s" 1}`, `not json`, `{"x": [1, 2`, `}`} {
		if _, _, err := q.FromJSON([]byte(bad)); err == nil || strings.Contains(err.Error(), "invalid character") {
			t.Errorf("FromJSON(%q) = %v, want our own error", bad, err)
		}
	}
	for _, bad := range []string{"a", "/a~", "/a~2"} {
		if _, err := ParsePointer(bad); err == nil {
			t.Errorf("ParsePointer(%q) took it", bad)
		}
	}
}

// TestSummaryNeverMisses: whatever the subjects and the pattern, a batch
// with a matching subject has a summary that matches; while the subjects
// are few the summary is exact.
func TestSummaryNeverMisses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := []string{"a", "b", "orders", "eu", "fr", "x1", "x2", "x3"}
	sub := func() string {
		n := 1 + rng.IntN(5)
		var parts []string
		for range n {
			parts = append(parts, tokens[rng.IntN(len(tokens))])
		}
		return strings.Join(parts, ".")
	}
	pat := func() string {
		n := 1 + rng.IntN(4)
		var parts []string
		for i := range n {
			switch r := rng.IntN(6); {
			case r == 0:
				parts = append(parts, "*")
			case r == 1 && i == n-1:
				parts = append(parts, ">")
			default:
				parts = append(parts, tokens[rng.IntN(len(tokens))])
			}
		}
		return strings.Join(parts, ".")
	}
	for iter := range 2000 {
		counts := map[string]uint64{}
		var c Counter
		n := 1 + rng.IntN(80)
		if iter%3 == 0 {
			n = 1 + rng.IntN(10)
		}
		for range n {
			s := sub()
			counts[s]++
			c.Add([]byte(s))
		}
		if len(c.Entries) != len(counts) {
			t.Fatalf("the counter holds %d subjects, want %d", len(c.Entries), len(counts))
		}
		for _, e := range c.Entries {
			if counts[string(e.Subject)] != e.Count {
				t.Fatalf("the counter counts %q %d times, want %d", e.Subject, e.Count, counts[string(e.Subject)])
			}
		}
		s := Summarize(c.Entries)
		switch iter % 3 {
		case 0:
			s.FromJSON, s.Pointer = true, "/a/b"
		case 1:
			s.FromField, s.Field = true, "customer.region"
		}
		enc := EncodeSummary(nil, s)
		d, err := DecodeSummary(enc)
		if err != nil {
			t.Fatalf("decoding %x: %v", enc, err)
		}
		if d.FromJSON != s.FromJSON || d.Pointer != s.Pointer || d.FromField != s.FromField || d.Field != s.Field {
			t.Fatalf("decoded from %v %q / %v %q, want %v %q / %v %q", d.FromJSON, d.Pointer, d.FromField, d.Field, s.FromJSON, s.Pointer, s.FromField, s.Field)
		}
		total := uint64(0)
		for _, e := range d.Entries {
			total += e.Count
		}
		if !d.All && total != uint64(n) {
			t.Fatalf("entries count %d records, want %d", total, n)
		}
		for range 20 {
			p := MustPattern(pat())
			any := false
			for s := range counts {
				any = any || p.Match([]byte(s))
			}
			got := d.Matches(p)
			if any && !got {
				t.Fatalf("summary %+v misses %q over %v", d, p, counts)
			}
			if d.Depth == 0 && !d.All && got != any {
				t.Fatalf("an exact summary says %v for %q over %v", got, p, counts)
			}
		}
	}
}

func TestSummaryLimits(t *testing.T) {
	var counts Counter
	for i := range 1000 {
		counts.Add(fmt.Appendf(nil, "orders.r%d.c%d", i%5, i))
	}
	s := Summarize(counts.Entries)
	if s.Depth != 2 || len(s.Entries) != 5 || s.All {
		t.Fatalf("summary of 1000 subjects under 5 regions: depth %d, %d entries, all %v", s.Depth, len(s.Entries), s.All)
	}
	if !s.Matches(MustPattern("orders.r3.c999")) || !s.Matches(MustPattern("orders.*.c1")) || s.Matches(MustPattern("orders.r7.>")) || s.Matches(MustPattern("billing.>")) {
		t.Fatal("a depth-2 summary answers wrongly")
	}
	counts = Counter{}
	for i := range 100 {
		counts.Add(fmt.Appendf(nil, "t%d", i))
	}
	if s := Summarize(counts.Entries); !s.All || !s.Matches(MustPattern("nothing.like.it")) {
		t.Fatalf("100 one-token subjects: %+v", s)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 0}, {1, 0, 0}, {1, 0, 0, 1, 0, 0}, {1, 0xff, 0, 1, 1, 'a', 1}, {1, 0, 0, 1, 1, 'a', 1, 9}, {1, 0, 2, 0}, {1, 0, 1, 1, 'x', 0}} {
		if _, err := DecodeSummary(bad); err == nil {
			t.Errorf("DecodeSummary(%x) took it", bad)
		}
	}
}

// TestCounterAllocates: counting a subject seen before allocates nothing.
func TestCounterAllocates(t *testing.T) {
	var c Counter
	s := []byte("orders.eu.fr.created")
	c.Add(s)
	if n := testing.AllocsPerRun(100, func() { c.Add(s) }); n != 0 {
		t.Fatalf("%v allocations per record", n)
	}
}
