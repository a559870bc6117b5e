package schema

import (
	"errors"
	"testing"

	"github.com/hamba/avro/v2"
)

// TestField: the string at a field path of a value, in each format: Avro
// (through a union's branch), JSON Schema and Protobuf (by the .proto
// file's names); a missing or null field is not found; a field of another
// type and a payload that does not decode are errors.
func TestField(t *testing.T) {
	a := mustParse(t, `{"type":"record","name":"E","namespace":"x","fields":[{"name":"n","type":"long"},
		{"name":"c","type":["null",{"type":"record","name":"C","fields":[{"name":"region","type":"string"}]}]}]}`)
	type c struct {
		Region string `avro:"region"`
	}
	type e struct {
		N int64 `avro:"n"`
		C *c    `avro:"c"`
	}
	with, err := avro.Marshal(a.Avro(), e{1, &c{"eu.fr"}})
	if err != nil {
		t.Fatal(err)
	}
	without, _ := avro.Marshal(a.Avro(), e{N: 2})
	j, err := Parse(Def{Type: TypeJSON, Text: `{"type":"object"}`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := mustProto(t, `syntax = "proto3"; message E { int64 n = 1; C customer_info = 2; } message C { string region = 1; repeated string tags = 2; }`)
	for _, tc := range []struct {
		name    string
		s       *Schema
		payload []byte
		path    []string
		want    string
		found   bool
		err     bool
	}{
		{"avro, through a union", a, with, []string{"c", "region"}, "eu.fr", true, false},
		{"avro, the union's null", a, without, []string{"c", "region"}, "", false, false},
		{"avro, no such field", a, with, []string{"c", "zone"}, "", false, false},
		{"avro, a long", a, with, []string{"n"}, "", false, true},
		{"avro, cut", a, with[:len(with)-1], []string{"c", "region"}, "", false, true},
		{"json", j, []byte(`{"c":{"region":"us.ny"}}`), []string{"c", "region"}, "us.ny", true, false},
		{"json, null", j, []byte(`{"c":null}`), []string{"c", "region"}, "", false, false},
		{"json, a number", j, []byte(`{"c":{"region":7}}`), []string{"c", "region"}, "", false, true},
		{"protobuf", p, pp([]int{0}, []byte{0x12, 7, 0x0a, 5, 'e', 'u', '.', 'd', 'e'}), []string{"customer_info", "region"}, "eu.de", true, false},
		{"protobuf, not set", p, pp([]int{0}, []byte{0x08, 1}), []string{"customer_info", "region"}, "", false, false},
		{"protobuf, a list", p, pp([]int{0}, []byte{0x12, 3, 0x12, 1, 'a'}), []string{"customer_info", "tags"}, "", false, true},
		{"protobuf, an int64", p, pp([]int{0}, []byte{0x08, 1}), []string{"n"}, "", false, true},
	} {
		v, found, err := tc.s.Field(tc.payload, tc.path)
		if string(v) != tc.want || found != tc.found || (err != nil) != tc.err {
			t.Errorf("%s: %q %v %v", tc.name, v, found, err)
		}
	}
	if _, _, err := p.Field(pp([]int{5}, nil), []string{"n"}); !errors.Is(err, ErrPayload) {
		t.Fatalf("indexes naming no message: %v", err)
	}
}
