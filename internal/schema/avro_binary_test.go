package schema

import (
	"errors"
	"testing"

	"github.com/hamba/avro/v2"
)

const everything = `{"type":"record","name":"All","namespace":"t","fields":[
	{"name":"n","type":"null"},{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
	{"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"by","type":"bytes"},{"name":"s","type":"string"},
	{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
	{"name":"x","type":{"type":"fixed","name":"X","size":3}},
	{"name":"a","type":{"type":"array","items":"int"}},
	{"name":"m","type":{"type":"map","values":["null","string"]}},
	{"name":"u","type":["null","t.E","long"]},
	{"name":"next","type":["null","All"],"default":null},
	{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`

type allT struct {
	N    any                `avro:"n"`
	B    bool               `avro:"b"`
	I    int32              `avro:"i"`
	L    int64              `avro:"l"`
	F    float32            `avro:"f"`
	D    float64            `avro:"d"`
	By   []byte             `avro:"by"`
	S    string             `avro:"s"`
	E    string             `avro:"e"`
	X    [3]byte            `avro:"x"`
	A    []int32            `avro:"a"`
	M    map[string]*string `avro:"m"`
	U    any                `avro:"u"`
	Next *allT              `avro:"next"`
	TS   int64              `avro:"ts"`
}

// TestValidateAvro: what hamba/avro writes validates, and what no Avro
// writer writes does not (Avro 1.11 specification, "Binary Encoding").
func TestValidateAvro(t *testing.T) {
	s := mustParse(t, everything)
	str := "v"
	v := allT{B: true, I: -7, L: 1 << 40, F: 1.5, D: -2.25, By: []byte{1, 2}, S: "héllo", E: "C", X: [3]byte{1, 2, 3},
		A: []int32{1, 2, 3}, M: map[string]*string{"k": &str, "z": nil}, U: map[string]any{"long": int64(9)},
		Next: &allT{E: "A", A: []int32{}, M: map[string]*string{}, U: nil}}
	good, err := avro.Marshal(s.Avro(), v)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(good); err != nil {
		t.Fatalf("hamba/avro's encoding: %v", err)
	}
	for name, b := range map[string][]byte{
		"empty":          {},
		"one byte short": good[:len(good)-1],
		"one byte extra": append(append([]byte{}, good...), 0),
		"boolean 2":      {2},
	} {
		if err := s.Validate(b); !errors.Is(err, ErrPayload) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, c := range []struct {
		schema string
		b      []byte
		ok     bool
	}{
		{`"boolean"`, []byte{1}, true},
		{`"boolean"`, []byte{2}, false},
		{`"int"`, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f}, true},  // MaxInt32
		{`"int"`, []byte{0x80, 0x80, 0x80, 0x80, 0x10}, false}, // 2^31
		{`"long"`, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, false},
		{`"string"`, []byte{0x01}, false},                                // length -1
		{`"string"`, []byte{0x06, 'a', 'b'}, false},                      // length 3, 2 bytes
		{`{"type":"enum","name":"E","symbols":["A"]}`, []byte{2}, false}, // index 1 of 1 symbol
		{`["null","int"]`, []byte{4}, false},                             // union index 2
		{`["null","int"]`, []byte{2, 2}, true},
		{`{"type":"array","items":"null"}`, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f, 0}, false}, // 2^31-1 nulls in 6 bytes
		{`{"type":"array","items":"null"}`, []byte{0x06, 0}, true},                          // 3 nulls
		{`{"type":"array","items":"int"}`, []byte{0x03, 0x04, 2, 4, 0}, true},               // a block of -2 items, 2 bytes
		{`{"type":"array","items":"int"}`, []byte{0x03, 0x03, 2, 4, 0}, false},              // a negative block size
		{`{"type":"map","values":"int"}`, []byte{0x02, 0x02, 'k', 0x02, 0}, true},
		{`{"type":"fixed","name":"F","size":2}`, []byte{1}, false},
	} {
		err := mustParse(t, c.schema).Validate(c.b)
		if (err == nil) != c.ok {
			t.Errorf("%s % x: %v, want ok %v", c.schema, c.b, err, c.ok)
		}
	}
}

// TestParseWire: Confluent's wire format, and what is not in it.
func TestParseWire(t *testing.T) {
	id, p, err := ParseWire(AppendWire(nil, 258))
	if err != nil || id != 258 || len(p) != 0 {
		t.Fatalf("%d % x %v", id, p, err)
	}
	for _, b := range [][]byte{nil, {0, 0, 0, 1}, {1, 0, 0, 0, 1}, {0, 0, 0, 0, 0}, {0, 0x80, 0, 0, 0}} {
		if _, _, err := ParseWire(b); !errors.Is(err, ErrWire) {
			t.Errorf("% x: %v", b, err)
		}
	}
}

// TestDecodeJSON: a payload decodes to the JSON of its value.
func TestDecodeJSON(t *testing.T) {
	s := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"tags","type":{"type":"map","values":"string"}},
		{"name":"note","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},{"name":"b","type":"bytes"}]}`)
	b, err := avro.Marshal(s.Avro(), map[string]any{"id": int64(7), "tags": map[string]any{"x": "y"}, "note": "hi", "e": "B", "b": []byte{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.DecodeJSON(b)
	if err != nil || string(got) != `{"b":"AQI=","e":"B","id":7,"note":"hi","tags":{"x":"y"}}` {
		t.Fatalf("%s %v", got, err)
	}
	if _, err := s.DecodeJSON(b[:len(b)-1]); !errors.Is(err, ErrPayload) {
		t.Fatalf("a cut payload: %v", err)
	}
}
