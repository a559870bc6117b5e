package schema

import (
	"errors"
	"strings"
	"testing"
)

func mustJSON(t *testing.T, text string, refs ...Ref) *Schema {
	t.Helper()
	s, err := Parse(Def{Type: TypeJSON, Text: text, Refs: refs}, jsonResolver)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return s
}

// jsonResolver holds one referenced schema: customer.json, subject
// "customer" version 1.
func jsonResolver(subject string, v int32) (Def, bool) {
	if subject == "customer" && v == 1 {
		return Def{Type: TypeJSON, Text: `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`}, true
	}
	return Def{}, false
}

const (
	// An open content model (additionalProperties absent).
	jOpen1 = `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`
	// jOpen2 adds a property to the open model: not BACKWARD (old data may
	// hold "note" with any type), FORWARD (the old schema takes anything
	// under a new name).
	jOpen2 = `{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id"]}`
	// A closed model, and an optional property added to it: BACKWARD
	// (old data never has it), not FORWARD (the old closed schema refuses
	// new data holding it).
	jClosed1 = `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":false}`
	jClosed2 = `{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id"],"additionalProperties":false}`
	// jClosed3 requires the new property: neither BACKWARD nor FORWARD
	// for the closed model.
	jClosed3 = `{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id","note"],"additionalProperties":false}`
	// jWide widens id to a number and drops its requirement.
	jWide = `{"type":"object","properties":{"id":{"type":"number"}}}`
)

// TestJSONCompatibility: each level with JSON schemas that pass and fail,
// after the content-model rules of Confluent's registry.
func TestJSONCompatibility(t *testing.T) {
	for _, c := range []struct {
		level   string
		earlier []string
		next    string
		ok      bool
	}{
		{Backward, []string{jOpen1}, jOpen2, false},
		{Forward, []string{jOpen1}, jOpen2, true},
		{Backward, []string{jClosed1}, jClosed2, true},
		{Forward, []string{jClosed1}, jClosed2, false},
		{Full, []string{jClosed1}, jClosed2, false},
		{Backward, []string{jClosed1}, jClosed3, false},
		{Backward, []string{jOpen1}, jWide, true},
		{Forward, []string{jOpen1}, jWide, false},
		{Backward, []string{jWide}, jOpen1, false},
		{Full, []string{jOpen1}, jOpen1, true},
		{None, []string{jOpen1}, `{"type":"string"}`, true},
		{Backward, []string{jOpen1}, `{"type":"string"}`, false},
		// Transitive: jClosed2 after jClosed1 then jClosed3.
		{Backward, []string{jClosed1, jClosed3}, jClosed2, true},
		{BackwardTransitive, []string{jClosed3, jClosed1}, jClosed2, true},
		{ForwardTransitive, []string{jClosed1, jClosed2}, jClosed2, false},
		{FullTransitive, []string{jClosed2}, jClosed2, true},
		// Enums grow backward, shrink forward.
		{Backward, []string{`{"enum":["a","b"]}`}, `{"enum":["a","b","c"]}`, true},
		{Forward, []string{`{"enum":["a","b"]}`}, `{"enum":["a","b","c"]}`, false},
		// Bounds.
		{Backward, []string{`{"type":"string","maxLength":10}`}, `{"type":"string","maxLength":20}`, true},
		{Backward, []string{`{"type":"string","maxLength":10}`}, `{"type":"string","maxLength":5}`, false},
		{Backward, []string{`{"type":"integer","minimum":0}`}, `{"type":"integer","exclusiveMinimum":0}`, false},
		{Backward, []string{`{"type":"integer","exclusiveMinimum":0}`}, `{"type":"integer","minimum":0}`, true},
		{Backward, []string{`{"type":"number","multipleOf":0.5}`}, `{"type":"number","multipleOf":0.25}`, true},
		{Backward, []string{`{"type":"number","multipleOf":0.25}`}, `{"type":"number","multipleOf":0.5}`, false},
		// Arrays and combinations.
		{Backward, []string{`{"type":"array","items":{"type":"integer"}}`}, `{"type":"array","items":{"type":"number"}}`, true},
		{Backward, []string{`{"type":"array","items":{"type":"number"}}`}, `{"type":"array","items":{"type":"integer"}}`, false},
		{Backward, []string{`{"type":"string"}`}, `{"oneOf":[{"type":"string"},{"type":"null"}]}`, true},
		{Backward, []string{`{"oneOf":[{"type":"string"},{"type":"null"}]}`}, `{"type":"string"}`, false},
		{Backward, []string{`{"anyOf":[{"type":"string"},{"type":"null"}]}`}, `{"type":["string","null"]}`, true},
		// References, inside and across documents.
		{Backward, []string{`{"type":"object","properties":{"a":{"$ref":"#/definitions/x"}},"definitions":{"x":{"type":"integer"}}}`},
			`{"type":"object","properties":{"a":{"$ref":"#/definitions/x"}},"definitions":{"x":{"type":"number"}}}`, true},
		{Backward, []string{`{"type":"object","properties":{"a":{"$ref":"#/definitions/x"}},"definitions":{"x":{"type":"number"}}}`},
			`{"type":"object","properties":{"a":{"$ref":"#/definitions/x"}},"definitions":{"x":{"type":"integer"}}}`, false},
		// Names a writer's patternProperties allow, which a closed reader
		// refuses; 2020-12's prefixItems compared whole.
		{Backward, []string{`{"type":"object","additionalProperties":false,"patternProperties":{"^x":{}}}`}, `{"type":"object","additionalProperties":false}`, false},
		{Backward, []string{`{"type":"array"}`}, `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array","prefixItems":[{"type":"string"}]}`, false},
		// A recursive schema against itself.
		{Full, []string{`{"type":"object","properties":{"next":{"$ref":"#"}}}`}, `{"type":"object","properties":{"next":{"$ref":"#"}}}`, true},
	} {
		var earlier []*Schema
		for _, e := range c.earlier {
			earlier = append(earlier, mustJSON(t, e))
		}
		problems := Compatible(c.level, mustJSON(t, c.next), earlier)
		if (len(problems) == 0) != c.ok {
			t.Errorf("%s: %v then %s: compatible %v, want %v (%v)", c.level, c.earlier, c.next, len(problems) == 0, c.ok, problems)
		}
	}
	// An Avro schema and a JSON one are not compatible.
	if p := Compatible(Backward, mustJSON(t, jOpen1), []*Schema{mustParse(t, `"string"`)}); len(p) == 0 {
		t.Error("a JSON schema after an Avro one is compatible")
	}
}

// TestJSONValidate: payloads valid under the schema, and not.
func TestJSONValidate(t *testing.T) {
	s := mustJSON(t, `{"type":"object","properties":{"id":{"type":"integer"},"customer":{"$ref":"customer.json"}},"required":["id"]}`,
		Ref{Name: "customer.json", Subject: "customer", Version: 1})
	for _, c := range []struct {
		payload string
		ok      bool
	}{
		{`{"id": 7}`, true},
		{`{"id": 7, "customer": {"name": "ada"}}`, true},
		{` {"id": 12345678901234567890} `, true},
		{`{"id": 7.5}`, false},
		{`{"customer": {"name": "ada"}}`, false},
		{`{"id": 7, "customer": {}}`, false},
		{`{"id": 7} {"id": 8}`, false},
		{`{"id": 7`, false},
		{`[]`, false},
		{`{"id": 1e999999999}`, false},
		{`{"id": 1` + strings.Repeat("0", 500) + `}`, false},
		{`{"id": 1e2, "customer": {"name": "x"}}`, true},
	} {
		if err := s.Validate([]byte(c.payload)); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.payload, err, c.ok)
		}
	}
	if js, err := s.DecodeJSON([]byte(" {\"id\": 7} ")); err != nil || string(js) != `{"id":7}` {
		t.Fatalf("DecodeJSON: %s %v", js, err)
	}
	if name, ok := mustJSON(t, `{"title":"shop.Order","type":"object"}`).RecordName(); !ok || name != "shop.Order" {
		t.Fatalf("record name: %q %v", name, ok)
	}
}

// TestJSONNoLoading: a $ref to anything but the schema and its references
// is refused: nothing is read from a file or the network.
func TestJSONNoLoading(t *testing.T) {
	for _, ref := range []string{"file:///etc/passwd", "https://example.com/s.json", "other.json", "/etc/hostname"} {
		_, err := Parse(Def{Type: TypeJSON, Text: `{"$ref":"` + ref + `"}`}, jsonResolver)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a reference of the schema") {
			t.Errorf("$ref %s: %v", ref, err)
		}
	}
	if _, err := Parse(Def{Type: TypeJSON, Text: `{"type":`}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("not JSON: %v", err)
	}
	if _, err := Parse(Def{Type: TypeJSON, Text: `{"type":"number","multipleOf":1e-1000000}`}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("a huge exponent: %v", err)
	}
	if _, err := Parse(Def{Type: TypeJSON, Text: `{"type":"strin"}`}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("an unknown type: %v", err)
	}
	// The same schema spelled otherwise has one canonical form.
	if a, b := mustJSON(t, `{"type":"object","required":["a"]}`), mustJSON(t, "{ \"required\": [\"a\"],\n \"type\": \"object\" }"); a.Canonical != b.Canonical {
		t.Fatalf("%s != %s", a.Canonical, b.Canonical)
	}
}
