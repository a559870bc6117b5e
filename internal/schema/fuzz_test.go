package schema

import (
	"strings"
	"testing"
)

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

// FuzzParseWire: any bytes split or are refused, never panic.
func FuzzParseWire(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 2})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, p, err := ParseWire(b)
		if err == nil && (id <= 0 || len(p) != len(b)-WireHeaderSize) {
			t.Fatalf("% x: id %d, %d bytes of payload", b, id, len(p))
		}
	})
}

// FuzzValidate: any payload validates or is refused under any schema,
// never panics, decodes with hamba/avro when it validates, and is refused
// when it is longer than a value (a byte more after a valid one).
func FuzzValidate(f *testing.F) {
	schemas := []string{everything, `"int"`, `{"type":"array","items":"null"}`, `{"type":"map","values":["null","string"]}`,
		`{"type":"record","name":"L","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","L"]}]}`}
	var parsed []*Schema
	for _, s := range schemas {
		p, err := Parse(Def{Text: s}, nil)
		if err != nil {
			f.Fatal(err)
		}
		parsed = append(parsed, p)
	}
	f.Add(uint8(0), []byte{0})
	f.Add(uint8(1), []byte{0xfe, 0xff, 0xff, 0xff, 0x0f})
	f.Add(uint8(2), []byte{0xfe, 0xff, 0xff, 0xff, 0x0f, 0})
	f.Add(uint8(4), []byte{2, 2, 4, 0})
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		s := parsed[int(which)%len(parsed)]
		s.Field(b, []string{"next", "v"})
		if s.Validate(b) == nil {
			// What the validator takes, hamba/avro decodes.
			if _, err := s.DecodeJSON(b); err != nil {
				t.Fatalf("%s: % x validates but does not decode: %v", schemas[int(which)%len(parsed)], b, err)
			}
			if err := s.Validate(append(b[:len(b):len(b)], 0)); err == nil {
				t.Fatalf("%s: % x and a byte more both validate", schemas[int(which)%len(parsed)], b)
			}
		}
	})
}

// FuzzParseJSON: any text parses as a JSON Schema or is refused, never
// panics, loads nothing, parses to the same canonical form twice, and is
// compatible with itself under every level; a payload validates or is
// refused, never panics.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{jOpen1, jClosed2, `{"$ref":"#/definitions/a","definitions":{"a":{"$ref":"#/definitions/a"}}}`,
		`{"anyOf":[{"type":"string","pattern":"^a+$"},{"type":"array","items":{"$ref":"#"}}]}`, `true`, `{"type":"number","multipleOf":1e-300}`} {
		f.Add(s, []byte(`{"id": 1}`))
	}
	f.Fuzz(func(t *testing.T, text string, payload []byte) {
		a, err := Parse(Def{Type: TypeJSON, Text: text}, nil)
		if err != nil {
			return
		}
		b, err := Parse(Def{Type: TypeJSON, Text: text}, nil)
		if err != nil || b.Canonical != a.Canonical {
			t.Fatalf("parsed twice: %q and %q (%v)", a.Canonical, b.Canonical, err)
		}
		for _, l := range Levels {
			if p := Compatible(l, a, []*Schema{b}); len(p) != 0 {
				t.Fatalf("%q is not %s with itself: %v", text, l, p)
			}
		}
		a.Validate(payload)
	})
}

// FuzzParseProtobuf: any text parses as a Protobuf schema or is refused,
// never panics, reads no file, parses to the same canonical form twice and
// from its canonical form, and is compatible with itself under every
// level; a payload validates or is refused, never panics, and what
// validates decodes to JSON.
func FuzzParseProtobuf(f *testing.F) {
	for _, s := range []string{protoOrder, `syntax = "proto2"; message R { required int32 a = 1; optional group G = 2 { optional string s = 3; } }`,
		`syntax = "proto3"; message T { repeated T children = 1; oneof o { string a = 2; T b = 3; } map<int32, T> m = 4; }`,
		`syntax = "proto3"; import "google/protobuf/any.proto"; message A { google.protobuf.Any x = 1; }`} {
		f.Add(s, []byte{0, 0x0a, 1, 'x'})
	}
	f.Fuzz(func(t *testing.T, text string, payload []byte) {
		a, err := Parse(Def{Type: TypeProtobuf, Text: text}, nil)
		if err != nil {
			return
		}
		b, err := Parse(Def{Type: TypeProtobuf, Text: text}, nil)
		if err != nil || b.Canonical != a.Canonical {
			t.Fatalf("parsed twice: %q and %q (%v)", a.Canonical, b.Canonical, err)
		}
		c, err := Parse(Def{Type: TypeProtobuf, Text: a.Canonical}, nil)
		if err != nil || c.Canonical != a.Canonical {
			t.Fatalf("the canonical form %q parses to %q (%v)", a.Canonical, c.Canonical, err)
		}
		for _, l := range Levels {
			if p := Compatible(l, a, []*Schema{b}); len(p) != 0 {
				t.Fatalf("%q is not %s with itself: %v", text, l, p)
			}
		}
		a.Field(payload, []string{"id"})
		if a.Validate(payload) == nil {
			// What validates decodes, but for an Any naming a type the
			// schema does not define, which has no JSON form.
			if _, err := a.DecodeJSON(payload); err != nil && !strings.Contains(err.Error(), "resolve") {
				t.Fatalf("% x validates but does not decode: %v", payload, err)
			}
		}
	})
}

// FuzzProtoIndexes: any bytes split into message indexes or are refused,
// never panic, and what splits is between 1 and MaxIndexes indexes.
func FuzzProtoIndexes(f *testing.F) {
	f.Add([]byte{0, 1})
	f.Add([]byte{4, 2, 4, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, rest, err := ProtoIndexes(b)
		if err != nil {
			return
		}
		if len(idx) == 0 || len(idx) > MaxIndexes || len(rest) > len(b)-1 {
			t.Fatalf("% x: %v, %d bytes left", b, idx, len(rest))
		}
	})
}
