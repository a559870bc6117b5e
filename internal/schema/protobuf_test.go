package schema

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

func protoParse(t *testing.T, text string, refs map[string]string) (*Schema, error) {
	t.Helper()
	var rs []Ref
	for name := range refs {
		rs = append(rs, Ref{Name: name, Subject: name, Version: 1})
	}
	return Parse(Def{Type: TypeProtobuf, Text: text, Refs: rs}, func(subject string, _ int32) (Def, bool) {
		text, ok := refs[subject]
		return Def{Type: TypeProtobuf, Text: text}, ok
	})
}

func mustProto(t *testing.T, text string) *Schema {
	t.Helper()
	s, err := protoParse(t, text, nil)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return s
}

const protoOrder = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
// An order.
message Order {
  string id = 1;
  int64 cents = 2;
  repeated string items = 3;
  map<string, int32> counts = 4;
  google.protobuf.Timestamp at = 5;
  Status status = 6;
  message Line { string sku = 1; }
  Line first = 7;
  enum Status { NEW = 0; PAID = 1; }
}
message Refund { string order_id = 1; }
`

// TestProtobufParse: a .proto file parses with Google's well-known types
// and the schemas its references name, and nothing else: an import
// without a reference, a syntax error and an unknown type are invalid.
func TestProtobufParse(t *testing.T) {
	s := mustProto(t, protoOrder)
	if n, ok := s.RecordName(); !ok || n != "shop.Order" {
		t.Fatalf("record name %q %v", n, ok)
	}
	// Layout and comments do not make another schema.
	other := mustProto(t, strings.ReplaceAll(strings.ReplaceAll(protoOrder, "  ", "\t\t"), "// An order.", "/* another\ncomment */"))
	if other.Canonical != s.Canonical {
		t.Fatalf("canonical forms differ:\n%s\n%s", s.Canonical, other.Canonical)
	}
	if again := mustProto(t, s.Canonical); again.Canonical != s.Canonical {
		t.Fatalf("the canonical form is not a fixed point:\n%s\n%s", s.Canonical, again.Canonical)
	}
	if strings.Contains(s.Canonical, "order.") || !strings.Contains(s.Canonical, `"google/protobuf/timestamp.proto"`) {
		t.Fatalf("canonical form:\n%s", s.Canonical)
	}
	if mustProto(t, strings.Replace(protoOrder, "cents = 2", "cent = 2", 1)).Canonical == s.Canonical {
		t.Fatal("a renamed field keeps the canonical form")
	}
	for _, bad := range []string{
		`syntax = "proto3"; import "other.proto"; message M { Other o = 1; }`,
		`syntax = "proto3"; message M { string a = 1 }`,
		`syntax = "proto3"; message M { Unknown a = 1; }`,
		`syntax = "proto3"; message M { string a = 1; int32 b = 1; }`,
		`syntax = "proto3"; import "/etc/passwd";`,
	} {
		if _, err := protoParse(t, bad, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	// A reference, by the import path the file uses.
	ref := `syntax = "proto3"; package common; message Money { int64 cents = 1; string currency = 2; }`
	withRef := `syntax = "proto3"; package shop; import "common/money.proto"; message Price { common.Money amount = 1; }`
	p, err := protoParse(t, withRef, map[string]string{"common/money.proto": ref})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := p.RecordName(); n != "shop.Price" {
		t.Fatal(n)
	}
	if _, err := Parse(Def{Type: TypeProtobuf, Text: withRef, Refs: []Ref{{Name: "common/money.proto", Subject: "gone", Version: 1}}},
		func(string, int32) (Def, bool) { return Def{}, false }); !errors.Is(err, ErrReference) {
		t.Fatalf("a reference to nothing: %v", err)
	}
	if _, err := Parse(Def{Type: TypeProtobuf, Text: withRef, Refs: []Ref{{Name: "common/money.proto", Subject: "m", Version: 1}}},
		func(string, int32) (Def, bool) { return Def{Type: TypeAvro, Text: `"int"`}, true }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a reference to an Avro schema: %v", err)
	}
}

// TestProtobufCompatibility: Confluent's rules for Protobuf, each change
// in both directions where it matters.
func TestProtobufCompatibility(t *testing.T) {
	const (
		base      = `syntax = "proto3"; package p; message M { string s = 1; int32 n = 2; }`
		addField  = `syntax = "proto3"; package p; message M { string s = 1; int32 n = 2; bool b = 3; }`
		dropField = `syntax = "proto3"; package p; message M { string s = 1; }`
		renamed   = `syntax = "proto3"; package p; message M { string text = 1; int32 n = 2; }`
		widened   = `syntax = "proto3"; package p; message M { bytes s = 1; int64 n = 2; }`
		toSigned  = `syntax = "proto3"; package p; message M { string s = 1; sint32 n = 2; }`
		toFixed   = `syntax = "proto3"; package p; message M { string s = 1; fixed32 n = 2; }`
		toMessage = `syntax = "proto3"; package p; message M { string s = 1; N n = 2; } message N {}`
		toEnum    = `syntax = "proto3"; package p; message M { string s = 1; E n = 2; } enum E { Z = 0; }`
		repeatedN = `syntax = "proto3"; package p; message M { string s = 1; repeated int32 n = 2; }`
		repeatedS = `syntax = "proto3"; package p; message M { repeated string s = 1; int32 n = 2; }`
		pkg       = `syntax = "proto3"; package q; message M { string s = 1; int32 n = 2; }`
		addMsg    = `syntax = "proto3"; package p; message A {} message M { string s = 1; int32 n = 2; }`
		noM       = `syntax = "proto3"; package p; message Other { string s = 1; int32 n = 2; }`
		qualified = `syntax = "proto3"; package p; message M { string s = 1; int32 n = 2; .p.M.In in = 3; message In { int32 x = 1; } }`
		unqual    = `syntax = "proto3"; package p; message M { string s = 1; int32 n = 2; In in = 3; message In { int32 x = 1; } }`
		inChanged = `syntax = "proto3"; package p; message M { string s = 1; int32 n = 2; In in = 3; message In { string x = 1; } }`
		oneofBase = `syntax = "proto3"; package p; message M { oneof o { string a = 1; int32 b = 2; } int32 c = 3; int32 d = 4; }`
		oneofAdd  = `syntax = "proto3"; package p; message M { oneof o { string a = 1; int32 b = 2; int32 e = 5; } int32 c = 3; int32 d = 4; }`
		oneofDrop = `syntax = "proto3"; package p; message M { oneof o { string a = 1; } int32 c = 3; int32 d = 4; }`
		oneofGone = `syntax = "proto3"; package p; message M { int32 c = 3; int32 d = 4; }`
		oneofOut  = `syntax = "proto3"; package p; message M { oneof o { string a = 1; } int32 b = 2; int32 c = 3; int32 d = 4; }`
		oneofIn1  = `syntax = "proto3"; package p; message M { oneof o { string a = 1; int32 b = 2; } oneof x { int32 c = 3; } int32 d = 4; }`
		oneofIn2  = `syntax = "proto3"; package p; message M { oneof o { string a = 1; int32 b = 2; } oneof x { int32 c = 3; int32 d = 4; } }`
		oneofJoin = `syntax = "proto3"; package p; message M { oneof o { string a = 1; int32 b = 2; int32 c = 3; } int32 d = 4; }`
		req2      = `syntax = "proto2"; package p; message M { optional string s = 1; }`
		req2Added = `syntax = "proto2"; package p; message M { optional string s = 1; required int32 r = 2; }`
		enumBase  = `syntax = "proto3"; package p; enum E { A = 0; B = 1; } message M { E e = 1; }`
		enumMore  = `syntax = "proto3"; package p; enum E { A = 0; B2 = 1; C = 2; } message M { E e = 1; }`
		mapBase   = `syntax = "proto3"; package p; message M { map<string, int32> m = 1; }`
		mapWider  = `syntax = "proto3"; package p; message M { map<string, int64> m = 1; }`
		mapOther  = `syntax = "proto3"; package p; message M { map<string, string> m = 1; }`
		mapAsList = `syntax = "proto3"; package p; message M { repeated int32 m = 1; }`
		optional3 = `syntax = "proto3"; package p; message M { string s = 1; optional int32 n = 2; }`
	)
	for _, c := range []struct {
		name, from, to string
		backward       bool   // to reads what from wrote
		forward        bool   // from reads what to wrote
		kind           string // a difference the refusal names
	}{
		{"field added", base, addField, true, true, ""},
		{"field removed", base, dropField, true, true, ""},
		{"field renamed", base, renamed, true, true, ""},
		{"string to bytes, int32 to int64", base, widened, true, true, ""},
		{"int32 to sint32", base, toSigned, false, false, "FIELD_SCALAR_KIND_CHANGED #/M/2"},
		{"int32 to fixed32", base, toFixed, false, false, "FIELD_SCALAR_KIND_CHANGED"},
		{"int32 to a message", base, toMessage, false, false, "FIELD_KIND_CHANGED #/M/2"},
		{"int32 to an enum", base, toEnum, true, true, ""},
		{"int32 to repeated", base, repeatedN, false, false, "FIELD_NUMERIC_LABEL_CHANGED #/M/2"},
		{"string to repeated", base, repeatedS, true, true, ""},
		{"proto3 optional on a number", base, optional3, false, false, "FIELD_NUMERIC_LABEL_CHANGED"},
		{"package changed", base, pkg, false, false, "PACKAGE_CHANGED #/"},
		{"message added", base, addMsg, true, false, "MESSAGE_REMOVED #/A"},
		{"message replaced", base, noM, false, false, "MESSAGE_REMOVED #/M"},
		{"qualified names", qualified, unqual, true, true, ""},
		{"nested field changed", unqual, inChanged, false, false, "FIELD_SCALAR_KIND_CHANGED #/M/In/1"},
		{"oneof member added", oneofBase, oneofAdd, true, false, "ONEOF_FIELD_REMOVED #/M/o/5"},
		{"oneof member removed", oneofBase, oneofDrop, false, true, "ONEOF_FIELD_REMOVED #/M/o/2"},
		{"oneof removed whole", oneofBase, oneofGone, true, true, ""},
		{"oneof member moved out", oneofBase, oneofOut, true, false, "FIELD_MOVED_TO_EXISTING_ONEOF #/M/o"},
		{"field moved into a new oneof", oneofBase, oneofIn1, true, true, ""},
		{"fields moved into one new oneof", oneofBase, oneofIn2, false, true, "MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/x"},
		{"field moved into an existing oneof", oneofBase, oneofJoin, false, true, "FIELD_MOVED_TO_EXISTING_ONEOF #/M/o"},
		{"required field added", req2, req2Added, false, false, "REQUIRED_FIELD_ADDED #/M/2"},
		{"enum constants renamed and added", enumBase, enumMore, true, true, ""},
		{"map value widened", mapBase, mapWider, true, true, ""},
		{"map value changed", mapBase, mapOther, false, false, "FIELD_SCALAR_KIND_CHANGED #/M/1"},
		{"map to repeated", mapBase, mapAsList, false, false, "FIELD_KIND_CHANGED #/M/1"},
	} {
		from, to := mustProto(t, c.from), mustProto(t, c.to)
		bw := Compatible(Backward, to, []*Schema{from})
		fw := Compatible(Forward, to, []*Schema{from})
		if (len(bw) == 0) != c.backward || (len(fw) == 0) != c.forward {
			t.Errorf("%s: backward %v (want ok=%v), forward %v (want ok=%v)", c.name, bw, c.backward, fw, c.forward)
			continue
		}
		if c.kind != "" && !strings.Contains(strings.Join(append(bw, fw...), " "), c.kind) {
			t.Errorf("%s: %v %v does not name %s", c.name, bw, fw, c.kind)
		}
		if full := Compatible(Full, to, []*Schema{from}); (len(full) == 0) != (c.backward && c.forward) {
			t.Errorf("%s: full %v", c.name, full)
		}
	}
}

// TestProtobufImportedTypeChanged: a field's message type from a reference
// compares by contents when the reference moves to another version.
func TestProtobufImportedTypeChanged(t *testing.T) {
	text := `syntax = "proto3"; package shop; import "money.proto"; message Price { common.Money amount = 1; }`
	v1, err := protoParse(t, text, map[string]string{"money.proto": `syntax = "proto3"; package common; message Money { int64 cents = 1; }`})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := protoParse(t, text, map[string]string{"money.proto": `syntax = "proto3"; package common; message Money { int64 cents = 1; string currency = 2; }`})
	if err != nil {
		t.Fatal(err)
	}
	v3, err := protoParse(t, text, map[string]string{"money.proto": `syntax = "proto3"; package common; message Money { double cents = 1; }`})
	if err != nil {
		t.Fatal(err)
	}
	if p := Compatible(FullTransitive, v2, []*Schema{v1}); len(p) != 0 {
		t.Fatalf("a field added in the reference: %v", p)
	}
	p := Compatible(Backward, v3, []*Schema{v1})
	if !strings.Contains(strings.Join(p, " "), "FIELD_NAMED_TYPE_CHANGED #/Price/1") {
		t.Fatalf("a field's type changed in the reference: %v", p)
	}
}

// TestProtobufPayload: message indexes name a message (nested ones too);
// a payload validates when it is such a message, decodes to Protobuf's
// JSON mapping, and gives RecordNameStrategy its message's name.
func TestProtobufPayload(t *testing.T) {
	s := mustProto(t, protoOrder)
	order := s.Proto().Messages().ByName("Order")
	m := dynamicpb.NewMessage(order)
	m.Set(order.Fields().ByName("id"), protoreflect.ValueOf("o-1"))
	m.Set(order.Fields().ByName("cents"), protoreflect.ValueOf(int64(1250)))
	msg, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	payload := pp([]int{0}, msg)
	if err := s.Validate(payload); err != nil {
		t.Fatal(err)
	}
	js, err := s.DecodeJSON(payload)
	if err != nil || string(js) != `{"id":"o-1","cents":"1250"}` {
		t.Fatalf("%s %v", js, err)
	}
	if n, _ := s.RecordNameOf(payload); n != "shop.Order" {
		t.Fatal(n)
	}
	// [0, 0]: Order.Line (the map's entry is not counted); [1]: Refund.
	line := order.Messages().ByName("Line")
	lm := dynamicpb.NewMessage(line)
	lm.Set(line.Fields().ByName("sku"), protoreflect.ValueOf("A-1"))
	lb, _ := proto.Marshal(lm)
	if js, err := s.DecodeJSON(pp([]int{0, 0}, lb)); err != nil || string(js) != `{"sku":"A-1"}` {
		t.Fatalf("Order.Line: %s %v", js, err)
	}
	if n, _ := s.RecordNameOf(pp([]int{0, 0}, nil)); n != "shop.Order.Line" {
		t.Fatal(n)
	}
	if n, _ := s.RecordNameOf(pp([]int{1}, nil)); n != "shop.Refund" {
		t.Fatal(n)
	}
	for name, bad := range map[string][]byte{
		"no indexes":            nil,
		"an index past the end": pp([]int{2}, msg),
		"a nested index past":   pp([]int{0, 1}, msg),
		"a negative count":      {1},
		"too many indexes":      pp(make([]int, MaxIndexes+1), nil),
		"a cut message":         payload[:len(payload)-1],
		"a length past the end": pp([]int{0}, []byte{0x0a, 5, 'a'}),
		"a field number 0":      pp([]int{0}, []byte{0x00, 1}),
		"invalid UTF-8":         pp([]int{0}, []byte{0x0a, 1, 0xff}),
	} {
		if err := s.Validate(bad); err == nil {
			t.Errorf("%s: % x validates", name, bad)
		}
	}
	// Proto2's required fields must be there.
	p2 := mustProto(t, `syntax = "proto2"; message R { required int32 a = 1; }`)
	if err := p2.Validate(pp([]int{0}, nil)); !errors.Is(err, ErrPayload) {
		t.Fatalf("a missing required field: %v", err)
	}
	if err := p2.Validate(pp([]int{0}, []byte{0x08, 5})); err != nil {
		t.Fatal(err)
	}
}

// pp is a Protobuf payload: message indexes, then msg.
func pp(idx []int, msg []byte) []byte { return append(AppendProtoIndexes(nil, idx), msg...) }

// TestProtoIndexes: the indexes' encoding, as franz-go's sr and
// Confluent's serializers write it.
func TestProtoIndexes(t *testing.T) {
	for _, idx := range [][]int{{0}, {1}, {0, 0}, {3, 1, 4}} {
		got, rest, err := ProtoIndexes(pp(idx, []byte{9}))
		if err != nil || len(got) != len(idx) || string(rest) != "\x09" {
			t.Fatalf("%v: %v % x %v", idx, got, rest, err)
		}
		for i := range idx {
			if got[i] != idx[i] {
				t.Fatalf("%v: %v", idx, got)
			}
		}
	}
	if b := pp([]int{0}, nil); string(b) != "\x00" {
		t.Fatalf("[0] is % x, not the shortcut 00", b)
	}
	if b := pp([]int{1, 2}, nil); string(b) != "\x04\x02\x04" {
		t.Fatalf("[1 2] is % x (zigzag varints)", b)
	}
}
