package schema

import (
	"errors"
	"strings"
	"testing"
)

func mustParse(t *testing.T, text string) *Schema {
	t.Helper()
	s, err := Parse(Def{Text: text}, func(string, int32) (Def, bool) { return Def{}, false })
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return s
}

const (
	v1 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`
	// v2 adds a field with a default: it reads v1's data, and v1 reads
	// its (v1 ignores the field).
	v2 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string","default":"x"}]}`
	// v3 adds a field without a default: v1 reads its data, it cannot
	// read v1's.
	v3 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"c","type":"string"}]}`
	// v4 drops a, which had no default: it reads v1's data; v1 cannot read
	// its.
	v4 = `{"type":"record","name":"R","fields":[{"name":"b","type":"string","default":"x"}]}`
	// v5 widens a to long: reads v1's (int promotes to long), not the
	// other way.
	v5           = `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	enumAB       = `{"type":"enum","name":"E","symbols":["A","B"]}`
	enumA        = `{"type":"enum","name":"E","symbols":["A"]}`
	enumADefault = `{"type":"enum","name":"E","symbols":["A","Z"],"default":"Z"}`
	// v6 has b without a default.
	v6 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}`
)

// TestCompatibilityLevels: each of Confluent's levels, with schemas that
// pass and fail it, after the rules of Avro's schema resolution
// (Avro 1.11 specification, "Schema Resolution").
func TestCompatibilityLevels(t *testing.T) {
	for _, c := range []struct {
		level   string
		earlier []string
		next    string
		ok      bool
	}{
		{Backward, []string{v1}, v2, true},
		{Backward, []string{v1}, v3, false},
		{Backward, []string{v1}, v4, true},
		{Backward, []string{v1}, v5, true},
		{Forward, []string{v1}, v2, true},
		{Forward, []string{v1}, v3, true},
		{Forward, []string{v1}, v4, false},
		{Forward, []string{v1}, v5, false},
		{Full, []string{v1}, v2, true},
		{Full, []string{v1}, v3, false},
		{Full, []string{v1}, v5, false},
		{None, []string{v1}, v3, true},
		// The plain levels check the latest version only, the
		// transitive ones every live version: v6 reads v2's data, not
		// v1's (b has no default).
		{Backward, []string{v1, v2}, v6, true},
		{BackwardTransitive, []string{v1, v2}, v6, false},
		{BackwardTransitive, []string{v1, v3}, v4, true},
		{BackwardTransitive, []string{v1, v2}, v5, true},
		{Backward, []string{v3, v1}, v2, true},
		{ForwardTransitive, []string{v3, v1}, v2, false},
		{Forward, []string{v3, v1}, v2, true},
		{Backward, []string{v5}, v1, false},
		{FullTransitive, []string{v1, v2}, v2, true},
		{FullTransitive, []string{v4, v2}, v1, false},
		{Backward, nil, v1, true},
		// An enum reader needs the writer's symbols, or a default.
		{Backward, []string{enumAB}, enumA, false},
		{Backward, []string{enumAB}, enumADefault, true},
		{Backward, []string{enumA}, enumAB, true},
		// int promotes to float and double; not back.
		{Backward, []string{`"int"`}, `"float"`, true},
		{Backward, []string{`"int"`}, `"double"`, true},
		{Backward, []string{`"double"`}, `"int"`, false},
		{Backward, []string{`"int"`}, `"string"`, false},
	} {
		var earlier []*Schema
		for _, e := range c.earlier {
			earlier = append(earlier, mustParse(t, e))
		}
		problems := Compatible(c.level, mustParse(t, c.next), earlier)
		if (len(problems) == 0) != c.ok {
			t.Errorf("%s: %v then %s: compatible %v, want %v (%v)", c.level, c.earlier, c.next, len(problems) == 0, c.ok, problems)
		}
	}
}

// TestSameSchema: whitespace, key order and number spelling do not make
// another schema; a default or a field does.
func TestSameSchema(t *testing.T) {
	a := mustParse(t, v2)
	b := mustParse(t, "{\n \"name\": \"R\", \"type\": \"record\",\n \"fields\": [{\"type\":\"int\",\"name\":\"a\"}, {\"default\":\"x\",\"name\":\"b\",\"type\":\"string\"}]}")
	if a.Canonical != b.Canonical {
		t.Fatalf("one schema, two forms:\n%s\n%s", a.Canonical, b.Canonical)
	}
	c := mustParse(t, strings.Replace(v2, `"default":"x"`, `"default":"y"`, 1))
	if a.Canonical == c.Canonical {
		t.Fatal("another default is the same schema")
	}
}

// TestReferences: a reference's named types are known to the schema that
// references it, and only through the reference.
func TestReferences(t *testing.T) {
	item := `{"type":"record","name":"Item","namespace":"shop","fields":[{"name":"sku","type":"string"}]}`
	cart := `{"type":"record","name":"Cart","namespace":"shop","fields":[{"name":"item","type":"shop.Item"}]}`
	resolve := func(subject string, v int32) (Def, bool) {
		if subject == "item" && v == 1 {
			return Def{Text: item}, true
		}
		return Def{}, false
	}
	if _, err := Parse(Def{Text: cart, Refs: []Ref{{Name: "shop.Item", Subject: "item", Version: 1}}}, resolve); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(Def{Text: cart}, resolve); !errors.Is(err, ErrInvalid) {
		t.Fatalf("without its reference: %v", err)
	}
	if _, err := Parse(Def{Text: cart, Refs: []Ref{{Name: "shop.Item", Subject: "item", Version: 2}}}, resolve); !errors.Is(err, ErrReference) {
		t.Fatalf("a reference to nothing: %v", err)
	}
	// A reference to itself, through a subject that resolves to a schema
	// referencing it again, stops at the depth limit.
	loop := func(string, int32) (Def, bool) {
		return Def{Text: item, Refs: []Ref{{Name: "x", Subject: "loop", Version: 1}}}, true
	}
	if _, err := Parse(Def{Text: item, Refs: []Ref{{Name: "x", Subject: "loop", Version: 1}}}, loop); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a loop of references: %v", err)
	}
}

// TestTypes: Protobuf is refused as not served yet, an unknown type as
// unknown.
func TestTypes(t *testing.T) {
	for _, typ := range []string{TypeProtobuf, "XML"} {
		if _, err := Parse(Def{Type: typ, Text: "{}"}, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", typ, err)
		}
	}
}
