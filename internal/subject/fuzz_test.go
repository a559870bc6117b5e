package subject

import "testing"

// The decoders of what comes from outside: a record's subject header, a
// client's pattern, a record's JSON value, a topic config's pointer, and
// a summary read from the store (which a peer's snapshot may carry).

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"orders.eu", "a..b", "a.*", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		if err := Check(s); err == nil {
			p, err := ParsePattern(string(s))
			if err != nil || !p.Match(s) || !p.Literal() {
				t.Fatalf("valid subject %q is no literal pattern matching itself: %v", s, err)
			}
		}
	})
}

func FuzzPattern(f *testing.F) {
	for _, s := range []string{"orders.*.fr.>", ">", "*", "a.>.b", "a*"} {
		f.Add(s, []byte("orders.eu.fr.x"))
	}
	f.Fuzz(func(t *testing.T, pat string, s []byte) {
		p, err := ParsePattern(pat)
		if err != nil {
			return
		}
		if Check(s) != nil {
			return // Match is asked of valid subjects only
		}
		if p.Match(s) && !p.MatchPrefix(s) {
			t.Fatalf("%q matches %q but not as a prefix", pat, s)
		}
	})
}

func FuzzFromJSON(f *testing.F) {
	f.Add("/a/0/b", []byte(`{"a": [{"b": "x.y"}]}`))
	f.Add("", []byte(`"x"`))
	f.Fuzz(func(t *testing.T, ptr string, v []byte) {
		p, err := ParsePointer(ptr)
		if err != nil {
			return
		}
		s, found, err := p.FromJSON(v)
		if (found && err != nil) || (!found && s != nil) {
			t.Fatalf("FromJSON: %q %v %v", s, found, err)
		}
	})
}

func FuzzDecodeSummary(f *testing.F) {
	f.Add(EncodeSummary(nil, Summarize([]Entry{{Subject: []byte("a.b"), Count: 2}, {Subject: []byte("c"), Count: 1}})))
	f.Add(EncodeSummary(nil, Summary{All: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			return
		}
		s.Matches(MustPattern("a.>"))
		if again, err := DecodeSummary(EncodeSummary(nil, s)); err != nil || len(again.Entries) != len(s.Entries) {
			t.Fatalf("re-encoding %x: %v", b, err)
		}
	})
}
