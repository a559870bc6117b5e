package schema

import "testing"

// The decoders of what comes from outside: a schema's text, from a
// client's registration or a peer's block.

// FuzzParse: any text parses or is refused as invalid, never panics, and
// parses to the same canonical form twice; a schema parsed from its own
// canonical form is the same schema; a parsed schema is compatible with
// itself under every level.
func FuzzParse(f *testing.F) {
	for _, s := range []string{v1, v2, v6, `"int"`, `["null","string"]`, `{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}`,
		`{"type":"fixed","name":"F","size":16,"logicalType":"decimal","precision":4}`, `{"type":"map","values":{"type":"array","items":"long"}}`,
		`{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		a, err := Parse(Def{Text: text}, func(string, int32) (Def, bool) { return Def{}, false })
		if err != nil {
			return
		}
		b, err := Parse(Def{Text: text}, nil)
		if err != nil || b.Canonical != a.Canonical {
			t.Fatalf("parsed twice: %q and %q (%v)", a.Canonical, b.Canonical, err)
		}
		c, err := Parse(Def{Text: a.Canonical}, nil)
		if err != nil || c.Canonical != a.Canonical {
			t.Fatalf("the canonical form %q parses to %q (%v)", a.Canonical, c.Canonical, err)
		}
		for _, l := range Levels {
			if p := Compatible(l, a, []*Schema{b}); len(p) != 0 {
				t.Fatalf("%q is not %s with itself: %v", text, l, p)
			}
		}
	})
}
